"""When and how an append is retried after its connection fails."""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import timedelta


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How many times, and how patiently, an append is re-sent when its connection fails.

    A retry is always safe: every append sent under a policy with ``attempts > 0`` carries
    an idempotency key (the caller's, or one generated for the call), so the server
    answers a re-sent append that already committed with the first result instead of
    writing it again.

    Args:
        attempts: re-sends after the first try (0 disables retries and generated keys).
        backoff: the delay before the first re-send, in seconds; it doubles each time.
        max_backoff: the longest delay between two tries, in seconds.
        generated_key_ttl: how long the server remembers a generated key (about 250 bytes
            each): short, so they cost little memory. No re-send is made once the first
            try is older than 90% of it, so a slow retry sequence ends in doubt rather
            than in a duplicate. Keys the caller passes are remembered for the log's
            ``idempotency_window`` instead.

    Timeouts are the redis client's own (``socket_timeout``, ``socket_connect_timeout``).
    """

    attempts: int = 3
    backoff: float = 0.05
    max_backoff: float = 2.0
    generated_key_ttl: timedelta = timedelta(minutes=2)

    def __post_init__(self) -> None:
        if isinstance(self.attempts, bool) or not isinstance(self.attempts, int):
            raise ValueError(f"attempts must be an int, got {self.attempts!r}")
        if self.attempts < 0:
            raise ValueError(f"attempts must be >= 0, got {self.attempts}")
        if not self.backoff >= 0 or not self.max_backoff >= self.backoff:
            raise ValueError("backoff must be >= 0 and max_backoff >= backoff")
        if self.generated_key_ttl < timedelta(seconds=1):
            raise ValueError("generated_key_ttl must be at least one second")

    def delay(self, retry: int) -> float:
        """Seconds to wait before re-send number ``retry`` (1-based): exponential, capped,
        with jitter so that workers cut off together do not come back together."""
        ceiling = min(self.max_backoff, self.backoff * 2 ** (retry - 1))
        return random.uniform(ceiling / 2, ceiling)


DEFAULT_RETRY = RetryPolicy()
"""Three re-sends, 50 ms doubling up to 2 s, generated keys remembered for 2 minutes."""
NO_RETRY = RetryPolicy(attempts=0)
"""Send each append once; a lost reply raises :class:`~redis_msglog.AppendInDoubtError`."""
