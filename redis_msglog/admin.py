"""Operator tools over a sync client: list, inspect, verify, export and import
conversations. The ``msglog`` command is a thin layer over these functions."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import IO, Any

import redis
import redis.cluster
from pydantic import ValidationError
from redis import exceptions as redis_errors

from ._args import MAX_SEQ, check_int, check_text, check_type, shown
from ._blobs import references
from ._codec import decode_row, edit_document, micros_to_datetime
from ._entries import decode_stored, parse_seq_counter
from ._keys import ConversationKeys, conversation_of, key_pattern
from ._sync import MessageLog
from ._views import AttrChanges, fork_edit
from .edits import EditEntry, Entry, LogView, View
from .errors import (
    CodecError,
    CorruptLogError,
    InvalidArgumentError,
    InvalidMessageError,
    MessageLogError,
    MessageTooLargeError,
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


class ImportFileError(MessageLogError, ValueError):
    """The import file cannot be read, or a line of it is not a valid message; nothing
    was imported."""


class ImportBatchError(MessageLogError):
    """A batch of an import failed on the server (``__cause__`` says why). The message
    names its lines; the batches before it committed, and running the same import again
    writes only what is missing."""


@dataclass(frozen=True, slots=True)
class ConversationInfo:
    """One line of ``msglog ls``. ``count`` is -1 when the seq counter is missing or
    holds something other than a seq (``msglog verify`` says which)."""

    conversation: str
    count: int
    last_at: datetime | None


@dataclass(frozen=True, slots=True)
class ConversationStats:
    """What ``msglog stats CONV`` reports. Memory is ``MEMORY USAGE`` of the counter, the
    stream and the blobs stored off the rows, and separately of the exactly-once records
    (the idempotency records still remembered, and the producers hash)."""

    conversation: str
    count: int
    first_at: datetime | None
    last_at: datetime | None
    memory_bytes: int
    idempotency_records: int
    idempotency_bytes: int


@dataclass(slots=True)
class VerifyReport:
    """The result of :func:`verify_conversation`; ``problems`` is empty when it is sound."""

    conversation: str
    counter: int | None
    entries: int
    last_seq: int
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def _check_client(client: object) -> None:
    if not isinstance(client, (redis.Redis, redis.cluster.RedisCluster)):
        raise InvalidArgumentError(
            f"needs a sync redis-py client (Redis or RedisCluster), got {type(client).__name__}"
        )


def _check_path(path: object) -> None:
    """A file name that ``open`` takes: ``str`` or path-like, encodable, without NUL."""
    try:
        name = os.fsencode(path)  # type: ignore[arg-type]
    except (TypeError, UnicodeError) as exc:
        raise InvalidArgumentError(f"path must be a file name, got {shown(path)}: {exc}") from None
    if b"\0" in name:
        raise InvalidArgumentError(f"path must not contain NUL, got {shown(path)}")


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
    return ConversationStats(
        conversation=conversation,
        count=int(raw_count) if raw_count is not None else 0,
        first_at=_entry_time(first[0]) if first else None,
        last_at=_entry_time(last[0]) if last else None,
        memory_bytes=memory,
        idempotency_records=len(records),
        idempotency_bytes=producers + sum(client.memory_usage(k) or 0 for k in records),
    )


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

    report.counter = _read_counter(client, keys, problem)
    view = LogView(strict=True)
    _check_stream(client, keys, page, report, problem, view)
    _check_counter_against_stream(keys, report, problem)
    if not report.problems and client.exists(keys.view):
        _check_view_keys(client, prefix, conversation, view, problem)
    _check_producers(client, keys, page, problem)
    return report


# What the append script writes in the producers hash: "<expires_ms> <count> <dropped>,0
# <result>...", each result "<pseq>,<last_seq>[,<call>]" (earlier versions: no "<dropped>,0";
# lua/append.lua, "The idempotent producer").
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
    client: redis.Redis, keys: ConversationKeys, problem: Callable[[str], None]
) -> int | None:
    """The seq counter's value; ``None`` when it is missing or unreadable (reported)."""
    try:
        raw = client.get(keys.seq)
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
) -> None:
    """Check every entry, a page at a time, counting them into ``report``; fold them into
    ``view``, checking that every edit refers to rows of the view before it."""
    start = "-"
    expected = 1
    try:
        while True:
            entries: list[Any] = client.xrange(keys.stream, min=start, count=page) or []
            rows = []
            for entry_id, fields in entries:
                seq, expected, row = _check_entry(keys, entry_id, fields, expected, problem)
                report.entries += 1
                report.last_seq = max(report.last_seq, seq)
                if row is not None:
                    _fold(view, row, problem)
                    rows += [row] if isinstance(row, StoredMessage) else []
            _check_blobs(client, keys, rows, problem)
            if len(entries) < page:
                break
            start = "(" + _text(entries[-1][0])
    except redis_errors.ResponseError as exc:
        problem(f"stream {keys.stream}: {exc}")


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


