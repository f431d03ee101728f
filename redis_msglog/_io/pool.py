"""How the library takes a connection from a redis-py pool and gives it back.

Two promises live here (docs/workers.md#the-deadline-whatever-the-clients-own-retries):

- **A busy pool is waited for, never an outage.** When every connection of the pool is
  in use (redis-py's pools hold 100 by default), a call waits for one to come back, for
  as long as its deadline allows, instead of failing with redis-py's
  ``MaxConnectionsError``: 500 appends gathered on one log object all commit.
- **One connection attempt per try, bounded by the call's deadline.** The library
  connects itself, with the client's own retry switched off for that connect, and the TCP
  connect, TLS handshake and login bounded by what is left of the call's deadline (at
  least :data:`MIN_CONNECT_WITHIN`), never longer than the client's own timeouts. The
  library's :class:`~redis_msglog.RetryPolicy` decides whether to try again.

Both apply to redis-py's default ``ConnectionPool`` (see :func:`borrowable_pool`); other
pools (``BlockingConnectionPool``, Sentinel, RESP3, client-side caching, a credential
provider) are used through their own ``get_connection``, under redis-py's own settings.
"""

from __future__ import annotations

import asyncio
import collections
import os
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

import redis
import redis.asyncio
from redis import exceptions as redis_errors
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import NoBackoff
from redis.retry import Retry

from .redis_private import (
    grab,
    grab_async,
    has_expected_layout,
    put_back,
    put_back_async,
    restore_read_timeout,
)

MIN_CONNECT_WITHIN = 1.0
"""The least time a connection attempt (or a wait for a busy pool) is given, even when
the call's deadline is already spent: the last try is made at the deadline, not skipped."""
POLL = 0.05
"""How often a call waiting for a busy pool looks again by itself: connections given
back by the library wake it at once, those given back by other users of the client do
not."""

_ONE_TRY = Retry(NoBackoff(), 0)  # stateless: shared by every connect
_ONE_TRY_ASYNC = AsyncRetry(NoBackoff(), 0)
_CONNECTION_FAILURES = (redis_errors.ConnectionError, redis_errors.TimeoutError, OSError)


def borrowable_pool(client: Any) -> Any | None:
    """The client's connection pool if the library may take its connections directly,
    else ``None`` (then ``get_connection``/``release``).

    redis-py's ``get_connection`` and ``release`` cost ~5.5 us of CPU per call, sync or
    asyncio (observability counters, an event dispatch, fork checks), about what the
    rest of an append's client work costs after packing. Taking one directly keeps the
    pool's own bookkeeping (the connection is in its in-use set meanwhile, under its lock
    in the sync client, so ``disconnect()`` and ``max_connections`` see it), makes the
    check the pool makes (a connection the server closed is reconnected before anything
    is sent), and skips the hooks, so it is only done where no hook has work: a plain
    ``ConnectionPool`` of RESP2 connections (no maintenance notifications), with no
    client-side cache and no streaming credentials (re-authenticated on release)."""
    pool = getattr(client, "connection_pool", None)
    return pool if is_plain_pool(pool) else None


def is_plain_pool(pool: Any) -> bool:
    """Whether ``pool`` is redis-py's default pool, laid out as this module expects."""
    if type(pool) not in (redis.ConnectionPool, redis.asyncio.ConnectionPool):
        return False
    if not has_expected_layout(pool):
        return False  # a redis-py whose pool is laid out differently
    kwargs = pool.connection_kwargs
    if getattr(pool, "cache", None) is not None or kwargs.get("credential_provider"):
        return False
    return str(kwargs.get("protocol") or 2) == "2"  # RESP3: the pool acts on pushes


def _shorter(configured: float | None, within: float) -> float:
    return within if configured is None else min(float(configured), within)


# -- sync --------------------------------------------------------------------------


