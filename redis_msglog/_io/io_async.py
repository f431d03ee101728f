"""The few things the asyncio client does differently from the sync one (its twin is
``_io/io_sync.py``); everything else of the client is generated from one source."""

from __future__ import annotations

import asyncio
import inspect
import math
import sys
import weakref
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from redis import exceptions as redis_errors

from .redis_private import set_read_deadline, stream_writer

T = TypeVar("T")

sleep = asyncio.sleep


async def honouring_cancel(awaitable: Awaitable[T]) -> T:
    """``await awaitable``, then raise ``CancelledError`` if the task was cancelled meanwhile.

    A cancel can be lost on the way: redis-py sends under ``asyncio.wait_for``, which
    before Python 3.12 returns the result when the cancel lands as the send completes.
    The request is still counted by ``Task.cancelling()`` (3.11+), so it is honoured here;
    comparing with the count before the await leaves a cancel that was already handled
    (cleanup code in an ``except CancelledError``) alone."""
    task = asyncio.current_task()
    if task is None or not hasattr(task, "cancelling"):  # before 3.11: nothing counted
        return await awaitable
    before = task.cancelling()  # cancellations requested and not withdrawn
    result = await awaitable
    if task.cancelling() > before:
        raise asyncio.CancelledError
    return result


def write_now(conn: Any, packed: list[bytes]) -> bool:
    """Write ``packed`` straight to the connection's stream if that cannot block:
    connected, no health check due, nothing buffered and the command under the
    transport's high-water mark (so no ``drain`` could wait); ``False``: not written,
    :func:`send` it. redis-py sends every command under ``asyncio.wait_for`` (its
    default ``socket_timeout`` is 5 s), which on Python 3.11 is a new task and an
    event-loop iteration per command; a write that cannot wait needs no timeout.
    A failed write surfaces as a failed read, which the caller treats like a failed send
    (the reply is lost either way)."""
    writer = stream_writer(conn)
    if writer is not None and conn.is_connected and not conn.health_check_interval:
        transport = writer.transport
        if (
            isinstance(transport, asyncio.WriteTransport)  # not fakeredis's stand-in
            and not transport.is_closing()
            and not transport.get_write_buffer_size()
            and sum(map(len, packed)) <= transport.get_write_buffer_limits()[1]
        ):
            writer.writelines(packed)  # no await: no cancel can land here
            return True
    return False


async def send(conn: Any, packed: list[bytes]) -> None:
    """``conn.send_packed_command(packed)`` (after :func:`write_now` declined), honouring
    a cancel its ``asyncio.wait_for`` may lose."""
    await honouring_cancel(conn.send_packed_command(packed))


async def call_hook(hook: Callable[[Any], object], rows: Any) -> None:
    """Call a plain or async hook (``on_append``, a subscription's callback)."""
    result = hook(rows)
    if inspect.isawaitable(result):
        await honouring_cancel(result)


async def read_reply(conn: Any) -> Any:
    """``conn.read_response()``, bounded by the connection's ``socket_timeout`` as
    redis-py bounds it (its ``TimeoutError`` past it, the connection disconnected; a
    maintenance push relaxing the timeout mid-read moves the deadline), and honouring
    a cancel (see :func:`honouring_cancel`).

    redis-py bounds each read with an ``asyncio.timeout`` of its own: a timer made,
    pushed on the loop's heap and cancelled per reply, ~31,000 instructions of an
    append's ~235,000 (callgrind). Here one timer per event loop watches every read in
    flight (:class:`_Watchdog`), and a read past its deadline is cancelled and raised as
    the same ``TimeoutError``; a cancel from elsewhere stays a cancel."""
    timeout = conn.socket_timeout
    task: Any = asyncio.current_task()  # Any: cancelling() and uncancel() are 3.11's
    if timeout is None or task is None or not _UNCANCEL:
        return await honouring_cancel(conn.read_response())
    loop = task.get_loop()
    watchdog = _last[0]
    if watchdog is None or watchdog.loop() is not loop:
        watchdog = _watchdog(loop)
        if watchdog is None:  # a loop that takes no weak reference
            return await honouring_cancel(conn.read_response())
    before = task.cancelling()
    watchdog.start(task, loop.time() + timeout)
    set_read_deadline(conn, _Deadline(watchdog, task))  # what a maintenance push moves
    try:
        reply = await conn.read_response(timeout=math.inf)  # bounded by the watchdog
    except asyncio.CancelledError:
        if task in watchdog.expired and task.uncancel() <= before:
            raise redis_errors.TimeoutError(
                f"Timeout reading from the server (socket_timeout {timeout} s)"
            ) from None
        raise
    finally:
        set_read_deadline(conn, None)
        watchdog.stop(task)
    if task.cancelling() > before:
        raise asyncio.CancelledError
    return reply