@dataclass(frozen=True, slots=True)
class ImportResult:
    """What :func:`import_jsonl` did: ``messages`` in the file, of which ``new`` were
    written now and the rest were already there (an import run again), and the log's
    ``last_seq`` after it."""

    messages: int
    new: int
    last_seq: int

    @property
    def already_there(self) -> int:
        return self.messages - self.new


def import_jsonl(
    log: MessageLog,
    source: str | os.PathLike[str] | IO[bytes],
    *,
    batch_size: int = 500,
    progress: Callable[[int], object] | None = None,
    on_validated: Callable[[int], object] | None = None,
) -> ImportResult:
    """Append the entries of a JSON Lines export (``seq`` and ``at`` are ignored) in
    batches. Memory is bounded by one batch.

    ``source`` is a path or a binary file; it is read once, into a private temporary
    copy (so a pipe, ``/dev/stdin`` or ``<(...)`` works, and what is validated is what
    is written), and the whole copy is validated before anything is written
    (:class:`ImportFileError` names the line; then ``on_validated(lines)``). Each batch
    carries an idempotency key made from its position and content, so running the same
    import again after an interruption (within the log's ``idempotency_window``) skips
    the batches that committed and writes the rest once; :class:`ImportResult` says how
    many messages were new. ``progress(n)`` is called after each batch with the number
    of lines it held. A batch the server refuses raises :class:`ImportBatchError`,
    naming its lines.

    Edit lines (``{"seq", "at", "edit"}``, docs/edits.md) are made again as the same
    edits. They refer to seqs, so a file with edits goes only into a conversation that
    is empty or holds exactly the file's first entries (an interrupted import of it).
    """
    check_type("log", log, MessageLog, "a MessageLog")
    if isinstance(source, (str, os.PathLike)):
        _check_path(source)
    elif not callable(getattr(source, "read", None)):
        raise InvalidArgumentError(
            f"source must be a path or a binary file, got {type(source).__name__}"
        )
    check_int("batch_size", batch_size, lowest=1)
    for name, hook in (("progress", progress), ("on_validated", on_validated)):
        if hook is not None and not callable(hook):
            raise InvalidArgumentError(f"{name} must be callable, got {type(hook).__name__}")
    with _read_once(source) as copy:
        return _import(log, copy, batch_size, progress, on_validated)


def _import(
    log: MessageLog,
    source: _Source,
    batch_size: int,
    progress: Callable[[int], object] | None,
    on_validated: Callable[[int], object] | None,
) -> ImportResult:
    total, lines, edits = 0, 0, False
    for unit in _units(log, source, batch_size):  # validates every line first
        total += len(unit.messages)
        lines += len(unit.lines)
        edits = edits or unit.edit is not None
    if on_validated is not None:
        on_validated(lines)
    held = _held_prefix_of(log, source) if edits else 0
    last_seq, position, new = log.count(), 0, 0
    for index, unit in enumerate(_units(log, source, batch_size)):
        position += len(unit.lines)
        if position <= held:  # already there (an interrupted import of this file)
            continue
        if position - len(unit.lines) < held:
            raise ImportFileError(
                f"{log.conversation!r} holds the file's first {held} entries, which end "
                f"inside the batch of lines {unit.lines[0][0]}..{unit.lines[-1][0]}"
            )
        last_seq, fresh = _import_unit(log, source, unit, index)
        new += len(unit.messages) if fresh else 0
        if progress is not None:
            progress(len(unit.lines))
    return ImportResult(messages=total, new=new, last_seq=last_seq)


