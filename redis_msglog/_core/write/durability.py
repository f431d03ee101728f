"""Optional durability per log: wait, after each append, until the write is safe beyond
the primary's memory (``WAIT`` for replicas, ``WAITAOF`` for the append-only file)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from ...errors import InvalidArgumentError
from ..args import check_int, check_type, shown

MAX_REPLICAS = 2**31 - 1  # what WAIT takes as a count
MIN_TIMEOUT, MAX_TIMEOUT = timedelta(milliseconds=1), timedelta(days=365)


@dataclass(frozen=True, slots=True)
class Durability:
    """What "committed" must also mean before an append returns.

    Args:
        replicas: at least this many replicas have the write (``WAIT``).
        aof: the write is fsynced to the primary's append-only file (``WAITAOF``, Redis 7.2+
            or Valkey, with ``appendonly yes``); with ``replicas`` too, to theirs as well.
        timeout: how long to wait. A shortfall raises
            :class:`~redis_msglog.NotDurableError`: the append committed, but is not
            (yet) as durable as asked.

    The wait is pipelined right behind the append on the same connection (``WAIT`` counts
    the writes of its own connection; a cluster client would send it to another node), so
    it costs no extra round trip, only the wait itself.
    """

    replicas: int = 0
    aof: bool = False
    timeout: timedelta = timedelta(seconds=1)

    def __post_init__(self) -> None:
        check_int("replicas", self.replicas, highest=MAX_REPLICAS)
        check_type("aof", self.aof, bool, "a bool")
        if not self.replicas and not self.aof:
            raise InvalidArgumentError(
                "Durability needs replicas >= 1 or aof=True (else it waits for nothing)"
            )
        timeout = self.timeout
        if not isinstance(timeout, timedelta) or not MIN_TIMEOUT <= timeout <= MAX_TIMEOUT:
            raise InvalidArgumentError(
                f"timeout must be a timedelta from 1 ms to {MAX_TIMEOUT.days} days, "
                f"got {shown(timeout)}"
            )

    @property
    def _millis(self) -> int:
        return max(1, int(self.timeout / timedelta(milliseconds=1)))

    def command(self) -> tuple[str | int, ...]:
        """The command sent behind each append."""
        if self.aof:
            return ("WAITAOF", 1, self.replicas, self._millis)
        return ("WAIT", self.replicas, self._millis)

    def shortfall(self, reply: Any) -> str | None:
        """What is missing according to the reply to :meth:`command` (``None``: nothing)."""
        name = str(self.command()[0])
        if isinstance(reply, Exception):
            return f"{name} failed: {reply}"
        if self.aof:
            local, replicas = int(reply[0]), int(reply[1])
            if local < 1:
                return f"not fsynced to the append-only file within {self.timeout}"
            if replicas < self.replicas:
                return f"fsynced by {replicas} of {self.replicas} replicas within {self.timeout}"
            return None
        acked = int(reply)
        if acked < self.replicas:
            return f"acknowledged by {acked} of {self.replicas} replicas within {self.timeout}"
        return None
