"""What every read of one log stands on: one round trip re-sent while the server cannot
serve it, the error for a read that failed for good, and the consistency checks that
make a read a gap-free run or an error (the seq counter against the stream's length, a
run of seqs without a gap or a repeat, a cursor beyond the end, missing blobs)."""

from __future__ import annotations

from collections.abc import Callable
from itertools import islice
from operator import itemgetter
from typing import Any, TypeVar

from ... import errors
from ..._lua import contract as script
from ..._lua.run import ScriptRunner
from ...edits import Entry
from ...models import StoredMessage
from ..retry import RetryPolicy
from ..steps import Command, NotSent, Pause, Plan, Read, Refused, StepFailure
from ..stored.entries import EditsPresent, StoredEntries, is_tombstone, parse_seq_counter, text
from ..stored.keys import ConversationKeys
from ..write.blobs import BlobMode, check_blob_mode, hydrate, references

R = TypeVar("R", bound=Entry)
_NO_EDITS = (None, b"0", "0")
_MAX_FILL = 10_000  # gaps one read fills at most: a longer one is not redactions
_first_item = itemgetter(0)


def _seq_of(entry_id: bytes | str) -> int:
    """The seq of a stream entry ID ``<seq>-<at>`` (``ValueError`` for another ID)."""
    if isinstance(entry_id, bytes):
        return int(entry_id.partition(b"-")[0])
    return int(entry_id.partition("-")[0])


def redacted_entry(seq: int, value: bytes | str, as_bytes: bool) -> list[Any]:
    """A redacted row as a stream entry: the view hash's ``"<at> <row JSON>"`` under the
    ID ``<seq>-<at>`` (the original's commit time), field ``msg``."""
    raw = value if isinstance(value, bytes) else value.encode()
    at, _, body = raw.partition(b" ")
    if as_bytes:
        return [b"%d-%s" % (seq, at), [b"msg", body]]
    return [f"{seq}-{at.decode()}", ["msg", body.decode()]]


