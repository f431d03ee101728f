"""follow() and subscribe(): every commit from every worker, in order, gap-free, through
late starts, slow consumers, killed connections and server restarts."""

from __future__ import annotations

import asyncio
import multiprocessing
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from multiprocessing.process import BaseProcess
from typing import Any

import pytest
import redis
import redis.asyncio

from redis_msglog import (
    AsyncMessageLog,
    CorruptLogError,
    Entry,
    MessageLog,
    ServerUnavailableError,
    StoredMessage,
    WrongTypeError,
)
from redis_msglog.testing import EphemeralServer

from ..conftest import Env, backend_server, entry_id, make_env, new_id

WRITERS = 8
PER_WRITER = 60  # 20 rounds of: one append, then an append_many of 2


@pytest.fixture
def sync_env(backend: str, shared_server: Any, shared_cluster: Any) -> Iterator[Env]:
    server = backend_server(backend, shared_server, shared_cluster)
    environment = make_env(backend, "sync", server)
    yield environment
    environment.close()


@pytest.fixture
def async_env(backend: str, shared_server: Any, shared_cluster: Any) -> Iterator[Env]:
    server = backend_server(backend, shared_server, shared_cluster)
    environment = make_env(backend, "async", server)
    yield environment
    environment.close()


@pytest.mark.parametrize("protocol", [2, 3])
def test_async_follow_and_subscribe_on_every_backend(async_env: Env, protocol: int) -> None:
    # Raw replies of XREAD/XRANGE/GET in both protocols, through plain and cluster routing.
    client = async_env.make_async_client(protocol=protocol, socket_timeout=1)
    log = AsyncMessageLog(client, new_id())

    async def scenario() -> None:
        await log.append_many([{"role": "user", "content": str(i)} for i in range(3)])
        got: list[Entry] = []

        async def consume() -> None:
            async for row in log.follow(after=1):
                got.append(row)
                if row.seq == 4:
                    return

        task = asyncio.create_task(consume())
        delivered: list[int] = []
        subscription = await log.subscribe(lambda rows: delivered.extend(m.seq for m in rows))
        await log.add("user", "new")
        await asyncio.wait_for(task, 10)
        assert got == (await log.all())[1:]
        assert await _until(lambda: delivered == [4])
        await subscription.close()
        if async_env.backend == "fakeredis":  # its XREAD BLOCK task outlives the cancel
            await asyncio.sleep(0.6)  # until its timeout (half the socket_timeout)
        await client.aclose()

    async_env.loop.run_until_complete(scenario())


def test_follow_yields_the_history_then_new_commits(sync_env: Env) -> None:
    log = sync_env.log()
    log.append_many([{"role": "user", "content": str(i)} for i in range(3)])
    follower = log.follow(after=1)
    assert [next(follower).seq, next(follower).seq] == [2, 3]
    other = sync_env.log(log.conversation)  # another client, as another worker would be
    threading.Timer(0.2, other.add, args=("assistant", "new")).start()
    row = next(follower)  # waits for it
    assert (row.seq, row.content) == (4, "new")
    assert row == log.last()  # exactly what a reader decodes


def test_follow_rejects_bad_arguments_at_once(sync_env: Env) -> None:
    log = sync_env.log()
    with pytest.raises(ValueError, match="after"):
        log.follow(after=-1)
    with pytest.raises(ValueError, match="reconnect_within"):
        log.follow(reconnect_within=-1)


def test_follow_refuses_to_skip_a_gap(sync_env: Env) -> None:
    log = sync_env.log()
    log.append_many([{"role": "user", "content": str(i)} for i in range(3)])
    sync_env.raw.xdel(log.keys.stream, entry_id(sync_env.raw, log.keys.stream, 2))  # by hand
    follower = log.follow()
    assert next(follower).seq == 1
    with pytest.raises(CorruptLogError, match="gap: expected seq 2, got 3"):
        next(follower)


def _writer(url: str, conversation: str, worker: int) -> None:
    log = MessageLog(redis.Redis.from_url(url), conversation)
    for i in range(0, PER_WRITER, 3):
        log.add("user", f"{worker}:{i}")
        log.append_many(
            [
                {"role": "assistant", "content": f"{worker}:{i + 1}"},
                {"role": "user", "content": f"{worker}:{i + 2}"},
            ]
        )
        time.sleep(0.005)  # spread the run out, so followers start and die mid-run


