"""The state of one ``follow``: where the follower is, that the log under it did not
rewind, and how patient it is with a failing server. I/O-free, like the core: each page
is a plan the shells carry like any other."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ... import errors
from ...edits import EditEntry, Entry
from ...models import StoredMessage
from ..args import is_number, shown
from ..facade import LogCore, require_seq
from ..retry import follow_backoff
from ..steps import Command, NotSent, Pause, Plan, Read, Refused, StepFailure
from ..stored.entries import is_tombstone, text
from ..write.blobs import BlobMode, check_blob_mode
from .roundtrip import redacted_entry


class FollowCursor:
    """Where a follower is, and how patient it is with a failing server.

    The stream is the source of truth: each step is one ``XREAD BLOCK`` for entries after
    ``position``, so a follower that starts late, lags or reconnects resumes exactly where
    it was. A page that does not start at ``position + 1`` (entries deleted under it)
    raises :class:`~redis_msglog.CorruptLogError` rather than skipping, unless ``trim()``
    removed them (the log's first seq, read then, says so): the follower goes on from the
    first kept entry, and the trim's edit entry follows.

    Rewinds: after a failover that lost acknowledged appends, the new primary's log ends
    before ``position``, or reuses its seqs for other messages. So at the start, after
    every lost connection and after every idle wait, the cursor reads the entry at
    ``position`` back (``XRANGE``) and compares it with the one it handed out (seq and
    commit time, content): missing or different raises
    :class:`~redis_msglog.LogRewoundError` instead of skipping or re-reading.
    """

    def __init__(
        self,
        core: LogCore,
        after: int,
        *,
        block_ms: int,
        reconnect_within: float | None,
        blobs: BlobMode = "hydrate",
    ) -> None:
        require_seq("after", after)
        check_blob_mode(blobs)
        if reconnect_within is not None and not is_number(reconnect_within):
            raise errors.InvalidArgumentError(
                f"reconnect_within must be a number >= 0 or None, got {shown(reconnect_within)}"
            )
        self.position = after
        self._blobs = blobs
        self._core = core
        self._block_ms = max(1, block_ms)  # BLOCK 0 would mean "forever"
        self._reconnect_within = reconnect_within
        self._failing_since: float | None = None
        self._failures = 0
        self._last: Entry | None = None  # the row at ``position``, once seen
        self._verify = after > 0  # read the entry at ``position`` back before going on
        self._erased = False  # the last check met an erased conversation's tombstone
        # Entries missing below the next one: the log's first seq is read next, to tell a
        # trim (skip to it) from a deletion or a rewind (raise ``_missing``).
        self._missing: errors.MessageLogError | None = None
        # Telemetry's backlog (set by the shell while a meter is set): each page then
        # reads the counter after the XREAD, in the same round trip, and ``behind`` is
        # how many committed entries the follower had yet to receive.
        self.count_behind = False
        self.behind: int | None = None
        # A follow with drafts (docs/drafts.md): other streams of the conversation read
        # by the same XREAD, (key, last ID) each, and their entries of the last page, by
        # key, for the drafts tracker (_core/drafts/cursor.py).
        self.other_streams: list[tuple[str, str]] = []
        self.other_entries: dict[str, Any] = {}

    def command(self) -> Command:
        """The next read: the check of the entry at ``position`` when one is due, else up
        to a page of entries after ``position``, waiting for one."""
        if self._missing is not None:
            return ("HGET", self._core.keys.view, "first")
        if self._verify:
            # An incomplete ID: "<seq>-0" to "<seq>-<max>", the entry of that seq whatever
            # its commit time (the second part of its ID; 0 for an earlier version's).
            at = str(self.position)
            return ("XRANGE", self._core.keys.stream, at, at)
        # XREAD returns the entries after the ID given: the greatest ID of seq ``position``.
        others = self.other_streams
        return (
            "XREAD", "COUNT", self._core.page_size, "BLOCK", self._block_ms,
            "STREAMS", self._core.keys.stream, *(k for k, _ in others),
            f"{self.position}-{MAX_ID_PART}", *(i for _, i in others),
        )  # fmt: skip

    def commands(self) -> tuple[Command, ...]:
        """The next round trip: :meth:`command`, and with the check of the entry at
        ``position`` the seq counter too (an erased conversation's tombstone)."""
        if self._verify:  # and the row of a redacted seq: not in the stream any more
            redacted = ("HGET", self._core.keys.view, f"r:{self.position}")
            return (self.command(), ("GET", self._core.keys.seq), redacted)
        if self.count_behind and self._missing is None:
            return (self.command(), ("GET", self._core.keys.seq))
        return (self.command(),)

    def accept(self, reply: Any, counter: Any = None, redacted: Any = None) -> list[Entry]:
        """The rows of an ``XREAD`` reply (none on a timeout); advances ``position``.
        ``counter``: the seq counter read with a check of the entry at ``position``, and
        ``redacted`` the row of that seq if it was redacted (docs/lifecycle.md)."""
        self._failing_since, self._failures = None, 0
        if self._missing is not None:
            self._check_trimmed(reply)
            return []
        if self._verify:
            if not reply and redacted is not None:
                reply = [redacted_entry(self.position, redacted, isinstance(redacted, bytes))]
            self._check_position(reply, counter)
            return []
        if not reply:
            self._verify = self.position > 0  # idle: make sure the log did not rewind
            self._count_behind(counter)
            return []
        # Raw replies: RESP2 [[stream, entries]]; RESP3 {stream: entries}.
        entries = next(iter(reply.values())) if isinstance(reply, Mapping) else reply[0][1]
        rows = self._core.decode_physical(entries)
        if rows and rows[0].seq != self.position + 1:
            self._missing = errors.CorruptLogError(
                f"stream {self._core.keys.stream} has a gap: expected seq {self.position + 1}, "
                f"got {rows[0].seq} (entries deleted or trimmed by hand?)"
            )
            return []  # a trim, if the log's first seq (read next) says so
        # Hand out the contiguous run; a gap further on is met (and raised) by the next read,
        # a seq written twice (IDs "<seq>-<at>" of two times) here: no read would meet it.
        end = next((i for i, row in enumerate(rows) if row.seq != rows[0].seq + i), len(rows))
        if end < len(rows) and rows[end].seq == rows[end - 1].seq:
            self._core.twice(rows[end].seq)
        rows = rows[:end]
        if rows:
            self.position, self._last = rows[-1].seq, rows[-1]
        self._count_behind(counter)
        return rows

    def _count_behind(self, counter: Any) -> None:
        """``behind``: the counter read after the page, less the follower's position."""
        last = int(counter) if isinstance(counter, (bytes, str)) and counter.isdigit() else None
        self.behind = None if last is None else max(0, last - self.position)

    def _check_position(self, entries: Any, counter: Any) -> None:
        self._verify = False
        rows = self._core.decode_physical(entries or [])
        if len(rows) > 1:  # XRANGE <seq> <seq>: every entry of that seq
            self._core.twice(self.position)
        self._erased = not rows and is_tombstone(counter)
        if self._erased:
            # Erased (docs/lifecycle.md): nothing new, ever. The check is made again after
            # each wait: once the tombstone expires, a new conversation under the same id
            # is not this one (its seqs are not ours), and the check says so.
            self._verify = True
            return
        if not rows:
            self._missing = errors.LogRewoundError(
                f"follow of {self._core.keys.stream} is at seq {self.position}, beyond the end "
                "of the log: it was rewound (a failover lost acknowledged appends?) or the "
                "cursor belongs to another log"
            )
            return  # a trim, if the log's first seq (read next) says so
        if (
            self._last is not None
            and rows[0] != self._last
            and not _redacted_since(rows[0], self._last)
        ):
            raise errors.LogRewoundError(
                f"seq {self.position} of {self._core.keys.stream} now holds another message "
                f"(committed {rows[0].at.isoformat()}, not {self._last.at.isoformat()}): the "
                "log was rewound and its seqs reused (a failover lost acknowledged appends?)"
            )

    def _check_trimmed(self, raw_first: Any) -> None:
        """After entries were found missing: a trim removed them (``trim()``: the log now
        starts above ``position``), so the follower goes on from the log's first seq (the
        trim's own entry follows); otherwise raise the error found."""
        missing, self._missing = self._missing, None
        first = 1 if raw_first is None else int(raw_first)
        if first <= self.position + (0 if isinstance(missing, errors.LogRewoundError) else 1):
            assert missing is not None
            raise missing
        self.position, self._last = first - 1, None

    def page_plan(self) -> Plan[list[Entry]]:
        """One read of the follow: the next rows (none after an idle wait). A read the
        server could not serve is made again after a pause (see :meth:`failed`)."""
        while True:
            reading = self._missing is None and not self._verify  # an XREAD
            try:
                replies = yield Read(self.commands())
            except StepFailure as failure:
                if not self.retryable(failure):
                    raise self._core.error_for(failure) from (failure.origin or failure)
                yield Pause(self.failed(failure))
                continue
            if reading and self.other_streams:
                replies[0] = self._split(replies[0])
                if replies[0] is None and self.other_entries:
                    self._failing_since, self._failures = None, 0
                    return []  # only drafts moved: not an idle wait
            if reading and replies[0]:  # redacted rows in the gaps of the page
                replies[0] = yield from self._filled(replies[0])
            rows = yield from self._with_redacted_rows(self.accept(*replies))
            if self._erased:
                yield Pause(self._block_ms / 1000)  # as an idle XREAD would have waited
            return (yield from self._core.entries_with_blobs(rows, self._blobs))

    def _with_redacted_rows(self, rows: list[Entry]) -> Plan[list[Entry]]:
        """``rows`` with each ``redact`` entry carrying the row that took the message's
        place (``EditEntry.row``, so a ``LogView`` folds it exactly): one ``HMGET`` of
        the view hash, only for a page that has such an entry."""
        wanted = [
            (i, r.seqs[0])
            for i, r in enumerate(rows)
            if isinstance(r, EditEntry) and r.op == "redact" and r.seqs
        ]
        if not wanted:
            return rows
        fields = (f"r:{seq}" for _, seq in wanted)
        (values,) = yield from self._core.read(("HMGET", self._core.keys.view, *fields))
        rows = list(rows)
        for (i, seq), value in zip(wanted, values, strict=True):
            if value is not None:
                entry = redacted_entry(seq, value, isinstance(value, bytes))
                (row,) = self._core.decode_entries([entry])
                rows[i] = rows[i].model_copy(update={"row": row})
        return rows

    def _split(self, reply: Any) -> Any:
        """An ``XREAD`` reply of several streams: the log's part as a reply of its own
        (``None``: nothing new), the others' entries kept in ``other_entries``."""
        by_key: dict[str, Any] = {}
        if reply:
            pairs = reply.items() if isinstance(reply, Mapping) else reply
            by_key = {text(key): entries for key, entries in pairs}
        mine = by_key.pop(self._core.keys.stream, None)
        self.other_entries = by_key
        return [[self._core.keys.stream, mine]] if mine else None

    def _filled(self, reply: Any) -> Plan[Any]:
        """An ``XREAD`` reply with the rows of redacted seqs in its gaps."""
        entries = next(iter(reply.values())) if isinstance(reply, Mapping) else reply[0][1]
        filled = yield from self._core.filled(entries, self.position + 1)
        return [[self._core.keys.stream, filled]]

    @staticmethod
    def retryable(failure: StepFailure) -> bool:
        """Whether the read may simply be made again: it did not run (a lost connection,
        a timeout, a cluster in a failover or with no node reachable), or the server
        released the blocked read because its role changed (``UNBLOCKED``, a primary
        turned replica)."""
        return isinstance(failure, NotSent) or (
            isinstance(failure, Refused) and failure.code == "UNBLOCKED"
        )

    def failed(self, failure: StepFailure) -> float:
        """Seconds to wait before reading again after a failure; raises
        :class:`~redis_msglog.ServerUnavailableError` once ``reconnect_within`` is spent."""
        now = self._core.clock()
        if self._failing_since is None:
            self._failing_since = now
        elif self._reconnect_within is not None and now - self._failing_since > (
            self._reconnect_within
        ):
            error = errors.ServerUnavailableError(
                f"follow of {self._core.keys.stream} lost the server for over "
                f"{self._reconnect_within} s (at seq {self.position}): {failure}"
            )
            raise error from failure.origin
        self._failures += 1
        self._verify = self.position > 0  # a new connection may reach a new primary
        return follow_backoff(self._failures)


def _redacted_since(now: Entry, then: Entry) -> bool:
    """Whether ``now`` is the redacted row of the message ``then`` (same seq and commit
    time): a redaction since it was handed out, not a rewind (its edit entry follows)."""
    return (
        isinstance(now, StoredMessage)
        and now.redacted
        and isinstance(then, StoredMessage)
        and (now.seq, now.at) == (then.seq, then.at)
    )


MAX_ID_PART = 2**64 - 1
"""The greatest second part of a stream entry ID (an unsigned 64-bit integer)."""


def follow_block_ms(socket_timeout: float | None) -> int:
    """How long one ``XREAD`` may block: well inside the client's socket timeout."""
    return 5000 if socket_timeout is None else min(5000, max(1, int(socket_timeout * 500)))