@dataclass(frozen=True, slots=True)
class _Source:
    """The import's input: its name (for messages) and a private seekable copy."""

    name: str
    copy: IO[bytes]


@contextmanager
def _read_once(source: str | os.PathLike[str] | IO[bytes]) -> Iterator[_Source]:
    """``source`` copied once into an anonymous temporary file (deleted on close)."""
    with tempfile.TemporaryFile() as copy:
        if isinstance(source, (str, os.PathLike)):
            name = os.fspath(source)
            try:
                file = open(source, "rb")  # noqa: SIM115 (closed by the with below)
            except OSError as exc:
                raise ImportFileError(f"cannot read {name!r}: {exc.strerror or exc}") from exc
            with file:
                shutil.copyfileobj(file, copy)
        else:
            name = str(getattr(source, "name", "<input>"))
            _copy_binary(source, name, copy)
        yield _Source(name, copy)


def _copy_binary(source: IO[bytes], name: str, copy: IO[bytes]) -> None:
    """``source`` into ``copy``: a file opened in text mode (``str`` chunks) is a bad
    argument, a read that fails an :class:`ImportFileError`, as for a path."""
    while True:
        try:
            chunk = source.read(1 << 16)
        except OSError as exc:
            raise ImportFileError(f"cannot read {name!r}: {exc.strerror or exc}") from exc
        if not chunk:
            return
        if not isinstance(chunk, (bytes, bytearray, memoryview)):
            raise InvalidArgumentError(
                f"source must be a path or a file opened in binary mode ('rb'), got "
                f"{type(source).__name__} reading {type(chunk).__name__}"
            )
        copy.write(chunk)


@dataclass(frozen=True, slots=True)
class _Unit:
    """What one call imports: a batch of messages, or one edit with the messages that
    belong to it (a compaction's, a fork's). ``lines`` are (line number, bytes)."""

    lines: list[tuple[int, bytes]]
    messages: list[dict[str, Any]]
    edit: dict[str, Any] | None = None


def _units(log: MessageLog, source: _Source, batch_size: int) -> Iterator[_Unit]:
    """The file's lines grouped into units, each line validated (ImportFileError)."""
    chunk: list[tuple[int, bytes]] = []
    messages: list[dict[str, Any]] = []
    edit: tuple[int, bytes, dict[str, Any]] | None = None
    owed = 0  # messages still belonging to ``edit``
    for number, line in _lines(source):
        doc = _parse_line(log, source, number, line)
        if "edit" in doc and owed:
            raise ImportFileError(
                f"{source.name} line {number}: an edit where a message "
                f"of the edit on line {edit[0] if edit else '?'} belongs"
            )
        if "edit" in doc:
            if chunk:
                yield _Unit(chunk, messages)
            chunk, messages = [(number, line)], []
            edit, owed = (number, line, doc["edit"]), int(doc["edit"].get("count") or 0)
        else:
            chunk.append((number, line))
            messages.append(doc)
            owed = max(0, owed - 1)
        if edit is not None and not owed:
            yield _Unit(chunk, messages, edit[2])
            chunk, messages, edit = [], [], None
        elif edit is None and len(chunk) == batch_size:
            yield _Unit(chunk, messages)
            chunk, messages = [], []
    if owed:
        raise ImportFileError(
            f"{source.name}: the file ends before the {owed} messages its last edit announces"
        )
    if chunk:
        yield _Unit(chunk, messages)