def test_eight_writers_three_followers_one_late_one_killed(
    real_backend: str, shared_server: Callable[[str], EphemeralServer]
) -> None:
    url = shared_server(real_backend).url
    conversation = new_id()
    total = WRITERS * PER_WRITER
    seen: dict[str, list[int]] = {"early": [], "late": [], "killed": []}

    def follow(name: str) -> None:
        client = redis.Redis.from_url(url, client_name=f"follower-{name}-{conversation}")
        for row in MessageLog(client, conversation).follow():
            seen[name].append(row.seq)
            if row.seq == total:
                return

    def start(name: str) -> threading.Thread:
        thread = threading.Thread(target=follow, args=(name,), daemon=True)
        thread.start()
        return thread

    followers = [start("early"), start("killed")]
    context = multiprocessing.get_context("spawn")
    writers = [context.Process(target=_writer, args=(url, conversation, w)) for w in range(WRITERS)]
    for writer in writers:
        writer.start()
    kills = _keep_killing(url, f"follower-killed-{conversation}", seen["killed"], total, writers)
    followers.append(start("late"))  # mid-run or after it: it must catch up either way
    for writer in writers:
        writer.join(timeout=120)
        assert writer.exitcode == 0
    for thread in followers:
        thread.join(timeout=60)
    assert kills >= 1
    for name, seqs in seen.items():
        assert seqs == list(range(1, total + 1)), name


def _keep_killing(
    url: str, client_name: str, seen: list[int], total: int, writers: Sequence[BaseProcess]
) -> int:
    """Kill the connections named ``client_name`` every 0.1 s, at least 5 times and until
    their follower has seen half of the ``total`` messages, or until the writers are done;
    the number of connections killed."""
    admin = redis.Redis.from_url(url, decode_responses=True)
    kills = 0
    while kills < 5 or len(seen) < total // 2:
        time.sleep(0.1)
        for client in admin.client_list():
            if client["name"] == client_name:
                kills += admin.client_kill_filter(_id=client["id"])
        if not any(w.is_alive() for w in writers):
            break
    return kills


def test_follow_survives_a_server_restart(
    real_backend: str, private_server: Callable[..., EphemeralServer]
) -> None:
    server = private_server(real_backend, ["--appendonly", "yes"])
    log = MessageLog(redis.Redis.from_url(server.url), new_id())
    log.append_many([{"role": "user", "content": str(i)} for i in range(5)])
    follower = log.follow(after=2)
    assert [next(follower).seq for _ in range(3)] == [3, 4, 5]
    server.restart()
    assert log.add("user", "after the restart") == 6
    row = next(follower)
    assert isinstance(row, StoredMessage) and row.content == "after the restart"


def test_follow_gives_up_when_the_server_stays_away(
    real_backend: str, private_server: Callable[..., EphemeralServer]
) -> None:
    server = private_server(real_backend)
    client = redis.Redis.from_url(server.url, socket_timeout=0.5, socket_connect_timeout=0.5)
    follower = MessageLog(client, new_id()).follow(reconnect_within=1.0)
    server.stop()
    started = time.monotonic()
    with pytest.raises(ServerUnavailableError, match="lost the server"):
        next(follower)
    assert time.monotonic() - started < 30  # bounded, not a hang


def _blocked_clients(url: str) -> int:
    return int(redis.Redis.from_url(url).info("clients")["blocked_clients"])


