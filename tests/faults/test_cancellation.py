"""Cancelling the asyncio client at every await point, on a real redis-server.

Each operation is cancelled after k event-loop iterations, for k = 0, 1, 2, ... until it
finishes first three times in a row (ROUNDS times over, as replies arrive at slightly
different iterations each time), so the cancel lands before the request is sent, while its
reply is in flight and in the iteration where the reply completes. The client has a
``socket_timeout``: redis-py then sends under ``asyncio.wait_for``, which (before Python
3.12) loses a cancel that lands as the send completes. After every cancel: the task ended
within a bound, its connection was released (none in use, no blocked client, the server's
``CLIENT LIST`` holds no connection the pool does not), a later call on the same client
reads correct replies (no connection was reused mid-reply), and nothing was written twice.
A second group holds the reply back with ``DEBUG SLEEP`` and cancels while it is pending.
"""

from __future__ import annotations

import asyncio
import math
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from functools import partial
from typing import Any

import pytest
import redis
import redis.asyncio

from redis_msglog import AsyncMessageLog, AsyncSubscription, Entry, StoredMessage
from redis_msglog._io import io_async as io
from redis_msglog.testing import EphemeralServer

from ..conftest import new_id

# Before 3.11 a cancel lost inside redis-py leaves no trace (no Task.cancelling()).
pytestmark = [
    pytest.mark.slow,  # every await point cancelled in turn
    pytest.mark.skipif(
        sys.version_info < (3, 11), reason="needs Task.cancelling() to honour lost cancels"
    ),
]

NAME = "under-test"  # client name of the connections of the client under test
BOUND = 1.0  # seconds a cancelled task may take to end; an idle XREAD blocks 2.5 s
MAX_K = 200  # a sweep stops here even if the operation never finished first
ROUNDS = 8
FOLLOW_K = 40  # a follower is blocked in its idle XREAD well before this many iterations
SEEDED = 5  # messages in the log before a read is swept


@pytest.fixture
def server(private_server: Callable[..., EphemeralServer]) -> Iterator[EphemeralServer]:
    yield private_server("redis")


def _client(server: EphemeralServer) -> redis.asyncio.Redis:
    return redis.asyncio.Redis.from_url(server.url, socket_timeout=5, client_name=NAME)