def _parse_line(log: MessageLog, source: _Source, number: int, line: bytes) -> dict[str, Any]:
    """A line's message document, or ``{"edit": ...}`` for an edit line."""
    try:
        doc = decode_row(line)
        if "edit" in doc:
            if set(doc) != {"edit"} or not isinstance(doc["edit"], dict):
                raise CodecError("an edit line holds only seq, at and edit (an object)")
            EditEntry.model_validate({**doc["edit"], "seq": 1, "at": micros_to_datetime(0)})
        else:
            log.validate([doc])
    except (CodecError, InvalidMessageError, MessageTooLargeError, ValidationError) as exc:
        raise ImportFileError(f"{source.name} line {number}: {exc}") from exc
    return doc


def _held_prefix_of(log: MessageLog, source: _Source) -> int:
    """How many of the file's first entries the log holds: a file with edits goes into
    an empty log, or one holding exactly its first entries (an interrupted import),
    where the import goes on after them: its seqs must mean the same entries."""
    held = log.all(view="physical") if log.count() else []
    lines = _lines(source)
    for entry in held:
        _number, line = next(lines, (0, b""))
        doc = decode_row(line) if line else None
        same = doc is not None and (
            edit_document(entry) == doc.get("edit")
            if isinstance(entry, EditEntry)
            else "edit" not in doc and log.validate([doc])[0] == entry.as_message()
        )
        if not same:
            raise ImportFileError(
                f"{source.name} has edits, which refer to seqs, and {log.conversation!r} "
                f"already holds entries that are not the file's first ones (seq {entry.seq} "
                "differs): import it into an empty conversation"
            )
    return len(held)


def _lines(source: _Source) -> Iterator[tuple[int, bytes]]:
    """The non-blank lines of the copy with their 1-based line numbers."""
    source.copy.seek(0)
    for number, line in enumerate(source.copy, start=1):
        if line.strip():
            yield number, line.strip()


def _import_edit(
    log: MessageLog, edit: dict[str, Any], messages: list[dict[str, Any]], key: str
) -> int:
    """Make an exported edit again (its seqs mean the same: see import_jsonl)."""
    attrs = edit.get("attrs")
    op = edit["op"]
    if op == "attrs":
        return log.set_attrs(attrs or {}, idempotency_key=key)
    if op == "retract":
        return log.retract(edit["seqs"], idempotency_key=key, attrs=attrs)
    if op == "archive":
        return log.archive(edit["through"], idempotency_key=key, attrs=attrs)
    if op == "fork":
        # The fork entry again, as fork() writes it (the source need not exist here).
        changes = None if attrs is None else AttrChanges.of(attrs)
        fork = fork_edit(edit["source"], edit["sourceSeq"], len(messages), changes)
        return log._commit(log._core.batch(messages, fork, attrs), key, expected_seq=0)
    if "through" in edit:
        return log.compact(messages, through_seq=edit["through"], idempotency_key=key, attrs=attrs)
    return log.replace(messages, idempotency_key=key, attrs=attrs)


def _import_unit(log: MessageLog, source: _Source, unit: _Unit, index: int) -> tuple[int, bool]:
    """Write one unit; return the last seq and whether it was written now (``False``: an
    earlier run of this import had committed it)."""
    digest = hashlib.blake2b(digest_size=16)
    for _number, line in unit.lines:
        digest.update(line + b"\n")
    key = f"import:{index}:{digest.hexdigest()}"
    edit = unit.edit
    try:
        if edit is None:
            commit = log._commit_batch(log._core.batch(unit.messages), key, None)
            return commit.last_seq, commit.fresh
        # An edit's result is remembered under its key: there already, it is a replay.
        fresh = not log._redis.exists(log.keys.idempotency_record(key))
        return _import_edit(log, edit, unit.messages, key), fresh
    except MessageLogError as exc:
        first, last = unit.lines[0][0], unit.lines[-1][0]
        raise ImportBatchError(
            f"{source.name} lines {first}..{last} (batch {index + 1}) were not imported: "
            f"{exc} (the batches before it committed: running the import again writes "
            "only the rest)"
        ) from exc
