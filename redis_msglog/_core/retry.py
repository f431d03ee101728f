"""When and how a call is retried while the server cannot take it: every retry decision
of the library, in one place (docs/workers.md#retries has the table).

- Appends: the core re-sends the script under the log's :class:`RetryPolicy` (safe: every
  try of a call carries the same identity: the caller's idempotency key, or the log's
  producer id and the call's number).
- Reads: the core re-sends them under the same policy (idempotent).
- Cluster redirections (``MOVED``/``ASK``): the router follows them, pausing by
  :func:`redirect_pause` (nothing ran).
- A follower: re-reads from its cursor, pausing by :func:`follow_backoff`, until its
  ``reconnect_within`` (it checks the entry at its cursor, so a rewind is an error).
- A busy pool: the router waits for a connection, within the call's deadline (``_io.pool``).
- A refused login (``WRONGPASS``, ``NOAUTH``) or ACL refusal (``NOPERM``): never retried.
- redis-py's own retry is never used: the library sends on connections itself, and
  connects them once per try with the client's retry off, within the call's deadline.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import timedelta

from ..errors import InvalidArgumentError
from .args import check_int, is_number, shown

DEFAULT_DEADLINE = 30.0


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How long, and how patiently, a call keeps trying while the server cannot take it.

    Used by appends (re-sent when their connection fails, or when a Redis Cluster
    refuses them without running them: ``CLUSTERDOWN`` during a failover, ``TRYAGAIN``
    during a slot migration) and by reads. The default rides out a crash failover of a
    cluster primary (a few seconds more than ``cluster-node-timeout``: 20 s measured
    with Redis's default of 15 s) and a restarting server, and gives up after
    ``deadline``.

    A retry is always safe: every append sent under a policy with ``attempts != 0``
    carries the same identity on every try (the caller's idempotency key, or the
    process's producer id and the call's number), so the server answers a re-sent append
    that already committed with the first result instead of writing it again.

    Args:
        attempts: the most re-sends after the first try; ``None`` (the default): as many
            as fit in ``deadline``; 0 disables retries and the producer's records.
        backoff: the delay before the first re-send, in seconds; it doubles each time.
        max_backoff: the longest delay between two tries, in seconds (also about how long
            a call keeps waiting after the server is back).
        generated_key_ttl: how long the server surely remembers the results of an append
            made without a key: the process's producer record is kept at least this long
            after its last append (idle ones are pruned after it by later writes). No
            re-send is made once the first try is older than 90% of it, so a slow retry
            sequence ends in doubt rather than in a duplicate, and the key of an
            :class:`~redis_msglog.AppendInDoubtError` is good for this long after the
            first try. (The name is from when each such append had a generated key.)
            Keys the caller passes are remembered for the log's ``idempotency_window``.
        deadline: no re-send starts later than this many seconds after the call began
            (default 30 s, well under the 108 s that the 90% rule allows). A call
            therefore gives up within ``deadline`` plus one try, whatever the client's own
            retry settings: each try connects once (the client's retry off), its connect,
            TLS handshake and login bounded by what is left of the deadline (at least
            1 s); a try that reached the server waits for its reply up to the client's
            ``socket_timeout``. A busy connection pool is waited for within it too.
    """

    attempts: int | None = None
    backoff: float = 0.05
    max_backoff: float = 1.0
    generated_key_ttl: timedelta = timedelta(minutes=2)
    deadline: float = DEFAULT_DEADLINE

    def __post_init__(self) -> None:
        if self.attempts is not None:
            check_int("attempts", self.attempts)
        if not is_number(self.backoff) or not is_number(self.max_backoff, self.backoff):
            raise InvalidArgumentError(
                "backoff must be a number >= 0 and max_backoff one >= backoff, got "
                f"{shown(self.backoff)} and {shown(self.max_backoff)}"
            )
        ttl = self.generated_key_ttl
        if not isinstance(ttl, timedelta) or ttl < timedelta(seconds=1):
            raise InvalidArgumentError(
                f"generated_key_ttl must be a timedelta of at least one second, got {shown(ttl)}"
            )
        if not is_number(self.deadline):
            raise InvalidArgumentError(
                f"deadline must be a number of seconds >= 0, got {shown(self.deadline)}"
            )

    @property
    def retries(self) -> bool:
        """Whether a call may be re-sent at all."""
        return self.attempts != 0

    def delay(self, retry: int) -> float:
        """Seconds to wait before re-send number ``retry`` (1-based): exponential, capped,
        with jitter so that workers cut off together do not come back together."""
        # The exponent is capped: with no cap on attempts, 2**retry could overflow a float.
        ceiling = min(self.max_backoff, self.backoff * 2 ** min(retry - 1, 64))
        return random.uniform(ceiling / 2, ceiling)

    def pause_before(self, retry: int, elapsed: float) -> float | None:
        """Seconds to wait before re-send number ``retry`` (1-based), ``elapsed`` seconds
        after the first try; ``None`` when the policy allows no more re-sends. The last
        re-send is made at the deadline rather than skipped."""
        if self.attempts is not None and retry > self.attempts:
            return None
        remaining = self.deadline - elapsed
        if remaining <= 0:
            return None
        return min(self.delay(retry), remaining)


DEFAULT_RETRY = RetryPolicy()
"""Re-sends for up to 30 s, 50 ms doubling up to 1 s, results of appends without a key
remembered for 2 minutes after the log's last append."""
NO_RETRY = RetryPolicy(attempts=0)
"""Send each append (and read) once; a lost reply raises
:class:`~redis_msglog.AppendInDoubtError`."""


def follow_backoff(failures: int) -> float:
    """Seconds a follower waits before reading again after ``failures`` failed reads in a
    row: 50 ms doubling to 2 s (its patience overall is its ``reconnect_within``)."""
    return float(min(2.0, 0.05 * 2 ** min(failures - 1, 10)))


def redirect_pause(redirect: int) -> float:
    """Seconds before following cluster redirection number ``redirect`` (0-based): the
    first two at once; more mean the nodes disagree for a moment (a slot being
    reassigned), so give them a little time to converge."""
    return 0.0 if redirect < 2 else float(min(0.1, 0.005 * 2**redirect))
