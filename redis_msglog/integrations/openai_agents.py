"""The OpenAI Agents SDK's ``Session`` on the message log (``pip install
'redis-msglog[openai-agents]'``).

:class:`MessageLogSession` stores a session's items as the log conversation
``session_id``: one message per item, each giving its item back exactly (the runner
compares ``json.dumps(item, sort_keys=True)``; reasoning, hosted-tool and unknown item
types included), and readable as messages by every other reader of the log
(``to_openai()``, ``to_anthropic()``, ``follow()``, ``msglog show``). How each call maps
to the log:

- ``add_items(items)``: one atomic ``append_many`` (one round trip; a lost reply is
  retried without writing twice);
- ``get_items(limit)``: ``all()`` or ``last(limit)`` of the visible view;
- ``pop_item()``: the log's atomic ``pop()`` (an entry that hides the newest item);
- ``clear_session()``: ``clear()`` (an entry: the history stays readable with
  ``view="physical"``; nothing is deleted);
- compaction (``OpenAIResponsesCompactionSession``): ``_atomic_replace_items`` is
  ``replace()``, and ``_get_compaction_snapshot`` replaces the compacted suffix with
  one ``replace()`` or ``compact()`` conditional on the seq read with the snapshot
  (``expected_seq``): if any worker wrote since, nothing is written and the SDK keeps
  the history.

This module imports the Agents SDK; ``redis_msglog`` itself never does.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import orjson
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from .._core.args import missing_extra

try:
    from agents.items import TResponseInputItem
    from agents.memory.session_settings import (
        SessionSettings,
        coerce_session_settings,
        resolve_session_limit,
    )
    from agents.run_context import RunContextWrapper
except ModuleNotFoundError as exc:  # the extra is not installed
    raise missing_extra("openai-agents", exc) from exc

from .._async import AsyncMessageLog
from ..errors import InvalidArgumentError, SeqConflictError
from ..formats.responses import item_messages, message_items
from ..models import AgentMessage, StoredMessage
from ._clients import LoopClients, LoopLog, client_factory
from ._log_options import integration_options
from ._openai_agents_usage import RunUsage

__all__ = ["MessageLogSession"]


@dataclass(frozen=True)
class CompactionSnapshot:
    """What ``OpenAIResponsesCompactionSession`` reads from ``_get_compaction_snapshot``
    (the shape of the SDK's ``_CompactionSnapshot``): the newest items, whether they are
    the whole history, and the conditional replacement of a suffix of them."""

    items: list[TResponseInputItem]
    complete: bool
    replace_suffix: Callable[[int, list[TResponseInputItem]], Awaitable[bool]]


class MessageLogSession:
    """An Agents SDK ``Session`` (structural: ``Runner.run(..., session=...)``) whose
    history is the log conversation ``session_id``.

    Args:
        session_id: the session id, and the log's conversation id.
        redis: a ``redis.asyncio.Redis`` or ``redis.asyncio.cluster.RedisCluster`` client
            (or a function making one). The session works from any number of event
            loops (``asyncio.run(Runner.run(...))`` twice, threads with loops of their
            own): the client serves the first loop the session runs on, and every other
            loop gets a client with its connection settings (docs/integrations.md).
        session_settings: the SDK's ``SessionSettings`` (``limit``: the default number
            of items ``get_items`` returns).
        **log_options: options of :class:`~redis_msglog.AsyncMessageLog` (``prefix``,
            ``ttl``, ``durability``, ``retry``...).

    Every method also takes the ``wrapper`` keyword (the run context) the runner passes
    to sessions that accept it: ``add_items`` takes the run's usage from it (the model
    calls' tokens since the run's last batch, on the batch's last assistant message);
    the others do not use it. ``.log`` is the underlying
    :class:`~redis_msglog.AsyncMessageLog` (on the running loop's client).
    """

    session_settings: SessionSettings | None = None

    def __init__(
        self,
        session_id: str,
        redis: Redis | RedisCluster | Callable[[], Redis | RedisCluster],
        *,
        session_settings: SessionSettings | dict[str, Any] | None = None,
        **log_options: Any,
    ) -> None:
        log_options = integration_options(log_options)
        self.session_id = session_id
        self.session_settings = _settings(session_settings)
        self._clients = LoopClients(redis)
        self.log: AsyncMessageLog = LoopLog(self._clients, session_id, **log_options)
        self._rendered = _RenderedItems()
        self._run_usage = RunUsage()

    @classmethod
    def from_url(
        cls,
        session_id: str,
        *,
        url: str,
        cluster: bool = False,
        redis_kwargs: dict[str, Any] | None = None,
        session_settings: SessionSettings | dict[str, Any] | None = None,
        **log_options: Any,
    ) -> MessageLogSession:
        """A session on clients of its own (one per event loop), made from ``url``
        (``redis://``, ``rediss://``; ``cluster=True`` for a Redis Cluster node).
        ``redis_kwargs`` go to the clients' ``from_url``."""
        factory = client_factory(url, cluster=cluster, redis_kwargs=redis_kwargs)
        return cls(session_id, factory, session_settings=session_settings, **log_options)

    async def close(self) -> None:
        """Close the clients the session made for the running event loop (a client you
        passed is yours to close)."""
        await self._clients.aclose()

    # -- the Session protocol ---------------------------------------------------------

    async def get_items(
        self, limit: int | None = None, *, wrapper: RunContextWrapper[Any] | None = None
    ) -> list[TResponseInputItem]:
        """The history's items in order; with ``limit`` (or ``session_settings.limit``),
        the newest ``limit`` (``0``: none; negative: all, as ``SQLiteSession``)."""
        n = resolve_session_limit(limit, self.session_settings)
        if n == 0:
            return []
        rows = await (self.log.all() if n is None or n < 0 else self.log.last(n))
        items = self._rendered.items(rows)
        return items if n is None or n < 0 else items[-n:]

    async def add_items(
        self, items: list[TResponseInputItem], *, wrapper: RunContextWrapper[Any] | None = None
    ) -> None:
        """Append the items with one atomic ``append_many`` (all or none, contiguous).
        With the runner's ``wrapper``, the usage of the model calls made since its last
        batch goes on the batch's last assistant message (docs/usage.md)."""
        if not items:
            return
        messages = _messages(items)
        priced = self._run_usage.attach(wrapper, messages) if wrapper is not None else None
        await self.log.append_many(messages)
        if priced is not None:
            priced.settle()

    async def pop_item(
        self, *, wrapper: RunContextWrapper[Any] | None = None
    ) -> TResponseInputItem | None:
        """Hide the newest item with the log's atomic ``pop()`` and return it (``None``
        when the history is empty). A message another writer appended that renders as
        several items (an assistant turn with calls) is hidden whole; its last item is
        returned."""
        while (row := await self.log.pop()) is not None:
            items = _items([row])
            if items:
                return items[-1]
        return None

    async def clear_session(self, *, wrapper: RunContextWrapper[Any] | None = None) -> None:
        """Empty the history with the log's ``clear()``: an entry, not a deleted key."""
        await self.log.clear()

    # -- the compaction hooks (OpenAIResponsesCompactionSession) ----------------------

    async def _atomic_replace_items(self, items: list[TResponseInputItem]) -> bool:
        """Replace the whole history with one ``replace()`` (the SDK's manual compaction).
        Like ``RedisSession``'s, it does not check whether the compaction input is stale;
        the replaced items stay in the physical log. ``False`` for a subclass (which may
        transform items), as the SDK's stores do."""
        if type(self) is not MessageLogSession:
            return False
        await self.log.replace(_messages(items))
        return True

    async def _get_compaction_snapshot(
        self,
        limit: int,
        *,
        prune_prefix: Callable[[TResponseInputItem], bool] | None = None,
    ) -> CompactionSnapshot | None:
        """The newest ``limit`` items, whether they are the whole history, and a
        replacement of a suffix of them that commits only if nobody wrote since the
        snapshot (``expected_seq``; otherwise it returns ``False`` and writes nothing)."""
        if type(self) is not MessageLogSession or limit <= 0:
            return None
        seq = await self.log.count()  # before the read: a write after it fails the check
        rows = await self.log.last(limit + 1)
        complete = len(rows) <= limit
        rows = rows[-limit:]
        items = _items(rows)
        if len(items) != len(rows):
            return None  # messages of other writers that are not one item each

        async def replace_suffix(start: int, output: list[TResponseInputItem]) -> bool:
            if start >= len(rows):
                return False
            try:
                await self._replace_suffix(seq, rows, start, complete, output, prune_prefix)
            except SeqConflictError:
                return False
            return True

        return CompactionSnapshot(items, complete, replace_suffix)

    async def _replace_suffix(
        self,
        seq: int,
        rows: list[StoredMessage],
        start: int,
        complete: bool,
        output: list[TResponseInputItem],
        prune_prefix: Callable[[TResponseInputItem], bool] | None,
    ) -> None:
        new = _messages(output)
        if start == 0 and complete:
            await self.log.replace(new, expected_seq=seq)
            return
        # The rows before the suffix stay: the view up to the suffix is rewritten as
        # itself plus the output, in one conditional compaction.
        view = await self.log.all()
        kept = view[: len(view) - (len(rows) - start)]
        if prune_prefix is not None:
            while kept and all(prune_prefix(item) for item in _items(kept[:1])):
                kept = kept[1:]
        messages = [row.as_message() for row in kept] + new
        await self.log.compact(messages, through_seq=view[-1].seq, expected_seq=seq)


def _messages(items: list[TResponseInputItem]) -> list[AgentMessage]:
    return item_messages(items)


def _settings(given: SessionSettings | dict[str, Any] | None) -> SessionSettings:
    """The SDK's session settings of ``given``, its errors typed."""
    if given is None:
        return SessionSettings()
    try:
        return coerce_session_settings(given)
    except (TypeError, ValueError) as exc:
        raise InvalidArgumentError(f"session_settings: {exc}") from exc


class _RenderedItems:
    """The items of the rows a session read last, as JSON: the runner reads the whole
    history every turn, and (with the log's read cache) gets the same rows back, so only
    new rows are rendered. Each call returns fresh dicts (``orjson.loads`` of the kept
    JSON, as the SDK's own stores return ``json.loads`` of theirs): the runner may change
    what it gets without changing what is kept. A row is known by its seq and commit
    time, which a rewound or recreated log does not repeat."""

    def __init__(self) -> None:
        self._kept: dict[tuple[int, Any], list[bytes]] = {}

    def items(self, rows: list[StoredMessage]) -> list[TResponseInputItem]:
        kept: dict[tuple[int, Any], list[bytes]] = {}
        out: list[TResponseInputItem] = []
        for row in rows:
            key = (row.seq, row.at)
            rendered = self._kept.get(key)
            if rendered is None:
                rendered = [orjson.dumps(item) for item in message_items(row)]
            kept[key] = rendered
            out.extend(orjson.loads(item) for item in rendered)
        self._kept = kept  # only what this read returned: bounded by the history read
        return out


def _items(rows: list[StoredMessage]) -> list[TResponseInputItem]:
    out: list[TResponseInputItem] = []
    for row in rows:
        out.extend(message_items(row))  # type: ignore[arg-type]
    return out