class Waiting:
    """Calls waiting for a connection of one sync pool (or cluster node)."""

    def __init__(self) -> None:
        self.condition = threading.Condition(threading.Lock())
        self.count = 0
        self.pid = os.getpid()  # a forked child starts a line of its own


_WAITING: weakref.WeakKeyDictionary[Any, Waiting] = weakref.WeakKeyDictionary()
_WAITING_LOCK = threading.Lock()


def waiting_for(pool: Any) -> Waiting:
    """The waiting line of ``pool`` (one per pool, shared by every log object)."""
    with _WAITING_LOCK:
        waiting = _WAITING.get(pool)
        if waiting is None or waiting.pid != os.getpid():
            waiting = _WAITING[pool] = Waiting()
        return waiting


def take(pool: Any, waiting: Waiting, within: float) -> Any:
    """A connected connection of ``pool`` (see :func:`borrowable_pool`), in its in-use
    set: an idle one, a new one while the pool is under ``max_connections``, or the next
    one given back, waited for up to ``within`` seconds. Failing, nothing was sent."""
    conn = grab(pool)
    if conn is None:
        conn = _wait(pool, waiting, within)
    try:
        ready(conn, within)
    except BaseException:
        conn.disconnect()
        give_back(pool, waiting, conn)
        raise
    return conn


def give_back(pool: Any, waiting: Waiting, conn: Any) -> None:
    put_back(pool, conn)
    if waiting.count:  # read without the lock: see _wait
        with waiting.condition:
            waiting.condition.notify()


def _wait(pool: Any, waiting: Waiting, within: float) -> Any:
    # Counted before looking again, under the condition: a connection given back after
    # that look is notified (give_back sees the count), one given back before it is found.
    end = time.monotonic() + max(within, MIN_CONNECT_WITHIN)
    with waiting.condition:
        waiting.count += 1
        try:
            while (conn := grab(pool)) is None:
                remaining = end - time.monotonic()
                if remaining <= 0:
                    raise _busy(pool, within)
                waiting.condition.wait(min(POLL, remaining))
            return conn
        finally:
            waiting.count -= 1


def ready(conn: Any, within: float) -> None:
    """What the pool checks before handing a connection out: connected, and nothing to
    read (a connection the server closed reads as EOF): otherwise connect afresh."""
    if conn.is_connected:
        try:
            if not conn.can_read():
                return
        except _CONNECTION_FAILURES:
            pass
        conn.disconnect()
    connect_within(conn, within)


def connect_within(conn: Any, within: float) -> None:
    """``conn.connect()`` once (the client's retry off), its TCP connect, TLS handshake
    and login bounded by ``within`` seconds (and by the client's own timeouts)."""
    within = max(within, MIN_CONNECT_WITHIN)
    saved = conn.retry, conn.socket_connect_timeout, conn.socket_timeout
    conn.retry = _ONE_TRY
    conn.socket_connect_timeout = _shorter(saved[1], within)
    conn.socket_timeout = _shorter(saved[2], within)  # the TLS handshake and login
    try:
        conn.connect()
    finally:
        conn.retry, conn.socket_connect_timeout, conn.socket_timeout = saved
        restore_read_timeout(conn, saved[2])


def _busy(pool: Any, within: float) -> redis_errors.MaxConnectionsError:
    return redis_errors.MaxConnectionsError(
        f"all {pool.max_connections} connections of the client's pool stayed in use for "
        f"{max(within, MIN_CONNECT_WITHIN):.1f} s (its max_connections)"
    )


# -- asyncio -----------------------------------------------------------------------