def _wait_for(condition: Callable[[], bool], timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def _server_connections(admin: redis.Redis) -> int:
    return sum(c["name"] == NAME for c in admin.client_list())


def _pool_connected(client: redis.asyncio.Redis) -> int:
    pool: Any = client.connection_pool
    return sum(c.is_connected for c in pool._available_connections)


async def _assert_released(client: redis.asyncio.Redis, admin: redis.Redis) -> None:
    """No connection in use or blocked; the server holds exactly the pool's idle ones."""
    pool: Any = client.connection_pool
    assert not pool._in_use_connections
    released = await asyncio.to_thread(
        _wait_for,
        lambda: (
            int(admin.info("clients")["blocked_clients"]) == 0
            and _server_connections(admin) == _pool_connected(client)
        ),
    )
    assert released, (admin.info("clients"), _pool_connected(client))


def _stopped(subscription: AsyncSubscription) -> bool:
    return not subscription.running


async def _spin(k: int) -> None:
    for _ in range(k):
        await asyncio.sleep(0)


async def _cancel_after(k: int, work: Awaitable[Any]) -> asyncio.Task[Any]:
    """Run ``work`` as a task, cancel it after ``k`` loop iterations, wait for its end."""
    task = asyncio.ensure_future(work)
    await _spin(k)
    requested = task.cancel()  # False: it had finished
    done, _ = await asyncio.wait([task], timeout=BOUND)
    assert done, f"a task cancelled after {k} iterations was still running {BOUND} s later"
    assert task.cancelled() or not requested, f"a cancel after {k} iterations was lost"
    return task


async def _sweep(
    start: Callable[[], Awaitable[Any]], check: Callable[[asyncio.Task[Any]], Awaitable[None]]
) -> int:
    """Cancel ``start()`` after k = 0, 1, 2, ... iterations, ``check`` each outcome, until it
    finishes before the cancel three times in a row; ROUNDS times. Returns cancels landed."""
    landed = 0
    for _ in range(ROUNDS):
        finished = 0
        for k in range(MAX_K):
            task = await _cancel_after(k, start())
            await check(task)
            landed += task.cancelled()
            finished = 0 if task.cancelled() else finished + 1
            if finished == 3:
                break
        else:
            pytest.fail(f"never finished within {MAX_K} iterations")
    return landed


def _msg(i: int) -> dict[str, str]:
    return {"role": "user", "content": f"m{i}"}


# -- one-shot operations -----------------------------------------------------------------

WRITES: dict[str, Callable[[AsyncMessageLog, int], Awaitable[int]]] = {
    "append": lambda log, i: log.append(_msg(i), idempotency_key=f"key-{i}"),
    "append_many": lambda log, i: log.append_many(
        [_msg(i), _msg(i) | {"role": "assistant"}], idempotency_key=f"key-{i}"
    ),
}


@pytest.mark.parametrize("operation", sorted(WRITES))
def test_a_write_cancelled_at_every_await_point_is_written_at_most_once(
    server: EphemeralServer, operation: str
) -> None:
    admin = redis.Redis.from_url(server.url, decode_responses=True)
    write = WRITES[operation]

    async def scenario() -> None:
        client = _client(server)
        log = AsyncMessageLog(client, new_id())
        expected: list[str] = []

        async def check(task: asyncio.Task[Any]) -> None:
            await _assert_released(client, admin)
            # Committed or not, the same key again writes it exactly once.
            await write(log, len(expected))
            expected.extend([f"m{len(expected)}"] * (1 if operation == "append" else 2))
            rows = await log.all()
            assert [m.content for m in rows] == expected
            assert [m.seq for m in rows] == list(range(1, len(expected) + 1))

        # Every round, at least k = 0, 1, 2 land before the reply.
        assert await _sweep(lambda: write(log, len(expected)), check) >= ROUNDS * 3
        await client.aclose()

    asyncio.run(scenario())


READS: dict[str, tuple[Callable[[AsyncMessageLog], Awaitable[Any]], Any]] = {
    "all": (lambda log: log.all(), list(range(1, SEEDED + 1))),
    "read": (lambda log: log.read(after=1, limit=3), [2, 3, 4]),
    "last": (lambda log: log.last(2), [SEEDED - 1, SEEDED]),
    "last()": (lambda log: log.last(), SEEDED),
    "count": (lambda log: log.count(), SEEDED),
}


def _seqs(result: Any) -> Any:
    if isinstance(result, StoredMessage):
        return result.seq
    return [m.seq for m in result] if isinstance(result, list) else result


@pytest.mark.parametrize("operation", sorted(READS))
def test_a_read_cancelled_at_every_await_point_leaves_its_client_sound(
    server: EphemeralServer, operation: str
) -> None:
    admin = redis.Redis.from_url(server.url, decode_responses=True)
    read, expected = READS[operation]

    async def scenario() -> None:
        client = _client(server)
        log = AsyncMessageLog(client, new_id())
        await log.append_many([_msg(i) for i in range(SEEDED)])

        async def check(task: asyncio.Task[Any]) -> None:
            await _assert_released(client, admin)
            if not task.cancelled():
                assert _seqs(task.result()) == expected
            # A connection handed back mid-reply would answer this with a stale reply.
            assert _seqs(await read(log)) == expected

        assert await _sweep(lambda: read(log), check) >= ROUNDS * 3  # k = 0, 1, 2 at least
        await client.aclose()

    asyncio.run(scenario())


# -- follow and subscribe ----------------------------------------------------------------


def test_a_follow_cancelled_at_every_await_point_ends_and_releases_its_connection(
    server: EphemeralServer,
) -> None:
    admin = redis.Redis.from_url(server.url, decode_responses=True)

    async def scenario() -> None:
        client = _client(server)
        log = AsyncMessageLog(client, new_id())
        await log.append_many([_msg(i) for i in range(3)])
        waited = 0
        for k in [k for _ in range(ROUNDS) for k in range(FOLLOW_K)]:
            seen: list[int] = []

            async def consume(seen: list[int] = seen) -> None:
                async for row in log.follow():
                    seen.append(row.seq)

            await _cancel_after(k, consume())
            assert seen == [1, 2, 3][: len(seen)]  # in order, none twice
            await _assert_released(client, admin)
            waited += len(seen) == 3  # cancelled in (or on the way to) the idle XREAD
        assert waited >= ROUNDS
        await client.aclose()

    asyncio.run(scenario())


@pytest.mark.parametrize("after", [0, None])  # None: starts at the count read by subscribe
def test_a_subscription_closed_at_every_await_point_stops_and_releases_its_connection(
    server: EphemeralServer, after: int | None
) -> None:
    admin = redis.Redis.from_url(server.url, decode_responses=True)

    async def scenario() -> None:
        client = _client(server)
        log = AsyncMessageLog(client, new_id())
        await log.append_many([_msg(i) for i in range(3)])
        complete = 0
        for k in [k for _ in range(ROUNDS) for k in range(FOLLOW_K)]:
            delivered: list[int] = []

            async def callback(rows: list[Entry], into: list[int] = delivered) -> None:
                await asyncio.sleep(0)
                into.extend(m.seq for m in rows)

            subscription = await log.subscribe(callback, after=after)
            await _spin(k)
            await asyncio.wait_for(subscription.close(), BOUND)
            assert not subscription.running
            assert subscription.error is None
            assert delivered == ([1, 2, 3] if after == 0 else [])[: len(delivered)]
            assert subscription.position in ((0, *delivered) if after == 0 else (3,))
            await _assert_released(client, admin)
            complete += len(delivered) == 3
        assert complete >= (ROUNDS if after == 0 else 0)
        await client.aclose()

    asyncio.run(scenario())


def test_a_cancelled_close_still_stops_the_subscription(server: EphemeralServer) -> None:
    admin = redis.Redis.from_url(server.url, decode_responses=True)

    async def scenario() -> None:
        client = _client(server)
        log = AsyncMessageLog(client, new_id())
        await log.add("user", "x")
        for k in range(12):
            subscription = await log.subscribe(lambda rows: None, after=0)
            await _spin(20)  # mid-delivery or waiting in XREAD
            closing = await _cancel_after(k, subscription.close())
            if closing.cancelled() and subscription.running:
                await asyncio.wait_for(subscription.close(), BOUND)  # k = 0: close never ran
            assert await asyncio.to_thread(_wait_for, partial(_stopped, subscription), 1)
            await _assert_released(client, admin)
        await client.aclose()

    asyncio.run(scenario())


# -- a reply held back by the server -----------------------------------------------------


def _hold_replies(server: EphemeralServer, seconds: float) -> threading.Thread:
    """The server sleeps ``seconds`` (``DEBUG SLEEP`` from another connection)."""
    admin = redis.Redis.from_url(server.url)
    thread = threading.Thread(target=admin.execute_command, args=("DEBUG", "SLEEP", seconds))
    thread.start()
    time.sleep(0.05)  # asleep now
    return thread


WRITTEN = {"append": ["m1"], "append_many": ["m1", "m1"]}


@pytest.mark.parametrize("operation", ["append", "append_many", "all", "count", "follow"])
def test_a_cancel_while_the_reply_is_held_back_ends_at_once(
    server: EphemeralServer, operation: str
) -> None:
    admin = redis.Redis.from_url(server.url, decode_responses=True)

    async def scenario() -> None:
        client = _client(server)
        log = AsyncMessageLog(client, new_id())
        await log.add("user", "first")

        async def follow() -> None:
            async for _row in log.follow(after=1):
                pass

        work: dict[str, Callable[[], Awaitable[Any]]] = {
            "all": log.all,
            "count": log.count,
            "follow": follow,
            "append": lambda: WRITES["append"](log, 1),
            "append_many": lambda: WRITES["append_many"](log, 1),
        }
        sleeper = _hold_replies(server, 0.5)
        task = asyncio.ensure_future(work[operation]())
        await asyncio.sleep(0.1)  # the request is sent, its reply held back
        started = time.monotonic()
        task.cancel()
        await asyncio.wait([task], timeout=BOUND)
        assert task.cancelled()
        assert time.monotonic() - started < 0.2  # did not wait for the reply
        await asyncio.to_thread(sleeper.join)
        await _assert_released(client, admin)
        if operation in WRITES:
            assert await log.count() in (1, 1 + len(WRITTEN[operation]))  # committed or not
            await WRITES[operation](log, 1)  # the same key: now exactly once
        contents = [m.content for m in await log.all()]
        assert contents == ["first", *WRITTEN.get(operation, [])]
        await client.aclose()

    asyncio.run(scenario())


class _HeldReply:
    """A connection, as ``_io.io_async.read_reply`` uses it, whose reply comes after
    ``delay`` seconds (never, by default)."""

    protocol = 3

    def __init__(self, socket_timeout: float, delay: float = 60.0) -> None:
        self.socket_timeout, self.delay = socket_timeout, delay
        self._active_read_timeout: Any = None

    async def read_response(self, timeout: float | None = None) -> str:
        assert timeout == math.inf  # read_reply's watchdog bounds the read, not redis-py
        await asyncio.sleep(self.delay)
        return "reply"


def test_a_read_past_its_socket_timeout_is_a_timeout_and_a_cancel_stays_a_cancel() -> None:
    """``read_reply`` bounds a read as redis-py does (its ``TimeoutError``), with one
    timer per loop for every read in flight: a shorter timeout begun later expires
    first, a maintenance push's relaxed timeout moves the deadline, and a cancel from
    elsewhere is raised as a cancel (the task's cancel count as it was)."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        started = loop.time()
        slow = asyncio.ensure_future(io.read_reply(_HeldReply(5.0)))
        with pytest.raises(redis.TimeoutError):
            await io.read_reply(_HeldReply(0.05))
        assert loop.time() - started < 1.0 and not slow.done()
        slow.cancel()
        with pytest.raises(asyncio.CancelledError):
            await slow
        assert await io.read_reply(_HeldReply(0.2, delay=0.01)) == "reply"
        relaxed = _HeldReply(0.05, delay=0.3)
        reading = asyncio.ensure_future(io.read_reply(relaxed))
        await asyncio.sleep(0.01)
        relaxed._active_read_timeout.reschedule(loop.time() + 1.0)  # a maintenance push
        assert await reading == "reply" and relaxed._active_read_timeout is None
        task: Any = asyncio.current_task()  # Any: cancelling() is 3.11's
        assert task.cancelling() == 0

    asyncio.run(main())
