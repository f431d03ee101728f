"""``msglog verify``'s checks of one conversation's keys (``admin.verify_conversation`` runs
them in order): the seq counter, every stream entry and the edits they fold into a
view, the view keys against that fold, the blobs the rows refer to, the producers' records
and the scope's indexes; each problem is reported in words, never raised."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import redis
import redis.cluster
from redis import exceptions as redis_errors

from .._core.lifecycle.scope import ScopeKeys, index_problems, member, micros_of
from .._core.stored.entries import decode_stored, is_tombstone, parse_seq_counter
from .._core.stored.keys import ConversationKeys
from .._core.write.blobs import references
from .._sync import Directory, MessageLog
from ..edits import EditEntry, Entry, LogView, View
from ..errors import CodecError, CorruptLogError, MessageLogError
from ..models import StoredMessage
from .verify_deletions import Redactions


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
    values: int = 0  # values kept in place, when the conversation holds only those (no log)

    @property
    def ok(self) -> bool:
        return not self.problems


def text_of(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def check_scope(
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


def check_producers(
    client: redis.Redis, keys: ConversationKeys, page: int, problem: Callable[[str], None]
) -> None:
    """The exactly-once records of the appends made without a key: a hash of values the
    append script can read (it refuses to append for a producer whose value is not)."""
    try:
        for field_name, value in client.hscan_iter(keys.producers, count=page):
            raw = value if isinstance(value, bytes) else str(value).encode()
            if not _PRODUCER_VALUE.fullmatch(raw):
                problem(
                    f"producer {text_of(field_name)} of {keys.producers} holds "
                    f"{text_of(raw)[:80]!r}, not a record the append script writes"
                )
    except redis_errors.ResponseError as exc:
        problem(f"producers {keys.producers}: {exc}")


def fold(view: LogView, row: Entry, problem: Callable[[str], None]) -> None:
    """Apply ``row`` to the fold; an edit that refers to no row of the view is reported."""
    try:
        view.apply(row)
    except ValueError as exc:
        problem(f"entry {row.seq}: {exc}")


def check_view_keys(
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


def read_counter(
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
                problem(f"seq counter {keys.seq} holds {text_of(raw)!r}, not a seq")
            return counter
    except redis_errors.ResponseError as exc:
        problem(f"seq counter {keys.seq}: {exc}")
    return None


def check_stream(
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
                    fold(view, redacted, problem)
                    expected = redacted.seq + 1
                seq, expected, row = check_entry(keys, entry_id, fields, expected, problem)
                redactions.record(row)
                report.entries += 1
                report.last_seq = max(report.last_seq, seq)
                if isinstance(row, EditEntry) and row.op == "trim":
                    trims.append(row.through_seq or 0)
                if row is not None:
                    fold(view, row, problem)
                    rows += [row] if isinstance(row, StoredMessage) else []
            check_blobs(client, keys, rows, problem)
            if len(entries) < page:
                break
            start = "(" + text_of(entries[-1][0])
    except redis_errors.ResponseError as exc:
        problem(f"stream {keys.stream}: {exc}")
    return trims


def check_blobs(
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


def check_counter_against_stream(
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


def check_entry(
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
    seq_part, _, tail = text_of(entry_id).partition("-")
    if not seq_part.isdigit() or not tail.isdigit() or int(seq_part) == 0:
        problem(f"entry {text_of(entry_id)} is not of the form <seq>-<at> (seqs start at 1)")
        return 0, expected, None
    seq = int(seq_part)
    if seq == expected - 1:
        problem(f"stream {keys.stream} holds seq {seq} twice (entry {text_of(entry_id)})")
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
