"""The viewer's conversation listing, a page at a time (docs/web.md ``GET /conversations``):
one request costs a few ``SCAN`` calls of ``COUNT limit`` and one pipeline over the
conversations they found, whatever the size of the keyspace; or, for a scope, a page of
its index (no ``SCAN``: what a tenant's Redis user may run) and the same pipeline."""

from __future__ import annotations

from typing import Any

import redis
import redis.cluster
from redis import exceptions as redis_errors

from .. import admin
from .._core.lifecycle.scope import scope_of_text
from .._core.stored.entries import is_tombstone, parse_seq_counter
from .._core.stored.keys import ConversationKeys, conversation_of, key_pattern
from .._sync import Directory
from ..errors import InvalidArgumentError, PermissionDeniedError

MAX_SCANS = 8
"""``SCAN`` calls one page makes at most: a keyspace mostly of other keys gives a short
(even empty) page with a ``next`` cursor, never an unbounded request."""


def _nodes(client: Any) -> list[Any]:
    """What to ``SCAN``: the client, or each primary of a cluster, in a stable order."""
    if isinstance(client, redis.cluster.RedisCluster):
        primaries = sorted(client.get_primaries(), key=lambda node: node.name)
        return [client.get_redis_connection(node) for node in primaries]
    return [client]


def _position(cursor: str | None, nodes: int) -> tuple[int, int]:
    """``"<node>-<scan cursor>"`` (``None``: the start) as numbers."""
    if cursor is None or cursor == "":
        return 0, 0
    node, _, at = cursor.partition("-")
    if not (node.isascii() and node.isdigit() and at.isascii() and at.isdigit()):
        raise InvalidArgumentError(f"cursor must be a next_cursor of this listing: {cursor!r}")
    if int(node) >= nodes or len(at) > 20:
        raise InvalidArgumentError(f"cursor must be a next_cursor of this listing: {cursor!r}")
    return int(node), int(at)


def listing_page(
    client: Any, prefix: str, cursor: str | None, limit: int
) -> tuple[list[admin.ConversationInfo], str | None]:
    """About ``limit`` conversations (``SCAN``'s ``COUNT`` is a hint) from ``cursor`` on,
    and the cursor of the next page (``None`` after the last)."""
    nodes = _nodes(client)
    node, at = _position(cursor, len(nodes))
    pattern = key_pattern(prefix)
    found: list[tuple[str, bool]] = []  # (conversation, found by its stream)
    for _ in range(MAX_SCANS):
        try:
            at, keys = nodes[node].scan(at, match=pattern, count=limit)
        except redis_errors.NoPermissionError:
            raise PermissionDeniedError(
                "the app's Redis user may not SCAN (a tenant's ACL user): list a scope of "
                "its own with ?scope=<tenant>"
            ) from None
        for key in keys:
            text = key.decode() if isinstance(key, bytes) else str(key)
            if (conversation := conversation_of(prefix, text)) is not None:
                found.append((conversation, False))
            elif (conversation := conversation_of(prefix, text, ":stream")) is not None:
                found.append((conversation, True))
        if int(at) == 0:
            node, at = node + 1, 0
            if node == len(nodes):
                return _describe(client, prefix, found), None
        if len(found) >= limit:
            break
    return _describe(client, prefix, found), f"{node}-{at}"


def _describe(
    client: Any, prefix: str, found: list[tuple[str, bool]]
) -> list[admin.ConversationInfo]:
    """Each conversation's count and last activity: ``GET`` and ``XREVRANGE`` for one
    found by its counter; ``EXISTS`` of the counter for one found by its stream (it is
    listed by its counter), and only for those without one (damaged) the other two."""
    pipe = client.pipeline(transaction=False)
    for conversation, by_stream in found:
        keys = ConversationKeys.build(prefix, conversation)
        if by_stream:
            pipe.exists(keys.seq)
    replies = iter(pipe.execute(raise_on_error=False)) if len(pipe) else iter(())
    counted = [c for c, by_stream in found if not by_stream or next(replies) == 0]
    pipe = client.pipeline(transaction=False)
    for conversation in counted:
        keys = ConversationKeys.build(prefix, conversation)
        pipe.get(keys.seq)
        pipe.xrevrange(keys.stream, count=1)
    replies = iter(pipe.execute(raise_on_error=False)) if counted else iter(())
    infos = []
    for conversation in counted:
        raw, newest = next(replies), next(replies)
        if isinstance(raw, redis_errors.NoPermissionError) or is_tombstone(raw):
            continue  # an ACL user lists what it may read; an erased one is a tombstone
        parsed = parse_seq_counter(raw) if isinstance(raw, (bytes, str)) else None
        last_at = admin._entry_time(newest[0]) if isinstance(newest, list) and newest else None
        infos.append(
            admin.ConversationInfo(conversation, -1 if parsed is None else parsed, last_at)
        )
    return infos


def scope_page(
    client: Any, prefix: str, scope: str, cursor: str | None, limit: int
) -> tuple[list[admin.ConversationInfo], str | None]:
    """A page of ``scope``'s conversations (``"acme/user-42"``) from its index, newest
    registered first (``Directory.list``), and the cursor of the next page."""
    page = Directory(client, prefix=prefix).list(scope_of_text(scope), limit=limit, cursor=cursor)
    infos = _describe(client, prefix, [(c.conversation, False) for c in page.conversations])
    return infos, page.cursor
