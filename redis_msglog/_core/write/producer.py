"""The idempotent producer: exactly-once appends without a caller's key.

One producer per process, shared by every log object, client and thread of it (a log
object per request or per call, as web workers and the LangChain factory make them,
would otherwise leave one producer record per object in the conversation's producers
hash). A producer has a random id and numbers its calls (the pseq); every try of a call
carries the same pair and the lowest pseq still in flight, below which the server drops
the producer's results (lua/append.lua, "The idempotent producer"). A forked child gets
a producer of its own (it must not number calls under its parent's id).
"""

from __future__ import annotations

import itertools
import os
import threading


class Producer:
    """An id, the numbering of its calls, and the calls still in flight (thread-safe:
    log objects in any thread or event loop of the process share it)."""

    __slots__ = ("_in_flight", "_lock", "_pseqs", "id")

    def __init__(self) -> None:
        self.id = os.urandom(6).hex()  # 12 hex digits, as the script and retry keys expect
        self._pseqs = itertools.count(1)
        self._in_flight: set[int] = set()
        self._lock = threading.Lock()

    def begin(self) -> tuple[int, int]:
        """Number a new call, in flight from now on: its pseq and the floor to send."""
        with self._lock:
            pseq = next(self._pseqs)
            self._in_flight.add(pseq)
            return pseq, min(self._in_flight)

    def floor(self) -> int:
        """The lowest pseq still in flight (0: none): no call below it is re-sent."""
        with self._lock:
            return min(self._in_flight, default=0)

    def settle(self, pseq: int) -> None:
        """No try of call ``pseq`` will be sent again."""
        with self._lock:
            self._in_flight.discard(pseq)

    def in_flight(self) -> frozenset[int]:
        """The calls still in flight (a copy)."""
        with self._lock:
            return frozenset(self._in_flight)


_lock = threading.Lock()
_current = Producer()


def current() -> Producer:
    """The process's producer."""
    return _current


def retire(producer: Producer) -> None:
    """Make later calls use a new producer, if ``producer`` is still the process's: a call
    of it is in doubt, and its result must stay in the server's window until the caller
    retries it (later calls of the same producer would push it out)."""
    global _current
    with _lock:
        if _current is producer:
            _current = Producer()


class ProducerSlot:
    """Which producer numbers one log's calls without a key: its own, when it was given
    one (tests, benchmarks), else the process's; and, when a call of it is in doubt,
    going on as a new one."""

    __slots__ = ("own",)

    def __init__(self, own: Producer | None = None) -> None:
        self.own = own

    def current(self) -> Producer:
        """The producer numbering the log's next call without a key."""
        return self.own or _current

    def retire(self, producer: Producer) -> None:
        """Go on as a new producer (see :func:`retire`): the log's own, or the process's."""
        if self.own is producer:
            self.own = Producer()
        else:
            retire(producer)


def _renew_in_child() -> None:
    global _current, _lock
    _lock = threading.Lock()
    _current = Producer()


os.register_at_fork(after_in_child=_renew_in_child)