class AsyncWaiting:
    """Calls waiting for a connection of one asyncio pool (or cluster node): a future
    each, woken in turn as the library gives connections back."""

    def __init__(self) -> None:
        self.futures: collections.deque[asyncio.Future[None]] = collections.deque()

    def join(self, loop: asyncio.AbstractEventLoop, *, first: bool = False) -> asyncio.Future[None]:
        future = loop.create_future()
        if first:  # woken, then beaten to the connection: still first in line
            self.futures.appendleft(future)
        else:
            self.futures.append(future)
        return future

    def wake_one(self) -> None:
        futures = self.futures
        while futures:
            future = futures.popleft()
            if future.done():
                continue  # left the line (cancelled, or found a connection by itself)
            loop = future.get_loop()
            try:
                if loop is asyncio.get_running_loop():
                    future.set_result(None)
                else:  # a pool shared by event loops in threads
                    loop.call_soon_threadsafe(_wake, future)
            except RuntimeError:
                continue  # its loop is closed
            return


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


_ASYNC_WAITING: weakref.WeakKeyDictionary[Any, AsyncWaiting] = weakref.WeakKeyDictionary()


def async_waiting_for(pool: Any) -> AsyncWaiting:
    """The waiting line of ``pool`` (one per pool, shared by every log object)."""
    waiting = _ASYNC_WAITING.get(pool)
    if waiting is None:
        waiting = _ASYNC_WAITING[pool] = AsyncWaiting()
    return waiting


_NODE_WAITING: weakref.WeakKeyDictionary[Any, dict[str, AsyncWaiting]] = weakref.WeakKeyDictionary()


def node_waiting_for(client: Any, node: Any) -> AsyncWaiting:
    """The waiting line of an asyncio cluster client's node (nodes take no weak
    references: kept per client, by node name)."""
    lines = _NODE_WAITING.get(client)
    if lines is None:
        lines = _NODE_WAITING[client] = {}
    waiting = lines.get(node.name)
    if waiting is None:
        waiting = lines[node.name] = AsyncWaiting()
    return waiting


async def take_async(pool: Any, waiting: AsyncWaiting, within: float) -> Any:
    """The asyncio twin of :func:`take`."""
    conn = grab_async(pool)
    if conn is None:
        conn = await wait_async(lambda: grab_async(pool), waiting, within, pool)
    try:
        # What ready() checks, inline (a coroutine less on every call's path).
        stale = True
        if conn.is_connected:
            try:
                stale = await conn.can_read()
            except _CONNECTION_FAILURES:
                stale = True
        if stale:
            if conn.is_connected:
                await conn.disconnect()
            await connect_within_async(conn, within)
    except BaseException:
        await conn.disconnect(nowait=True)
        give_back_async(pool, waiting, conn)
        raise
    return conn


def give_back_async(pool: Any, waiting: AsyncWaiting, conn: Any) -> None:
    put_back_async(pool, conn)
    if waiting.futures:
        waiting.wake_one()


async def wait_async(
    grab: Callable[[], Any | None], waiting: AsyncWaiting, within: float, pool: Any
) -> Any:
    """``grab()``'s connection once it has one, waiting in line up to ``within`` seconds
    (woken when the library gives a connection back; looking again every :data:`POLL`)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + max(within, MIN_CONNECT_WITHIN)
    future = waiting.join(loop)
    conn = None
    try:
        while conn is None:
            remaining = end - loop.time()
            if remaining <= 0:
                raise _busy(pool, within)
            await asyncio.wait((future,), timeout=min(POLL, remaining))
            conn = grab()
            if conn is None and future.done():
                future = waiting.join(loop, first=True)
        return conn
    finally:
        if not future.done():
            future.cancel()  # leaves the line
        elif conn is None and not future.cancelled():
            waiting.wake_one()  # woken, and leaving without a connection: pass it on


async def connect_within_async(conn: Any, within: float) -> None:
    """The asyncio twin of :func:`connect_within`."""
    within = max(within, MIN_CONNECT_WITHIN)
    saved = conn.retry, conn.socket_connect_timeout, conn.socket_timeout
    conn.retry = _ONE_TRY_ASYNC
    conn.socket_connect_timeout = _shorter(saved[1], within)
    conn.socket_timeout = _shorter(saved[2], within)  # the login's replies
    try:
        await conn.connect()
    finally:
        conn.retry, conn.socket_connect_timeout, conn.socket_timeout = saved