_UNCANCEL = sys.version_info >= (3, 11)  # Task.uncancel(): a timeout told from a cancel


class _Watchdog:
    """The deadlines of one event loop's reads in flight, and one timer, armed at the
    earliest of them while there are any: a read past its deadline has its task
    cancelled (and is marked expired, for :func:`read_reply` to raise a timeout)."""

    __slots__ = ("__weakref__", "armed_at", "deadlines", "expired", "handle", "loop")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = weakref.ref(loop)
        self.deadlines: dict[asyncio.Task[Any], float] = {}
        self.expired: set[asyncio.Task[Any]] = set()
        self.handle: asyncio.TimerHandle | None = None
        self.armed_at = math.inf

    def start(self, task: asyncio.Task[Any], deadline: float) -> None:
        self.deadlines[task] = deadline
        if deadline < self.armed_at:  # the first read in flight, or a shorter timeout
            self._arm(task.get_loop(), deadline)

    def stop(self, task: asyncio.Task[Any]) -> None:
        del self.deadlines[task]  # the timer stays armed: it re-arms or lapses when due
        if self.expired:
            self.expired.discard(task)

    def move(self, task: asyncio.Task[Any], deadline: float) -> None:
        """A read's new deadline (a maintenance push relaxed or restored the timeout)."""
        if task in self.deadlines:
            self.start(task, deadline)

    def _arm(self, loop: asyncio.AbstractEventLoop, when: float) -> None:
        if self.handle is not None:
            self.handle.cancel()
        self.handle, self.armed_at = loop.call_at(when, self._check), when

    def _check(self) -> None:
        self.handle, self.armed_at = None, math.inf
        loop = asyncio.get_running_loop()
        now, earliest = loop.time(), math.inf
        for task, deadline in self.deadlines.items():
            if deadline <= now:
                if task not in self.expired:
                    self.expired.add(task)
                    task.cancel()
            elif deadline < earliest:
                earliest = deadline
        if earliest < math.inf:
            self._arm(loop, earliest)


class _Deadline:
    """A read's deadline as redis-py's connection moves its own read timeout's: its
    ``reschedule(when)`` (``None``: no deadline), on a maintenance push."""

    __slots__ = ("task", "watchdog")

    def __init__(self, watchdog: _Watchdog, task: asyncio.Task[Any]) -> None:
        self.watchdog, self.task = watchdog, task

    def reschedule(self, when: float | None) -> None:
        self.watchdog.move(self.task, math.inf if when is None else when)


_WATCHDOGS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Watchdog] = (
    weakref.WeakKeyDictionary()
)
_last: list[_Watchdog | None] = [None]  # the last loop's: most processes run one loop


def _watchdog(loop: asyncio.AbstractEventLoop) -> _Watchdog | None:
    try:
        watchdog = _WATCHDOGS.get(loop)
        if watchdog is None:
            watchdog = _WATCHDOGS[loop] = _Watchdog(loop)
    except TypeError:
        return None
    _last[0] = watchdog
    return watchdog


Lock = asyncio.Lock


class Ticker:
    """Awaits ``tick()`` in a task of its own every ``interval`` seconds, and ``soon``
    seconds after each :meth:`poke`, until :meth:`stop` (a draft writer's flush of its
    pending deltas and heartbeat; the sync twin runs a thread)."""

    def __init__(self, tick: Callable[[], Awaitable[object]], interval: float, soon: float) -> None:
        self._tick, self._interval, self._soon = tick, interval, soon
        self._poked = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._stopped = False

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    def poke(self) -> None:
        self._poked.set()

    async def stop(self) -> None:
        # The flag as well as the cancel: on Python 3.11, wait_for() swallows a
        # cancellation that arrives as the event it waits on is set (a poke), and the
        # task would run on (measured: a writer's exit hung on it).
        self._stopped = True
        self._poked.set()
        task, self._task = self._task, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()
            await asyncio.wait([task])

    async def _run(self) -> None:
        while not self._stopped:
            try:
                await asyncio.wait_for(self._poked.wait(), self._interval)
            except asyncio.TimeoutError:
                pass
            else:
                self._poked.clear()
                await asyncio.sleep(self._soon)
            if self._stopped:
                return
            await self._tick()