class Reader:
    """One log's round trips and the checks of what they bring back."""

    def __init__(
        self,
        keys: ConversationKeys,
        page_size: int,
        retry: RetryPolicy,
        clock: Callable[[], float],
        entries: StoredEntries,
        runner: ScriptRunner,
    ) -> None:
        self.keys = keys
        self.page_size = page_size
        self.retry = retry
        self.clock = clock
        self.entries = entries
        self.runner = runner
        self.edited = False  # seen to have edits: view reads go to the view script

    def read(self, *commands: Command) -> Plan[list[Any]]:
        """One round trip, re-sent under the retry policy while the server cannot serve
        it; a failure for good raises this library's error."""
        try:
            return (yield from self.read_raw(commands, patient=True))
        except StepFailure as failure:
            raise self.error_for(failure) from (failure.origin or failure)

    def read_raw(self, commands: tuple[Command, ...], *, patient: bool) -> Plan[list[Any]]:
        """One round trip; re-sent (when ``patient``) after failures that left it unrun.
        Reads are idempotent, so any such failure may be retried."""
        started, tries = self.clock(), 0
        while True:
            tries += 1
            try:
                replies: list[Any] = yield Read(commands)
                return replies
            except NotSent:
                delay = self.retry.pause_before(tries, self.clock() - started)
                if not patient or delay is None:
                    raise
            yield Pause(delay)

    def first_read(self, probe: bool, *commands: Command) -> Plan[list[Any]]:
        """One round trip of ``commands``, with (``probe``) the question whether the log
        has edits in front: :class:`EditsPresent` if it has. The view's version (its last
        edit's seq; none on an edit-free log) is then the first reply."""
        if not probe:
            return (yield from self.read(*commands))
        replies = yield from self.read(("HGET", self.keys.view, "version"), *commands)
        if replies[0] not in _NO_EDITS:  # the seq of the last edit, 0 (or none) before one
            raise EditsPresent
        return replies

    def error_for(self, failure: StepFailure) -> errors.MessageLogError:
        """This library's error for a step that failed for good (its cause: the client
        library's exception, when there is one)."""
        if isinstance(failure, Refused):
            error = script.error_for(failure, self.keys)
        else:
            error = errors.ServerUnavailableError(f"Redis is unavailable: {failure.text}")
        error.__cause__ = failure.origin or failure
        return error

    def xrange(self, start_seq: int, count: int) -> Command:
        # As a start, "<seq>-0" is below every entry of that seq: "<seq>-<at>", and an
        # older entry's "<seq>-0".
        return ("XRANGE", self.keys.stream, f"{start_seq}-0", "+", "COUNT", count)

    def counter_commands(self) -> tuple[Command, Command, Command, Command]:
        # A sound log has one entry per seq from its first: XLEN == counter - trimmed.
        # Other workers may append (or trim) between these pipelined commands, so the
        # counter is compared with the entries counted before it (never more than the
        # counter) and after it, less the seqs trimmed as read after that (never fewer
        # than the counter less those). Four O(1) commands.
        length = ("XLEN", self.keys.stream)
        return length, ("GET", self.keys.seq), length, self.first_command()

    def first_command(self) -> Command:
        """The log's first seq (none: 1), recorded by its last trim, and how many of its
        rows are redacted (none: 0), kept in the view hash (docs/lifecycle.md)."""
        return ("HMGET", self.keys.view, "first", "redacted")

    def first_of(self, raw: Any) -> int:
        """The reply of :meth:`first_command` as the log's first seq."""
        value = raw[0] if isinstance(raw, list) else raw
        if value is None:
            return 1
        first = parse_seq_counter(value)
        if first is None or first < 1:
            raise errors.CorruptLogError(
                f"view {self.keys.view} holds first seq {text(value)!r}, not a seq (set by hand?)"
            )
        return first

    def redacted_of(self, raw: Any) -> int:
        """The reply of :meth:`first_command` as the number of redacted rows."""
        value = raw[1] if isinstance(raw, list) else None
        if value is None:
            return 0
        count = parse_seq_counter(value)
        if count is None:
            raise errors.CorruptLogError(
                f"view {self.keys.view} holds redacted count {text(value)!r}, not a count "
                "(set by hand?)"
            )
        return count

    def checked_counter(self, raw: bytes | str, before: int, after: int, first: Any = None) -> int:
        """The seq counter's value, checked against the stream's length read around it
        (and the seqs trimmed and redacted: ``first``, the reply of
        :meth:`first_command` read after them). An erased conversation's tombstone reads
        as an empty log (0)."""
        if is_tombstone(raw):
            return 0
        high = parse_seq_counter(raw)
        if high is None:
            raise errors.CorruptLogError(
                f"seq counter {self.keys.seq} holds {text(raw)!r}, not a seq (set by hand?)"
            )
        if high < before:
            raise errors.CorruptLogError(
                f"seq counter {self.keys.seq} ({high}) is behind stream {self.keys.stream}, "
                f"which has {before} entries (the counter was set by hand?)"
            )
        # The entries it says the stream holds: neither trimmed nor redacted (a redacted
        # row lives in the view hash).
        kept = high - (self.first_of(first) - 1) - self.redacted_of(first)
        if kept > after:
            raise errors.CorruptLogError(
                f"stream {self.keys.stream} has {after} entries but its seq counter says "
                f"{high} (of which {kept} are neither trimmed nor redacted): entries were "
                "deleted (XDEL?), or the counter was moved ahead"
            )
        return high

    def filled(
        self, entries: list[Any], start: int | None, end: int | None = None, *, step: int = 1
    ) -> Plan[list[Any]]:
        """``entries`` (an ``XRANGE``, or with ``step`` -1 an ``XREVRANGE``, reply) with
        the rows of redacted seqs (docs/lifecycle.md) put in the gaps of the run from
        ``start`` (None: the first entry's seq) to ``end`` (None: the last entry's). A
        run without a gap (every read of a log never redacted) costs two ID parses; a gap
        costs one ``HMGET`` of the view hash. A gap no redacted row fills stays, for
        :meth:`contiguous` to report."""
        if not entries and (start is None or end is None):
            return entries
        try:
            seqs = [_seq_of(entries[0][0]), _seq_of(entries[-1][0])] if entries else []
        except ValueError:
            return entries  # not an ID of ours: the decoding reports it
        low = seqs[0] if start is None else start
        high = seqs[-1] if end is None else end
        span = (high - low) * step + 1
        if span <= len(entries) and (not seqs or (seqs[0] == low and seqs[-1] == high)):
            return entries
        try:
            held = list(map(_seq_of, map(_first_item, entries)))  # once each, in C loops
        except ValueError:
            return entries
        present = set(held)
        # Lazily: a hostile entry ID (an XADD *'s milliseconds) makes the span ~10^12.
        gaps = (s for s in range(low, high + step, step) if s not in present)
        missing = list(islice(gaps, _MAX_FILL))
        if not missing:
            return entries
        (values,) = yield from self.read(("HMGET", self.keys.view, *(f"r:{s}" for s in missing)))
        found = [(s, v) for s, v in zip(missing, values, strict=True) if v is not None]
        if not found:
            return entries
        as_bytes = isinstance(entries[0][0], bytes) if entries else isinstance(found[0][1], bytes)
        pairs = list(zip(held, entries, strict=True))
        pairs += [(s, redacted_entry(s, v, as_bytes)) for s, v in found]
        pairs.sort(key=_first_item, reverse=step < 0)  # by seq: an int compare each
        return [entry for _, entry in pairs]

    def contiguous(self, rows: list[R], first: int | None, *, step: int = 1) -> list[R]:
        """``rows`` if their seqs run ``first, first + step, ...`` (``first`` None: from
        the first row's); a missing seq is a :class:`~redis_msglog.CorruptLogError`."""
        if not rows:
            return rows
        expected = rows[0].seq if first is None else first
        # Entry IDs come back strictly ordered, so the run is contiguous exactly when its
        # ends are: one check per page; the loop below only finds the first gap.
        if rows[0].seq == expected and rows[-1].seq == expected + step * (len(rows) - 1):
            return rows
        for row in rows:
            if row.seq != expected:
                if row.seq == expected - step:
                    self.twice(row.seq)
                low, high = sorted((expected, row.seq - step))
                self.gap(low, high)
            expected = row.seq + step
        return rows

    def twice(self, seq: int) -> None:
        """Raise: two entries of ``seq`` (IDs ``<seq>-<at>`` can differ in their time)."""
        raise errors.CorruptLogError(
            f"stream {self.keys.stream} holds two entries of seq {seq} (added by hand?): the "
            "log is not one entry per seq; see `msglog verify`"
        )

    def gap(self, low: int, high: int) -> None:
        """Raise: the seqs ``low..high`` are missing."""
        missing = f"seq {low}" if low == high else f"seqs {low}..{high}"
        raise errors.CorruptLogError(
            f"stream {self.keys.stream} is missing {missing} (deleted or trimmed by hand?): "
            "the log is not gap-free; see `msglog verify`"
        )

    def check_cursor(self, after: int) -> Plan[None]:
        """An empty read after ``after``: fine if the log ends exactly there; an error if
        it ends before (a rewound log, or a cursor from another log), unless the
        conversation was erased (its tombstone stands: an empty log, nothing rewound)."""
        newest, counter = yield from self.read(
            ("XREVRANGE", self.keys.stream, "+", "-", "COUNT", 1), ("GET", self.keys.seq)
        )
        if is_tombstone(counter):
            return
        rows = self.entries.decode_physical(newest)
        end = rows[0].seq if rows else 0
        if end < after:
            raise errors.LogRewoundError(
                f"cursor {after} is beyond the end of {self.keys.stream} (last seq {end}): the "
                "log was rewound (a failover lost acknowledged appends?) or the cursor belongs "
                "to another log"
            )

    def stream_end(self) -> Plan[int]:
        """The seq of the stream's last entry (0 when there is none)."""
        (newest,) = yield from self.read(("XREVRANGE", self.keys.stream, "+", "-", "COUNT", 1))
        rows = self.entries.decode_physical(newest)
        return rows[0].seq if rows else 0

    def with_blobs(self, rows: list[StoredMessage], mode: BlobMode) -> Plan[list[StoredMessage]]:
        """``rows`` with the binaries stored off them put back (``mode="hydrate"``: one more
        round trip, only when a row refers to one), or as references (``"refs"``)."""
        check_blob_mode(mode)
        digests = references(rows) if mode == "hydrate" else []
        if not digests:
            return rows
        (values,) = yield from self.read(("HMGET", self.keys.blobs, *digests))
        missing = [d for d, value in zip(digests, values, strict=True) if value is None]
        if missing:
            seqs = [r.seq for r in rows if set(references([r])) & set(missing)]
            raise errors.CorruptLogError(
                f"blob {missing[0]} of {self.keys.blobs}, referred to by seq {seqs[0]}, is "
                f"missing ({len(missing)} missing in all): deleted by hand? See `msglog verify`"
            )
        return hydrate(rows, dict(zip(digests, values, strict=True)))

    def entries_with_blobs(self, entries: list[Entry], mode: BlobMode) -> Plan[list[Entry]]:
        """:meth:`with_blobs` for a physical read: the messages' binaries put back."""
        messages = [e for e in entries if isinstance(e, StoredMessage)]
        hydrated = iter((yield from self.with_blobs(messages, mode)))
        return [next(hydrated) if isinstance(e, StoredMessage) else e for e in entries]
