"""``msglog verify``'s checks of the deletions a log records (docs/lifecycle.md): its
trims (the log starts at the first seq its last trim entry says) and its redactions (a
seq missing from the stream is fine exactly when a ``redact`` entry records it and the
view hash holds its redacted row)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import redis
from redis import exceptions as redis_errors

from .._core.stored.codec import decode_entry
from .._core.stored.entries import parse_seq_counter, text
from .._core.stored.keys import ConversationKeys
from ..edits import EditEntry, Entry
from ..models import StoredMessage

Problem = Callable[[str], None]


def read_first(client: redis.Redis, keys: ConversationKeys, problem: Problem) -> int:
    """The log's first seq, recorded by its last trim in the view hash (none: 1)."""
    try:
        raw = client.hget(keys.view, "first")
    except redis_errors.ResponseError as exc:
        problem(f"view {keys.view}: {exc}")
        return 1
    if raw is None:
        return 1
    first = parse_seq_counter(raw)
    if first is None or first < 1:
        problem(f"view {keys.view} holds first seq {text(raw)!r}, not a seq")
        return 1
    return first


def check_trims(keys: ConversationKeys, first: int, trims: list[int], problem: Problem) -> None:
    """A log that starts after seq 1 was trimmed, and says so: its last trim entry (which
    no trim removes: it comes after what it trimmed) trimmed exactly up to its first seq.
    Any other missing entry is reported by the stream's check."""
    if first == 1 and not trims:
        return
    if not trims:
        problem(
            f"view {keys.view} says the log starts at seq {first}, but no trim entry records "
            "a trim (entries deleted by hand?)"
        )
    elif trims[-1] != first - 1:
        problem(
            f"the last trim entry trimmed through seq {trims[-1]}, but view {keys.view} says "
            f"the log starts at seq {first}"
        )


class Redactions:
    """The redacted rows of a log (``r:<seq>`` fields of its view hash), checked against
    the stream as it is walked: each fills its seq's gap, and at the end each must be
    recorded by a ``redact`` entry, and each such entry (of a seq not trimmed) by a row."""

    def __init__(self, client: redis.Redis, keys: ConversationKeys, problem: Problem) -> None:
        self._keys, self._problem = keys, problem
        self.rows: dict[int, Any] = {}
        self._recorded: dict[int, int] = {}  # redacted seq -> the redact entry's seq
        self._used: set[int] = set()
        self._count = 0
        try:
            for name, value in client.hscan_iter(keys.view, match="r:*"):
                seq = parse_seq_counter(text(name)[2:])
                if seq is None:
                    problem(f"view {keys.view} holds field {text(name)!r}, not r:<seq>")
                else:
                    self.rows[seq] = value
            raw = client.hget(keys.view, "redacted")
            self._count = 0 if raw is None else (parse_seq_counter(raw) or -1)
        except redis_errors.ResponseError as exc:
            problem(f"view {keys.view}: {exc}")

    def fill(self, expected: int, entry_id: Any) -> list[StoredMessage]:
        """The redacted rows of the seqs from ``expected`` up to the entry ``entry_id``'s
        (exclusive), as long as each has one: a gap they do not fill is left for the
        stream's check to report."""
        seq_part = text(entry_id).partition("-")[0]
        end = int(seq_part) if seq_part.isdigit() else expected
        rows: list[StoredMessage] = []
        while expected < end and expected in self.rows:
            value = self.rows[expected]
            at, _, body = (value if isinstance(value, bytes) else value.encode()).partition(b" ")
            try:
                row = decode_entry(expected, at, body)
            except (ValueError, OverflowError) as exc:
                self._problem(f"the redacted row of seq {expected} does not decode: {exc}")
                return rows
            if not row.redacted:
                self._problem(f"the redacted row of seq {expected} is not marked redacted")
            self._used.add(expected)
            rows.append(row)
            expected += 1
        return rows

    def record(self, row: Entry | None) -> None:
        """Note a ``redact`` entry."""
        if isinstance(row, EditEntry) and row.op == "redact":
            for seq in row.seqs or ():
                self._recorded[seq] = row.seq

    def finish(self, first: int) -> None:
        """Every redacted row filled a gap and is recorded; every redaction of a seq not
        trimmed has its row; the view hash's count is theirs."""
        for seq in sorted(self.rows):
            if seq not in self._recorded:
                self._problem(
                    f"view {self._keys.view} holds a redacted row of seq {seq}, but no redact "
                    "entry records a redaction of it (set by hand?)"
                )
            elif seq not in self._used:
                self._problem(
                    f"seq {seq} is redacted, but the stream still holds an entry of it, or "
                    "it is not in the log"
                )
        for seq, by in sorted(self._recorded.items()):
            if seq >= first and seq not in self.rows:
                self._problem(
                    f"entry {by} redacted seq {seq}, but view {self._keys.view} holds no "
                    "redacted row of it (deleted by hand?)"
                )
        if self._count != len(self.rows):
            self._problem(
                f"view {self._keys.view} counts {self._count} redacted rows, but holds "
                f"{len(self.rows)}"
            )
