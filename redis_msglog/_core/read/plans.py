"""The read plans of one log: counts, attributes, ranges from a cursor, the tail and
windows of it, and the row a pop hid. On an edit-free log a view is its stream, read
with ``XRANGE``/``XREVRANGE`` as a gap-free run or an error; the first round trip also
asks whether the log has edits, and a log with edits is read through the view script
(:mod:`.views`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ... import errors
from ...edits import Attributes, EditEntry, Entry, View
from ...models import StoredMessage, Usage
from ..checks import check_view, require_non_negative, require_seq
from ..steps import Plan
from ..stored import usage
from ..stored.entries import EditsPresent, Trimmed, text
from ..write.blobs import BlobMode
from .roundtrip import R, Reader
from .views import ViewReads, window_start

if TYPE_CHECKING:
    from ..write.append import Commit


class Reads:
    """The read plans of one log (see the module)."""

    def __init__(self, reader: Reader) -> None:
        self.reader = reader
        self.views = ViewReads(reader)
        entries = reader.entries
        self.decode_entries = entries.decode_entries
        self.decode_physical = entries.decode_physical

    def count_plan(self, view: View | None = None) -> Plan[int]:
        """The seq counter (``view`` None or ``"physical"``), checked against the stream
        in the same round trip: garbage, or a counter that disagrees with the number of
        entries, is a :class:`~redis_msglog.CorruptLogError`. A missing counter (deleted
        or evicted) counts to the stream's last entry, where the next append continues.

        With another ``view``: the number of its rows (on an edit-free log, the counter;
        ``"archived"``: 0)."""
        if view is not None:
            check_view(view, physical=True)
        reader = self.reader
        if view in (None, "physical") or not reader.edited:
            probe = view not in (None, "physical")
            try:
                replies = yield from reader.first_read(probe, *reader.counter_commands())
            except EditsPresent:
                reader.edited = True
            else:
                before, raw, after, first = replies[1:] if probe else replies
                if view == "archived":
                    return 0
                if raw is None:
                    return 0 if not after else (yield from reader.stream_end())
                return reader.checked_counter(raw, before, after, first)
        assert view in ("visible", "active", "archived")
        return (yield from self.views.count_plan(view))

    def attrs_plan(self) -> Plan[Attributes]:
        """The conversation's attributes and its last seq, in one round trip."""
        reader = self.reader
        fields, before, raw, after, first = yield from reader.read(
            ("HGETALL", reader.keys.view), *reader.counter_commands()
        )
        if raw is None:
            last = 0 if not after else (yield from reader.stream_end())
        else:
            last = reader.checked_counter(raw, before, after, first)
        pairs = (
            fields.items()
            if isinstance(fields, Mapping)
            else zip(fields[::2], fields[1::2], strict=True)
        )
        values = {
            text(name)[2:]: text(value) for name, value in pairs if text(name).startswith("a:")
        }
        return Attributes(values, last)

    def usage_plan(self) -> Plan[Usage]:
        """The conversation's usage totals (all zero: none recorded), in one round trip."""
        key = self.reader.keys.usage
        (held,) = yield from self.reader.read(("HMGET", key, *usage.FIELDS))
        return usage.from_totals(held, key)

    def read_plan(
        self, after: int, limit: int | None, blobs: BlobMode = "hydrate", view: View = "visible"
    ) -> Plan[list[StoredMessage]]:
        """The rows of ``view`` whose seq is above ``after``, in view order, at most
        ``limit`` (docs/edits.md). An edit-free log's view is its stream: read with
        ``XRANGE``, a gap-free run or an error (see :meth:`range_plan`); a log with edits
        is read by the view script."""
        check_view(view, physical=False)
        require_seq("after", after)
        if limit is not None:
            require_non_negative("limit", limit)
        reader = self.reader
        if not reader.edited:
            try:
                rows = yield from self.range_plan(after, limit, self.decode_entries, probe=True)
                return [] if view == "archived" else (yield from reader.with_blobs(rows, blobs))
            except EditsPresent:
                reader.edited = True
        rows = yield from self.views.read_plan(view, after, limit)
        return (yield from reader.with_blobs(rows, blobs))

    def physical_read_plan(
        self, after: int, limit: int | None, blobs: BlobMode = "hydrate"
    ) -> Plan[list[Entry]]:
        """Every entry with seq above ``after``, messages and edits, in seq order."""
        require_seq("after", after)
        if limit is not None:
            require_non_negative("limit", limit)
        entries = yield from self.range_plan(after, limit, self.decode_physical, probe=False)
        return (yield from self.reader.entries_with_blobs(entries, blobs))

    def range_plan(
        self,
        after: int,
        limit: int | None,
        decode: Callable[[list[Any]], list[R]],
        *,
        probe: bool,
        version: list[Any] | None = None,
    ) -> Plan[list[R]]:
        """Entries with seq > ``after``, in order, at most ``limit``: a gap-free run
        that starts at ``after + 1``, or an error; never a silent gap or truncation.

        One page is one ``XRANGE`` (atomic). Longer reads are bounded by the seq counter
        read in the first round trip, so they end even while other workers append, and
        they reach it: a stream that ends before its counter is a
        :class:`~redis_msglog.CorruptLogError`, as is a counter behind the stream.
        ``probe``: also ask, in the first round trip, whether the log has edits (then
        :class:`EditsPresent` is raised: the caller reads the view instead); the view's
        version it read goes into ``version``, when given.
        """
        if limit == 0:
            return []
        while True:  # again only when a trim commits in the middle of the read
            try:
                return (yield from self._range_once(after, limit, decode, probe, version))
            except Trimmed:
                if version is not None:
                    version.clear()

    def _range_once(
        self,
        after: int,
        limit: int | None,
        decode: Callable[[list[Any]], list[R]],
        probe: bool,
        version: list[Any] | None,
    ) -> Plan[list[R]]:
        """One try of :meth:`range_plan`. The log's first seq is read before and after
        each ``XRANGE``: when a trim committed in between (it moved), :class:`Trimmed`
        (read again); else the run starts at ``after + 1``, or at the first seq if that
        is above (a cursor below a trim reads from the first kept entry)."""
        reader = self.reader
        first_seq = reader.first_command()
        if limit is not None and limit <= reader.page_size:
            replies = yield from reader.first_read(
                probe, first_seq, reader.xrange(after + 1, limit), first_seq
            )
            first, entries, moved = replies[-3:]
            start = _start(reader, after, first, moved)
            entries = yield from reader.filled(entries, start)  # redacted rows: in their gaps
            rows = reader.contiguous(decode(entries), start)[:limit]
            if not rows and after:
                yield from reader.check_cursor(after)
            return rows
        want = reader.page_size if limit is None else min(limit, reader.page_size)
        length, counter, _, _ = reader.counter_commands()
        replies = yield from reader.first_read(
            probe, first_seq, length, counter, length, reader.xrange(after + 1, want), first_seq
        )
        if version is not None:
            version.append(replies[0] if probe else None)
        first, before, raw_high, length_after, entries, moved = replies[1:] if probe else replies
        start = _start(reader, after, first, moved)
        high = (
            None
            if raw_high is None
            else reader.checked_counter(raw_high, before, length_after, moved)
        )
        got = len(entries)  # as read: the rows of redacted seqs are added below
        rows = reader.contiguous(decode((yield from reader.filled(entries, start))), start)
        while got == want and (limit is None or len(rows) < limit):
            if high is not None and rows[-1].seq >= high:
                break
            want = reader.page_size if limit is None else min(reader.page_size, limit - len(rows))
            entries, now = yield from reader.read(reader.xrange(rows[-1].seq + 1, want), first_seq)
            if now != moved:
                raise Trimmed
            got = len(entries)
            entries = yield from reader.filled(entries, rows[-1].seq + 1)
            rows.extend(reader.contiguous(decode(entries), rows[-1].seq + 1))
        if limit is not None:
            del rows[limit:]
        if not rows and after:
            yield from reader.check_cursor(after)
        _check_end(reader, rows, max(after, start - 1), high, limit)
        return rows

    def last_plan(
        self, n: int, blobs: BlobMode = "hydrate", view: View = "visible"
    ) -> Plan[list[StoredMessage]]:
        """The last ``n`` rows of ``view`` in view order (fewer only when it has fewer).
        On an edit-free log: a gap-free run that ends at the stream's last entry."""
        check_view(view, physical=False)
        require_non_negative("n", n)
        if n == 0:
            return []
        reader = self.reader
        if not reader.edited:
            try:
                rows = yield from self._tail_plan(n, self.decode_entries, probe=True)
                return [] if view == "archived" else (yield from reader.with_blobs(rows, blobs))
            except EditsPresent:
                reader.edited = True
        rows = yield from self.views.last_plan(view, n)
        return (yield from reader.with_blobs(rows, blobs))

    def physical_last_plan(self, n: int, blobs: BlobMode = "hydrate") -> Plan[list[Entry]]:
        """The last ``n`` entries, messages and edits, in seq order."""
        require_non_negative("n", n)
        if n == 0:
            return []
        entries = yield from self._tail_plan(n, self.decode_physical, probe=False)
        return (yield from self.reader.entries_with_blobs(entries, blobs))

    def _tail_plan(
        self, n: int, decode: Callable[[list[Any]], list[R]], *, probe: bool
    ) -> Plan[list[R]]:
        """The last ``n`` entries in seq order: a gap-free run that ends at the stream's
        last entry (fewer only when the log has fewer)."""
        while True:  # again only when a trim commits in the middle of the read
            try:
                return (yield from self._tail_once(n, decode, probe))
            except Trimmed:
                pass

    def _tail_once(
        self, n: int, decode: Callable[[list[Any]], list[R]], probe: bool
    ) -> Plan[list[R]]:
        """One try of :meth:`_tail_plan`: each page is read with the log's first seq
        (recorded by a trim), which must not move during the read."""
        reader, stream = self.reader, self.reader.keys.stream
        first_seq = reader.first_command()
        want = min(n, reader.page_size)
        replies = yield from reader.first_read(
            probe, ("XREVRANGE", stream, "+", "-", "COUNT", want), first_seq
        )
        entries, raw_first = replies[-2:]
        first = reader.first_of(raw_first)
        # Redacted rows are filled in their gaps; below a short page, down to the first seq
        # (the newest entry is never redacted: a redact's own entry comes after its row).
        got = len(entries)
        entries = yield from reader.filled(entries, None, first if got < want else None, step=-1)
        newest_first = reader.contiguous(decode(entries), None, step=-1)
        while got == want and len(newest_first) < n and newest_first[-1].seq > first:
            want = min(reader.page_size, n - len(newest_first))
            below = newest_first[-1].seq - 1
            # "<below>" is an incomplete ID: as an end, "<below>-<max>", so the entry of
            # seq ``below`` is in, whatever its commit time (the second part of its ID).
            entries, now = yield from reader.read(
                ("XREVRANGE", stream, str(below), "-", "COUNT", want), first_seq
            )
            if now != raw_first:
                raise Trimmed
            got = len(entries)
            entries = yield from reader.filled(
                entries, below, first if got < want else None, step=-1
            )
            newest_first.extend(reader.contiguous(decode(entries), below, step=-1))
        del newest_first[n:]
        if len(newest_first) < n and newest_first and newest_first[-1].seq > first:
            reader.gap(first, newest_first[-1].seq - 1)  # the log starts after its first
        newest_first.reverse()
        return newest_first

    def window_plan(
        self,
        view: View,
        *,
        turns: int | None = None,
        budget: int | None = None,
        counter: Callable[[StoredMessage], int] | None = None,
    ) -> Plan[list[StoredMessage]]:
        """A window of the view's tail that never splits a tool call from its result (see
        :func:`.views.window_start`): reads a page of the tail, and twice as much
        until the window fits or the view is read whole."""
        want = self.reader.page_size
        while True:
            rows = yield from self.last_plan(want, "hydrate", view)
            start = window_start(rows, turns=turns, budget=budget, counter=counter)
            if start is not None:
                return rows[start:]
            if len(rows) < want:
                return rows  # the whole view fits
            want *= 2

    def popped_plan(self, commit: Commit, blobs: BlobMode) -> Plan[StoredMessage | None]:
        """The message a pop hid: from the script's reply, or, for a replay (whose reply
        does not carry it), read back through the retract entry the pop wrote."""
        reader = self.reader
        if commit.popped is not None:
            rows = self.decode_entries([commit.popped])
        elif commit.replayed:
            (entries,) = yield from reader.read(reader.xrange(commit.last_seq, 1))
            edit = self.decode_physical(entries)[0]
            if not isinstance(edit, EditEntry) or not edit.seqs:
                raise errors.CorruptLogError(
                    f"entry {commit.last_seq} of {reader.keys.stream}, recorded as a pop, is "
                    "not a retraction"
                )
            (entries,) = yield from reader.read(reader.xrange(edit.seqs[0], 1))
            rows = self.decode_entries(entries)
        else:
            return None  # the view was empty: nothing written
        return (yield from reader.with_blobs(rows, blobs))[0]


def _start(reader: Reader, after: int, first: Any, moved: Any) -> int:
    """The seq a read after ``after`` starts at: ``after + 1``, or the log's first seq
    (read before and after its ``XRANGE``: :class:`Trimmed` if it moved) if above."""
    if first != moved:
        raise Trimmed
    return max(after + 1, reader.first_of(first))


def _check_end(
    reader: Reader, rows: list[Any], below: int, high: int | None, limit: int | None
) -> None:
    """A read of the whole log (no ``limit`` reached) must end at the seq counter."""
    reached = rows[-1].seq if rows else below
    if high is not None and reached < high and (limit is None or len(rows) < limit):
        raise errors.CorruptLogError(
            f"stream {reader.keys.stream} ends at seq {reached} but its seq counter says "
            f"{high}: entries were deleted, or the counter was moved ahead"
        )