def _wait_for(condition: Callable[[], bool], timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_breaking_out_of_follow_releases_its_connection(
    real_backend: str, private_server: Callable[..., EphemeralServer]
) -> None:
    server = private_server(real_backend)
    client = redis.Redis.from_url(server.url)
    log = MessageLog(client, new_id())
    log.add("user", "x")
    for row in log.follow():
        assert row.seq == 1
        break
    assert client.connection_pool._in_use_connections == set()


def test_cancelling_an_async_follow_releases_its_connection(
    real_backend: str, private_server: Callable[..., EphemeralServer]
) -> None:
    server = private_server(real_backend)

    async def scenario() -> None:
        client = redis.asyncio.Redis.from_url(server.url)
        log = AsyncMessageLog(client, new_id())
        seen: list[int] = []

        async def consume() -> None:
            async for row in log.follow():
                seen.append(row.seq)

        task = asyncio.create_task(consume())
        await log.add("user", "x")
        assert await asyncio.to_thread(_wait_for, lambda: _blocked_clients(server.url) == 1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert seen == [1]
        assert await asyncio.to_thread(_wait_for, lambda: _blocked_clients(server.url) == 0)
        assert not client.connection_pool._in_use_connections
        assert await log.add("user", "y") == 2  # the client is still usable
        await client.aclose()

    asyncio.run(scenario())


def test_async_follow_from_another_worker(
    real_backend: str, shared_server: Callable[[str], EphemeralServer]
) -> None:
    url = shared_server(real_backend).url
    conversation = new_id()

    async def scenario() -> None:
        client = redis.asyncio.Redis.from_url(url)
        log = AsyncMessageLog(client, conversation)
        writer = MessageLog(redis.Redis.from_url(url), conversation)
        writer.add("user", "old")
        got: list[Entry] = []

        async def consume() -> None:
            async for row in log.follow():
                got.append(row)
                if row.seq == 4:
                    return

        task = asyncio.create_task(consume())
        await asyncio.to_thread(writer.append_many, [{"role": "user", "content": "a"}] * 3)
        await asyncio.wait_for(task, 10)
        assert [m.seq for m in got] == [1, 2, 3, 4]
        assert got == await log.all()
        await client.aclose()

    asyncio.run(scenario())


# -- subscribe ---------------------------------------------------------------------------


def test_subscribe_delivers_commits_of_other_workers_in_order(sync_env: Env) -> None:
    log = sync_env.log()
    log.add("user", "before the subscription")
    delivered: list[int] = []
    with log.subscribe(lambda rows: delivered.extend(m.seq for m in rows)) as subscription:
        other = sync_env.log(log.conversation)
        for i in range(10):
            other.add("user", str(i))
        other.append_many([{"role": "user", "content": "x"}] * 5)
        assert _wait_for(lambda: subscription.position == 16)
    assert delivered == list(range(2, 17))  # only new commits, each once
    assert not subscription.running


def test_subscribe_from_a_stored_position_and_a_failing_callback(sync_env: Env) -> None:
    log = sync_env.log()
    log.append_many([{"role": "user", "content": str(i)} for i in range(4)])
    delivered: list[int] = []

    def callback(rows: list[Entry]) -> None:
        delivered.extend(m.seq for m in rows)
        if rows[-1].seq >= 4:
            raise RuntimeError("handler failed")

    subscription = log.subscribe(callback, after=2)
    assert _wait_for(lambda: not subscription.running)
    with pytest.raises(RuntimeError, match="handler failed"):
        subscription.close()
    assert delivered == [3, 4]
    assert subscription.position == 2  # the failed batch was not acknowledged


def test_async_subscribe_with_an_async_callback(
    real_backend: str, shared_server: Callable[[str], EphemeralServer]
) -> None:
    url = shared_server(real_backend).url

    async def scenario() -> None:
        client = redis.asyncio.Redis.from_url(url)
        log = AsyncMessageLog(client, new_id())
        await log.add("user", "old")
        delivered: list[int] = []

        async def callback(rows: list[Entry]) -> None:
            await asyncio.sleep(0)
            delivered.extend(m.seq for m in rows)

        async with await log.subscribe(callback) as subscription:
            for i in range(5):
                await log.add("user", str(i))
            for _ in range(200):
                if subscription.position == 6:
                    break
                await asyncio.sleep(0.02)
        assert delivered == [2, 3, 4, 5, 6]
        assert not subscription.running
        assert await asyncio.to_thread(_wait_for, lambda: _blocked_clients(url) == 0)
        await client.aclose()

    asyncio.run(scenario())


async def _until(condition: Callable[[], bool], timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.01)
    return True


def test_async_subscribe_delivers_an_append_awaited_right_after_it(
    real_backend: str, shared_server: Callable[[str], EphemeralServer]
) -> None:
    url = shared_server(real_backend).url

    async def scenario() -> None:
        client, other = redis.asyncio.Redis.from_url(url), redis.asyncio.Redis.from_url(url)
        for i in range(100):
            log = AsyncMessageLog(client, new_id())
            await log.add("user", "before")  # history: not delivered
            # The same log, or another client on the same loop; its pool is warm, so the
            # append is sent before the subscription's task has run at all.
            writer = log if i % 2 else AsyncMessageLog(other, log.conversation)
            await writer.count()
            delivered: list[int] = []

            def deliver(rows: list[Entry], into: list[int] = delivered) -> None:
                into.extend(m.seq for m in rows)

            subscription = await log.subscribe(deliver)
            assert await writer.add("user", "right after") == 2
            assert await _until(partial(bool, delivered)), f"round {i}: nothing delivered"
            await subscription.close()
            assert delivered == [2], f"round {i}"
        await client.aclose()
        await other.aclose()

    asyncio.run(scenario())


def test_async_subscription_opened_while_the_server_is_down_waits_for_it(
    real_backend: str, private_server: Callable[..., EphemeralServer]
) -> None:
    server = private_server(real_backend)

    async def scenario() -> None:
        client = redis.asyncio.Redis.from_url(
            server.url, socket_timeout=1, socket_connect_timeout=0.5
        )
        log = AsyncMessageLog(client, new_id())
        server.kill()
        delivered: list[int] = []
        # subscribe() reads its start while the server is away: it waits (the retry
        # policy's deadline), then the subscription delivers what comes after it.
        opening = asyncio.create_task(
            log.subscribe(lambda rows: delivered.extend(m.seq for m in rows))
        )
        await asyncio.sleep(0.5)
        assert not opening.done()  # waiting, not failed
        await asyncio.to_thread(server.restart)
        subscription = await asyncio.wait_for(opening, 10)
        assert subscription.position == 0
        assert await log.add("user", "back") == 1
        assert await _until(lambda: delivered == [1])
        # An outage while it runs is waited out too.
        server.kill()
        await asyncio.sleep(0.3)
        assert subscription.running and subscription.error is None
        await asyncio.to_thread(server.restart)
        await subscription.close()  # nothing to re-raise
        await client.aclose()

    asyncio.run(scenario())


def test_async_subscribe_on_a_broken_log_raises_at_once_or_on_close(
    real_backend: str, shared_server: Callable[[str], EphemeralServer]
) -> None:
    url = shared_server(real_backend).url

    async def scenario() -> None:
        client = redis.asyncio.Redis.from_url(url)
        log = AsyncMessageLog(client, new_id())
        redis.Redis.from_url(url).rpush(log.keys.seq, "not a counter")
        with pytest.raises(WrongTypeError):
            await log.subscribe(lambda rows: None)  # its start cannot be read
        redis.Redis.from_url(url).hset(log.keys.stream, "not", "a stream")
        subscription = await log.subscribe(lambda rows: None, after=0)
        assert await _until(lambda: not subscription.running)
        assert isinstance(subscription.error, WrongTypeError)
        with pytest.raises(WrongTypeError):
            await subscription.close()
        await client.aclose()

    asyncio.run(scenario())


def test_an_async_subscription_closed_from_its_callback_stops_cleanly(
    real_backend: str, shared_server: Callable[[str], EphemeralServer]
) -> None:
    url = shared_server(real_backend).url

    async def scenario() -> None:
        client = redis.asyncio.Redis.from_url(url)
        log = AsyncMessageLog(client, new_id())
        await log.append_many([{"role": "user", "content": str(i)} for i in range(3)])
        delivered: list[int] = []

        async def callback(rows: list[Entry]) -> None:
            delivered.extend(m.seq for m in rows)
            await subscription.close()

        subscription = await log.subscribe(callback, after=0)
        assert await _until(lambda: not subscription.running)
        await log.add("user", "after the close")
        await subscription.close()  # nothing recorded, nothing to re-raise
        assert subscription.error is None
        assert delivered == [1, 2, 3]
        assert subscription.position == 3  # the callback returned
        assert await asyncio.to_thread(_wait_for, lambda: _blocked_clients(url) == 0)
        await client.aclose()

    asyncio.run(scenario())


def test_a_subscription_closed_from_its_callback_stops_cleanly(
    real_backend: str, shared_server: Callable[[str], EphemeralServer]
) -> None:
    url = shared_server(real_backend).url
    log = MessageLog(redis.Redis.from_url(url), new_id())
    log.append_many([{"role": "user", "content": str(i)} for i in range(3)])
    delivered: list[int] = []
    assigned = threading.Event()

    def callback(rows: list[Entry]) -> None:
        delivered.extend(m.seq for m in rows)
        assigned.wait(5)
        subscription.close()

    subscription = log.subscribe(callback, after=0)
    assigned.set()
    assert _wait_for(lambda: not subscription.running)
    log.add("user", "after the close")
    subscription.close()  # nothing recorded, nothing to re-raise
    assert subscription.error is None
    assert delivered == [1, 2, 3]
    assert subscription.position == 3
