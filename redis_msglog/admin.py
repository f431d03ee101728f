"""Operator tools over a sync client: list, inspect, verify, export and import
conversations. The ``msglog`` command is a thin layer over these functions. The import
lives in :mod:`redis_msglog._tools.import_jsonl` (its names are re-exported here)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import redis
import redis.cluster
from redis import exceptions as redis_errors

from ._core.args import MAX_SEQ, check_int, check_text, check_type
from ._core.lifecycle.scope import ScopeKeys, index_problems, member, micros_of
from ._core.stored.codec import micros_to_datetime
from ._core.stored.entries import decode_stored, is_tombstone, parse_seq_counter
from ._core.stored.keys import ConversationKeys, conversation_of, key_pattern
from ._core.write.blobs import references
from ._sync import Directory, MessageLog
from ._tools.import_jsonl import ImportBatchError, ImportFileError, ImportResult, import_jsonl
from ._tools.verify_deletions import Redactions, check_trims, read_first
from .edits import EditEntry, Entry, LogView, View
from .errors import (
    CodecError,
    CorruptLogError,
    InvalidArgumentError,
    MessageLogError,
)
from .models import StoredMessage

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
    exactly-once records (the idempotency records still remembered, and the producers
    hash)."""

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


@dataclass(slots=True)
class VerifyReport:
    """The result of :func:`verify_conversation`; ``problems`` is empty when it is sound.
    ``counter`` is the seq counter (``None``: missing or not a seq), ``entries`` the
    stream entries checked, of seqs ``first_seq`` (after a trim, past the trimmed ones)
    to ``last_seq``, the ``redacted`` seqs among them held as marker rows."""

    conversation: str
    counter: int | None
    entries: int
    last_seq: int
    problems: list[str] = field(default_factory=list)
    scope: tuple[str, ...] | None = None  # the scope it was created with, if any
    missing_indexes: list[str] = field(default_factory=list)  # repair: Directory.register
    first_seq: int = 1
    redacted: int = 0
    erased: bool = False  # an erasure's tombstone stands (an empty log)

    @property
    def ok(self) -> bool:
        return not self.problems


def _check_client(client: object) -> None:
    if not isinstance(client, (redis.Redis, redis.cluster.RedisCluster)):
        raise InvalidArgumentError(
            f"needs a sync redis-py client (Redis or RedisCluster), got {type(client).__name__}"
        )


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


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
        text = _text(key)
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
    fields = {_text(k): v for k, v in entry[1].items()}
    at = fields.get("at", _text(entry[0]).partition("-")[2])
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
    """Count, first and last commit time, and memory of one conversation."""
    check_int("page", page, lowest=1, highest=MAX_SEQ)
    keys = ConversationKeys.build(prefix, conversation)
    require_conversation(client, keys, conversation)
    raw_count = client.get(keys.seq)
    first: list[Any] = client.xrange(keys.stream, count=1) or []
    last: list[Any] = client.xrevrange(keys.stream, count=1) or []
    memory = sum(client.memory_usage(k) or 0 for k in (keys.seq, keys.stream, keys.blobs))
    records = [
        key
        for key in client.scan_iter(match=_records_pattern(keys), count=page)
        if _text(key).startswith(keys.idempotency_record(""))
    ]
    producers = client.memory_usage(keys.producers) or 0
    first_seq, redacted = _first_and_redacted(client, keys)
    return ConversationStats(
        conversation=conversation,
        count=_stats_count(raw_count),
        first_at=_entry_time(first[0]) if first else None,
        last_at=_entry_time(last[0]) if last else None,
        memory_bytes=memory,
        idempotency_records=len(records),
        idempotency_bytes=producers + sum(client.memory_usage(k) or 0 for k in records),
        erased=is_tombstone(raw_count),
        first_seq=first_seq,
        entries=int(client.xlen(keys.stream)),
        redacted=redacted,
    )


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


def _records_pattern(keys: ConversationKeys) -> str:
    base = keys.idempotency_record("")
    return "".join("\\" + c if c in "*?[]\\" else c for c in base) + "*"


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
    keys = ConversationKeys.build(prefix, conversation)
    require_conversation(client, keys, conversation)
    report = VerifyReport(conversation, counter=None, entries=0, last_seq=0)

    def problem(text: str) -> None:
        if len(report.problems) < max_problems:
            report.problems.append(text)
        elif len(report.problems) == max_problems:
            report.problems.append("(more problems not shown)")

    report.counter = _read_counter(client, keys, problem, report)
    first = report.first_seq = read_first(client, keys, problem)
    view = LogView(strict=True, start=first)
    redactions = Redactions(client, keys, problem)
    trims = _check_stream(client, keys, page, report, problem, view, first, redactions)
    check_trims(keys, first, trims, problem)
    redactions.finish(first)
    report.redacted = len(redactions.rows)
    _check_counter_against_stream(keys, report, problem)
    # A kept edit that cut the view at a trimmed row leaves its order out of the entries:
    # then the view keys are not compared with the fold (docs/lifecycle.md).
    if not report.problems and client.exists(keys.view) and not view.uncertain:
        _check_view_keys(client, prefix, conversation, view, problem)
    _check_producers(client, keys, page, problem)
    _check_scope(client, prefix, conversation, report, problem)
    return report


