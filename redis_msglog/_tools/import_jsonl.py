"""Importing a JSON Lines export (``msglog import``, :func:`import_jsonl`): the input
read once into a private copy, every line validated before anything is written, then
written in units (a batch of messages, or an edit with its messages) each carrying an
idempotency key, so that an interrupted import run again writes only the rest.
:mod:`redis_msglog.admin` re-exports the public names."""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import IO, Any

from pydantic import ValidationError

from .._core.args import check_int, check_type, shown
from .._core.read.views import AttrChanges, fork_edit
from .._core.stored.codec import decode_row, edit_document, micros_to_datetime
from .._sync import MessageLog
from ..edits import EditEntry
from ..errors import (
    CodecError,
    InvalidArgumentError,
    InvalidEditError,
    InvalidMessageError,
    MessageLogError,
    MessageTooLargeError,
)
from ..models import StoredMessage

__all__ = ["ImportBatchError", "ImportFileError", "ImportResult", "import_jsonl"]


class ImportFileError(MessageLogError, ValueError):
    """The import file cannot be read, or a line of it is not a valid message; nothing
    was imported."""


class ImportBatchError(MessageLogError):
    """A batch of an import failed on the server (``__cause__`` says why). The message
    names its lines; the batches before it committed, and running the same import again
    writes only what is missing."""


def _check_path(path: object) -> None:
    """A file name that ``open`` takes: ``str`` or path-like, encodable, without NUL."""
    try:
        name = os.fsencode(path)  # type: ignore[arg-type]
    except (TypeError, UnicodeError) as exc:
        raise InvalidArgumentError(f"path must be a file name, got {shown(path)}: {exc}") from None
    if b"\0" in name:
        raise InvalidArgumentError(f"path must not contain NUL, got {shown(path)}")


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
    # A batch also ends before its lines reach the log's max_batch_bytes (a line is at
    # least the bytes its message is stored as: it holds its binaries as base64).
    cap, held = log._options.max_batch_bytes, 0
    for number, line in _lines(source):
        if edit is None and chunk and held + len(line) > cap:
            yield _Unit(chunk, messages)
            chunk, messages, held = [], [], 0
        held += len(line)
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
            chunk, messages, edit, held = [], [], None, 0
        elif edit is None and len(chunk) == batch_size:
            yield _Unit(chunk, messages)
            chunk, messages, held = [], [], 0
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
    if op == "trim":
        raise InvalidEditError(
            f"a trim through seq {edit.get('through')}: an export of a trimmed log lacks the "
            "entries before it, so its seqs cannot mean the same here (import it into a new "
            "conversation from its first kept seq instead)"
        )
    if op == "redact":
        return _import_redaction(log, edit, key)
    if op == "fork":
        # The fork entry again, as fork() writes it (the source need not exist here).
        changes = None if attrs is None else AttrChanges.of(attrs)
        fork = fork_edit(edit["source"], edit["sourceSeq"], len(messages), changes)
        return log._commit(log._core.batch(messages, fork, attrs), key, expected_seq=0)
    if "through" in edit:
        return log.compact(messages, through_seq=edit["through"], idempotency_key=key, attrs=attrs)
    return log.replace(messages, idempotency_key=key, attrs=attrs)


def _import_redaction(log: MessageLog, edit: dict[str, Any], key: str) -> int:
    """A redaction again: the export holds the redacted row, imported as a plain row at
    its seq; redacting it with itself as the replacement makes the import equal its
    source (the original is in neither)."""
    (seq,) = edit["seqs"]
    rows = log.read(after=seq - 1, limit=1, view="physical")
    if not rows or not isinstance(rows[0], StoredMessage) or rows[0].seq != seq:
        raise InvalidEditError(f"a redaction of seq {seq}, not a message of the import")
    return log.redact(
        seq,
        rows[0].as_message(),
        reason=edit.get("reason"),
        idempotency_key=key,
        attrs=edit.get("attrs"),
    )


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
