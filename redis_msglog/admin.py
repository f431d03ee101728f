"""Operator tools over a sync client: list, inspect, verify, export and import
conversations. The ``msglog`` command is a thin layer over these functions. The import
lives in :mod:`redis_msglog._tools.import_jsonl` (its names are re-exported here)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import redis
import redis.cluster
from redis import exceptions as redis_errors

from ._core.args import MAX_SEQ, check_int, check_text, check_type
from ._core.stored.codec import micros_to_datetime
from ._core.stored.entries import is_tombstone, parse_seq_counter
from ._core.stored.keys import ConversationKeys, conversation_of, key_pattern
from ._tools.import_jsonl import ImportBatchError, ImportFileError, ImportResult, import_jsonl
from ._tools.verify_checks import (
    VerifyReport,
    check_counter_against_stream,
    check_producers,
    check_scope,
    check_stream,
    check_view_keys,
    read_counter,
    text_of,
)
from ._tools.verify_deletions import Redactions, check_trims, read_first
from .edits import LogView
from .errors import (
    InvalidArgumentError,
    MessageLogError,
)

__all__ = [
    "ConversationInfo",
    "ConversationNotFoundError",
    "ConversationStats",
    "ImportBatchError",
    "ImportFileError",
    "ImportResult",
    "VerifyReport",
    "conversation_stats",
    "import_jsonl",
    "list_conversations",
    "require_conversation",
    "verify_conversation",
]


class ConversationNotFoundError(MessageLogError, LookupError):
    """Neither the seq counter nor the stream of the conversation exists."""


@dataclass(frozen=True, slots=True)
class ConversationInfo:
    """One line of ``msglog ls``. ``count`` is the conversation's last seq, what its seq
    counter holds: every entry ever appended, edits included (a trim does not lower it),
    not a count of messages. It is -1 when the seq counter is missing or holds something
    other than a seq (a damaged counter: ``msglog verify`` says which)."""

    conversation: str
    count: int
    last_at: datetime | None


@dataclass(frozen=True, slots=True)
class ConversationStats:
    """What ``msglog stats CONV`` reports. ``count`` is the last seq (as in
    :class:`ConversationInfo`; -1: a damaged counter, missing or not a seq, beside a
    stream); the log holds seqs ``first_seq`` to ``count``, as ``entries`` stream entries
    and ``redacted`` redacted rows (docs/lifecycle.md). Memory is ``MEMORY USAGE`` of the
    counter, the stream and the blobs stored off the rows, and separately of the
    exactly-once records (the idempotency records still remembered, found through the
    conversation's ``records`` set without ``SCAN``, and the producers hash).
    ``idempotency_records`` was -1 for a user refused ``SCAN`` in earlier versions; it is
    always counted now (records written by 0.1.0, before the set, are not: they expire
    within the log's ``idempotency_window``)."""

    conversation: str
    count: int
    first_at: datetime | None
    last_at: datetime | None
    memory_bytes: int
    idempotency_records: int
    idempotency_bytes: int
    #: The conversation was erased and its tombstone stands (docs/lifecycle.md): an
    #: empty log whose id refuses writes until the tombstone expires.
    erased: bool = False
    #: The log's first seq: 1, or after a trim the one after the trimmed seqs.
    first_seq: int = 1
    #: The entries the stream holds (``XLEN``).
    entries: int = 0
    #: The seqs of the log redacted: their entries are gone, a marker row stands in.
    redacted: int = 0


def _check_client(client: object) -> None:
    if not isinstance(client, (redis.Redis, redis.cluster.RedisCluster)):
        raise InvalidArgumentError(
            f"needs a sync redis-py client (Redis or RedisCluster), got {type(client).__name__}"
        )


def list_conversations(
    client: redis.Redis, prefix: str = "msglog", *, match: str = "*", page: int = 500
) -> Iterator[ConversationInfo]:
    """Every conversation under ``prefix`` (``SCAN``, a page at a time, never ``KEYS``),
    with its message count and last activity. ``match`` is a glob over the (escaped) id.

    A conversation is found by its seq counter, or by its stream when the counter is
    missing (deleted or evicted), so that damaged conversations are listed too. Under
    an ACL user, the conversations whose keys it may not read are left out (``SCAN``
    shows it their names, not their content)."""
    _check_client(client)
    ConversationKeys.build(prefix, "x")  # validates the prefix
    check_text("match", match)
    check_int("page", page, lowest=1, highest=MAX_SEQ)
    batch: list[tuple[str, bool]] = []  # (conversation, found by its stream)
    for key in client.scan_iter(match=key_pattern(prefix, match), count=page):
        text = text_of(key)
        if (conversation := conversation_of(prefix, text)) is not None:
            batch.append((conversation, False))
        elif (conversation := conversation_of(prefix, text, ":stream")) is not None:
            batch.append((conversation, True))
        if len(batch) >= page:
            yield from _describe(client, prefix, batch)
            batch = []
    yield from _describe(client, prefix, batch)


def _describe(
    client: redis.Redis, prefix: str, conversations: list[tuple[str, bool]]
) -> Iterator[ConversationInfo]:
    if not conversations:
        return
    pipe = client.pipeline(transaction=False)
    for conversation, _ in conversations:
        keys = ConversationKeys.build(prefix, conversation)
        pipe.get(keys.seq)
        pipe.xrevrange(keys.stream, count=1)
        pipe.exists(keys.seq)
    replies = pipe.execute(raise_on_error=False)
    for i, (conversation, by_stream) in enumerate(conversations):
        raw_count, newest, has_counter = replies[3 * i : 3 * i + 3]
        if any(isinstance(r, redis_errors.NoPermissionError) for r in (raw_count, has_counter)):
            continue  # SCAN shows every key name; an ACL user lists what it may read
        if by_stream and has_counter == 1:
            continue  # listed when its counter is met (once, without remembering ids)
        if is_tombstone(raw_count):
            continue  # erased (docs/lifecycle.md): a tombstone, not a conversation
        parsed = parse_seq_counter(raw_count) if isinstance(raw_count, (bytes, str)) else None
        count = -1 if parsed is None else parsed  # -1: missing or not a seq (verify says why)
        last_at = _entry_time(newest[0]) if isinstance(newest, list) and newest else None
        yield ConversationInfo(conversation, count, last_at)


def _entry_time(entry: tuple[Any, dict[Any, Any]]) -> datetime | None:
    """The entry's commit time, or ``None`` if it has none that is valid: the second part
    of its ID ``<seq>-<at>``, or the ``at`` field of an earlier version's ``<seq>-0``."""
    fields = {text_of(k): v for k, v in entry[1].items()}
    at = fields.get("at", text_of(entry[0]).partition("-")[2])
    try:
        return micros_to_datetime(int(at)) if at not in (None, "0") else None
    except (ValueError, OverflowError):
        return None


def require_conversation(client: redis.Redis, keys: ConversationKeys, conversation: str) -> None:
    """Raise :class:`ConversationNotFoundError` unless the conversation has keys."""
    _check_client(client)
    check_type("keys", keys, ConversationKeys, "a ConversationKeys")
    check_text("conversation id", conversation)
    if not client.exists(keys.seq, keys.stream):
        raise ConversationNotFoundError(
            f"conversation {conversation!r} not found (no {keys.seq} or {keys.stream})"
        )


def conversation_stats(
    client: redis.Redis, prefix: str, conversation: str, *, page: int = 500
) -> ConversationStats:
    """Count, first and last commit time, and memory of one conversation (no ``SCAN``;
    ``page`` is checked and kept for compatibility: nothing is paged now)."""
    check_int("page", page, lowest=1, highest=MAX_SEQ)
    keys = ConversationKeys.build(prefix, conversation)
    require_conversation(client, keys, conversation)
    raw_count = client.get(keys.seq)
    first: list[Any] = client.xrange(keys.stream, count=1) or []
    last: list[Any] = client.xrevrange(keys.stream, count=1) or []
    memory = sum(client.memory_usage(k) or 0 for k in (keys.seq, keys.stream, keys.blobs))
    records = _records(client, keys)
    producers = client.memory_usage(keys.producers) or 0
    first_seq, redacted = _first_and_redacted(client, keys)
    return ConversationStats(
        conversation=conversation,
        count=_stats_count(raw_count),
        first_at=_entry_time(first[0]) if first else None,
        last_at=_entry_time(last[0]) if last else None,
        memory_bytes=memory,
        idempotency_records=len(records),
        idempotency_bytes=producers + sum(records.values()),
        erased=is_tombstone(raw_count),
        first_seq=first_seq,
        entries=int(client.xlen(keys.stream)),
        redacted=redacted,
    )


def _records(client: redis.Redis, keys: ConversationKeys) -> dict[str, int]:
    """The conversation's idempotency records still stored, and the memory of each: the
    names its ``records`` set holds (no ``SCAN``: a tenant's user counts them too), less
    those expired since (the set drops names lazily)."""
    named = sorted({text_of(k) for k in client.zrange(keys.records, 0, -1)})
    pipe = client.pipeline(transaction=False)
    for name in named:
        pipe.memory_usage(name)
    sizes = pipe.execute() if named else []
    return {name: int(size) for name, size in zip(named, sizes, strict=True) if size is not None}


def _first_and_redacted(client: redis.Redis, keys: ConversationKeys) -> tuple[int, int]:
    """The log's first seq and its redacted rows, as its view hash records them (1 and 0
    when it does not: never trimmed or redacted, or a view hash ``verify`` reports)."""
    try:
        first, redacted = client.hmget(keys.view, ["first", "redacted"])
    except redis_errors.ResponseError:
        return 1, 0
    first_seq = parse_seq_counter(first) if isinstance(first, (bytes, str)) else None
    count = parse_seq_counter(redacted) if isinstance(redacted, (bytes, str)) else None
    return first_seq or 1, count or 0


def _stats_count(raw: Any) -> int:
    """0 for a tombstone, -1 for a counter missing beside the stream (the conversation
    exists) or holding something other than a seq (verify says why)."""
    if is_tombstone(raw):
        return 0
    parsed = parse_seq_counter(raw) if isinstance(raw, (bytes, str)) else None
    return -1 if parsed is None else parsed


def verify_conversation(
    client: redis.Redis,
    prefix: str,
    conversation: str,
    *,
    page: int = 1000,
    max_problems: int = 20,
) -> VerifyReport:
    """Check one conversation: the seq counter matches the stream's last entry, entry IDs
    are ``1-<at>, 2-<at>, ...`` with no gap (``<seq>-0`` and an ``at`` field for entries
    of earlier versions), every entry decodes to a message or an edit, every
    edit refers to rows of the view before it, and the view keys agree with the entries.
    (The view's rows are held in memory while checking.)"""
    check_int("page", page, lowest=1, highest=MAX_SEQ)
    check_int("max_problems", max_problems)
    _check_client(client)
    keys = ConversationKeys.build(prefix, conversation)
    report = VerifyReport(conversation, counter=None, entries=0, last_seq=0)

    def problem(text: str) -> None:
        if len(report.problems) < max_problems:
            report.problems.append(text)
        elif len(report.problems) == max_problems:
            report.problems.append("(more problems not shown)")

    if not client.exists(keys.seq, keys.stream) and (values := client.hlen(keys.values)):
        report.values = int(values)  # values kept in place, no log (ADK's user: state)
        check_scope(client, prefix, conversation, report, problem)
        return report
    require_conversation(client, keys, conversation)

    report.counter = read_counter(client, keys, problem, report)
    first = report.first_seq = read_first(client, keys, problem)
    view = LogView(strict=True, start=first)
    redactions = Redactions(client, keys, problem)
    trims = check_stream(client, keys, page, report, problem, view, first, redactions)
    check_trims(keys, first, trims, problem)
    redactions.finish(first)
    report.redacted = len(redactions.rows)
    check_counter_against_stream(keys, report, problem)
    # A kept edit that cut the view at a trimmed row leaves its order out of the entries:
    # then the view keys are not compared with the fold (docs/lifecycle.md).
    if not report.problems and client.exists(keys.view) and not view.uncertain:
        check_view_keys(client, prefix, conversation, view, problem)
    check_producers(client, keys, page, problem)
    check_scope(client, prefix, conversation, report, problem)
    return report