def _check_scope(
    client: redis.Redis,
    prefix: str,
    conversation: str,
    report: VerifyReport,
    problem: Callable[[str], None],
) -> None:
    """A scoped conversation is in the index of its scope and of each prefix of it (a
    crash between its registration's two steps leaves it out: ``msglog verify --repair``,
    or ``Directory(client).register(conversation, scope)``, adds it)."""
    owner = Directory(client, prefix=prefix).owner(conversation)
    if owner is None:
        return
    scope, created = owner
    report.scope = scope
    entry = member(micros_of(created), scope, conversation)
    indexes = ScopeKeys(prefix, scope).all_indexes()
    present = [client.zscore(index, entry) for index in indexes]
    report.missing_indexes = [i for i, score in zip(indexes, present, strict=True) if score is None]
    for text in index_problems(conversation, scope, report.missing_indexes):
        problem(text)


# What the append script writes in the producers hash: "<expires_ms> <count> <dropped>,0
# <result>...", each result "<pseq>,<last_seq>[,<call>]" (earlier versions: no "<dropped>,0";
# lua/producer_lib.lua).
_PRODUCER_VALUE = re.compile(rb"[0-9]+ [0-9]+(?: [0-9]+,[0-9]+(?:,[0-9a-f]+)?)+")


def _check_producers(
    client: redis.Redis, keys: ConversationKeys, page: int, problem: Callable[[str], None]
) -> None:
    """The exactly-once records of the appends made without a key: a hash of values the
    append script can read (it refuses to append for a producer whose value is not)."""
    try:
        for field_name, value in client.hscan_iter(keys.producers, count=page):
            raw = value if isinstance(value, bytes) else str(value).encode()
            if not _PRODUCER_VALUE.fullmatch(raw):
                problem(
                    f"producer {_text(field_name)} of {keys.producers} holds "
                    f"{_text(raw)[:80]!r}, not a record the append script writes"
                )
    except redis_errors.ResponseError as exc:
        problem(f"producers {keys.producers}: {exc}")


def _fold(view: LogView, row: Entry, problem: Callable[[str], None]) -> None:
    """Apply ``row`` to the fold; an edit that refers to no row of the view is reported."""
    try:
        view.apply(row)
    except ValueError as exc:
        problem(f"entry {row.seq}: {exc}")


def _check_view_keys(
    client: redis.Redis,
    prefix: str,
    conversation: str,
    view: LogView,
    problem: Callable[[str], None],
) -> None:
    """The view the server reads from its view keys must be the fold of the entries."""
    log = MessageLog(client, conversation, prefix=prefix)
    try:
        if log.attrs().values != view.attrs:
            problem(f"the attributes in {log.keys.view} are not those the entries set")
        for name, served, folded in (
            ("visible", log.all(blobs="refs"), view.rows),
            ("active", log.all(blobs="refs", view="active"), view.active()),
        ):
            if [r.seq for r in served] != [r.seq for r in folded]:
                problem(
                    f"the {name} view read from {log.keys.view} and {log.keys.hidden} is not "
                    "the fold of the entries (the view keys were changed by hand?)"
                )
        counts: tuple[tuple[View, int], ...] = (
            ("visible", len(view.rows)), ("archived", len(view.archived()))
        )  # fmt: skip
        for name, folded_count in counts:
            if log.count(view=name) != folded_count:  # kept by the edits, not recounted
                problem(
                    f"the {name} row count kept in {log.keys.view} is not that of the fold "
                    "of the entries (the view keys were changed by hand?)"
                )
    except MessageLogError as exc:
        problem(f"the view keys {log.keys.view} and {log.keys.hidden}: {exc}")


