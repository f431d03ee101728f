"""The state of one ``follow``: where the follower is, that the log under it did not
rewind, and how patient it is with a failing server. I/O-free, like the core; the shells
carry its commands."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from redis import exceptions as redis_errors

from . import errors
from ._core import LogCore, require_non_negative
from ._routing import Command
from .models import StoredMessage


class FollowCursor:
    """Where a follower is, and how patient it is with a failing server.

    The stream is the source of truth: each step is one ``XREAD BLOCK`` for entries after
    ``position``, so a follower that starts late, lags or reconnects resumes exactly where
    it was. A page that does not start at ``position + 1`` (entries deleted or trimmed
    under it) raises :class:`~redis_msglog.CorruptLogError` rather than skipping.

    Rewinds: after a failover that lost acknowledged appends, the new primary's log ends
    before ``position``, or reuses its seqs for other messages. So at the start, after
    every lost connection and after every idle wait, the cursor reads the entry at
    ``position`` back (``XRANGE``) and compares it with the one it handed out (seq and
    commit time, content): missing or different raises
    :class:`~redis_msglog.LogRewoundError` instead of skipping or re-reading.
    """

    def __init__(
        self, core: LogCore, after: int, *, block_ms: int, reconnect_within: float | None
    ) -> None:
        require_non_negative("after", after)
        if reconnect_within is not None and not reconnect_within >= 0:
            raise ValueError(f"reconnect_within must be >= 0 or None, got {reconnect_within!r}")
        self.position = after
        self._core = core
        self._block_ms = max(1, block_ms)  # BLOCK 0 would mean "forever"
        self._reconnect_within = reconnect_within
        self._failing_since: float | None = None
        self._failures = 0
        self._last: StoredMessage | None = None  # the row at ``position``, once seen
        self._verify = after > 0  # read the entry at ``position`` back before going on

    def command(self) -> Command:
        """The next read: the check of the entry at ``position`` when one is due, else up
        to a page of entries after ``position``, waiting for one."""
        if self._verify:
            at = f"{self.position}-0"
            return ("XRANGE", self._core.keys.stream, at, at)
        return (
            "XREAD", "COUNT", self._core.page_size, "BLOCK", self._block_ms,
            "STREAMS", self._core.keys.stream, f"{self.position}-0",
        )  # fmt: skip

    def accept(self, reply: Any) -> list[StoredMessage]:
        """The rows of an ``XREAD`` reply (none on a timeout); advances ``position``."""
        self._failing_since, self._failures = None, 0
        if self._verify:
            self._check_position(reply)
            return []
        if not reply:
            self._verify = self.position > 0  # idle: make sure the log did not rewind
            return []
        # RESP2: [[stream, entries]]; RESP3: {stream: [entries]}.
        entries = next(iter(reply.values()))[0] if isinstance(reply, Mapping) else reply[0][1]
        rows = self._core.decode_entries(entries)
        if rows and rows[0].seq != self.position + 1:
            raise errors.CorruptLogError(
                f"stream {self._core.keys.stream} has a gap: expected seq {self.position + 1}, "
                f"got {rows[0].seq} (entries deleted or trimmed?)"
            )
        # Hand out the contiguous run; a gap further on is met (and raised) by the next read.
        end = next((i for i, row in enumerate(rows) if row.seq != rows[0].seq + i), len(rows))
        rows = rows[:end]
        if rows:
            self.position, self._last = rows[-1].seq, rows[-1]
        return rows

    def _check_position(self, entries: Any) -> None:
        self._verify = False
        rows = self._core.decode_entries(entries or [])
        if not rows:
            raise errors.LogRewoundError(
                f"follow of {self._core.keys.stream} is at seq {self.position}, beyond the end "
                "of the log: it was rewound (a failover lost acknowledged appends?) or the "
                "cursor belongs to another log"
            )
        if self._last is not None and rows[0] != self._last:
            raise errors.LogRewoundError(
                f"seq {self.position} of {self._core.keys.stream} now holds another message "
                f"(committed {rows[0].at.isoformat()}, not {self._last.at.isoformat()}): the "
                "log was rewound and its seqs reused (a failover lost acknowledged appends?)"
            )

    @staticmethod
    def retryable(exc: BaseException) -> bool:
        """Whether the read may simply be made again: a lost connection, a timeout, a
        cluster in the middle of a failover (or with no node reachable: redis-py raises a
        ``RedisClusterException``, not a ``RedisError``, when its slot table cannot be
        refreshed), or a blocked read that the server released because its role changed
        (``UNBLOCKED``, a primary turned replica)."""
        if isinstance(exc, (redis_errors.ConnectionError, redis_errors.TimeoutError)):
            return True
        if isinstance(exc, redis_errors.RedisClusterException):
            return True
        if isinstance(exc, (redis_errors.ClusterDownError, redis_errors.TryAgainError)):
            return True
        return isinstance(exc, redis_errors.ResponseError) and str(exc).startswith("UNBLOCKED")

    def failed(self, exc: BaseException) -> float:
        """Seconds to wait before reading again after a connection failure; raises
        :class:`~redis_msglog.ServerUnavailableError` once ``reconnect_within`` is spent."""
        now = time.monotonic()
        if self._failing_since is None:
            self._failing_since = now
        elif self._reconnect_within is not None and now - self._failing_since > (
            self._reconnect_within
        ):
            raise errors.ServerUnavailableError(
                f"follow of {self._core.keys.stream} lost the server for over "
                f"{self._reconnect_within} s (at seq {self.position}): {exc}"
            ) from exc
        self._failures += 1
        self._verify = self.position > 0  # a new connection may reach a new primary
        return float(min(2.0, 0.05 * 2 ** min(self._failures - 1, 10)))


def follow_block_ms(socket_timeout: float | None) -> int:
    """How long one ``XREAD`` may block: well inside the client's socket timeout."""
    return 5000 if socket_timeout is None else min(5000, max(1, int(socket_timeout * 500)))