def _read_counter(
    client: redis.Redis,
    keys: ConversationKeys,
    problem: Callable[[str], None],
    report: VerifyReport,
) -> int | None:
    """The seq counter's value; ``None`` when it is missing or unreadable (reported)."""
    try:
        raw = client.get(keys.seq)
        if is_tombstone(raw):
            report.erased = True
            return 0  # erased (docs/lifecycle.md): an empty log, nothing to report
        if raw is not None:
            counter = parse_seq_counter(raw)
            if counter is None:
                problem(f"seq counter {keys.seq} holds {_text(raw)!r}, not a seq")
            return counter
    except redis_errors.ResponseError as exc:
        problem(f"seq counter {keys.seq}: {exc}")
    return None


def _check_stream(
    client: redis.Redis,
    keys: ConversationKeys,
    page: int,
    report: VerifyReport,
    problem: Callable[[str], None],
    view: LogView,
    first: int,
    redactions: Redactions,
) -> list[int]:
    """Check every entry from the log's ``first`` seq (before it: trimmed), a page at a
    time, counting them into ``report``; fold them into ``view``, checking that every
    edit refers to rows of the view before it; a gap is filled with the redacted rows
    of its seqs. Returns the seqs each trim entry trimmed through."""
    start = "-"
    expected = first
    trims: list[int] = []
    try:
        while True:
            entries: list[Any] = client.xrange(keys.stream, min=start, count=page) or []
            rows = []
            for entry_id, fields in entries:
                for redacted in redactions.fill(expected, entry_id):
                    _fold(view, redacted, problem)
                    expected = redacted.seq + 1
                seq, expected, row = _check_entry(keys, entry_id, fields, expected, problem)
                redactions.record(row)
                report.entries += 1
                report.last_seq = max(report.last_seq, seq)
                if isinstance(row, EditEntry) and row.op == "trim":
                    trims.append(row.through_seq or 0)
                if row is not None:
                    _fold(view, row, problem)
                    rows += [row] if isinstance(row, StoredMessage) else []
            _check_blobs(client, keys, rows, problem)
            if len(entries) < page:
                break
            start = "(" + _text(entries[-1][0])
    except redis_errors.ResponseError as exc:
        problem(f"stream {keys.stream}: {exc}")
    return trims


def _check_blobs(
    client: redis.Redis,
    keys: ConversationKeys,
    rows: list[StoredMessage],
    problem: Callable[[str], None],
) -> None:
    """Every binary a row refers to is in the conversation's blobs hash."""
    digests = references(rows)
    if not digests:
        return
    values = client.hmget(keys.blobs, digests)
    for digest, value in zip(digests, values, strict=True):
        if value is None:
            seq = next(r.seq for r in rows if digest in references([r]))
            problem(f"seq {seq} refers to blob {digest}, missing from {keys.blobs}")


def _check_counter_against_stream(
    keys: ConversationKeys, report: VerifyReport, problem: Callable[[str], None]
) -> None:
    """The counter must be where the stream ends (a missing one is a problem unless the
    counter was already reported)."""
    if (
        report.counter is None
        and report.entries
        and not any("seq counter" in p for p in report.problems)
    ):
        problem(
            f"seq counter {keys.seq} is missing (deleted or evicted?) while the stream "
            f"ends at seq {report.last_seq}"
        )
    elif report.counter is not None and report.counter != report.last_seq:
        problem(f"seq counter says {report.counter} but the stream ends at seq {report.last_seq}")


def _check_entry(
    keys: ConversationKeys,
    entry_id: Any,
    fields: dict[Any, Any],
    expected: int,
    problem: Callable[[str], None],
) -> tuple[int, int, Entry | None]:
    """Check one entry; return its seq, the next expected seq and the row (``None`` when
    it does not decode).

    An entry is ID ``<seq>-<at>`` (the commit time, microseconds since the Unix epoch)
    with one field, ``msg`` or ``edit``; or, written by an earlier version, ID
    ``<seq>-0`` with fields ``at`` and ``msg`` (or ``at`` and ``edit``)."""
    seq_part, _, tail = _text(entry_id).partition("-")
    if not seq_part.isdigit() or not tail.isdigit() or int(seq_part) == 0:
        problem(f"entry {_text(entry_id)} is not of the form <seq>-<at> (seqs start at 1)")
        return 0, expected, None
    seq = int(seq_part)
    if seq == expected - 1:
        problem(f"stream {keys.stream} holds seq {seq} twice (entry {_text(entry_id)})")
        return seq, expected, None
    if seq != expected:
        missing = f"seq {expected}" if seq == expected + 1 else f"seqs {expected}..{seq - 1}"
        problem(f"stream {keys.stream} is missing {missing}")
    row: Entry
    try:
        row = decode_stored(seq, entry_id, fields)
    except (CodecError, CorruptLogError, ValueError) as exc:
        problem(f"entry {seq} does not decode: {exc}")
        return seq, seq + 1, None
    return seq, seq + 1, row
