"""A failing server gets a clear error, never a silent loss or a duplicate."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis
import redis.asyncio
from redis.backoff import ConstantBackoff
from redis.retry import Retry

from redis_msglog import (
    NO_RETRY,
    AppendInDoubtError,
    AsyncMessageLog,
    CorruptLogError,
    MessageLog,
    OutOfMemoryError,
    RetryPolicy,
    ServerUnavailableError,
    StorageError,
    WrongTypeError,
)
from redis_msglog.testing import EphemeralServer

from ..conftest import Env, new_id
from ..support.history import History

pytestmark = pytest.mark.slow  # stalled, stopped and out-of-memory servers


def test_noscript_after_script_flush_is_transparent(env: Env) -> None:
    log = env.log()
    assert log.add("user", "before") == 1
    env.raw.script_flush()
    assert log.add("user", "after") == 2
    env.raw.script_flush()
    assert (
        log.append_many([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]) == 4
    )
    assert [m.seq for m in log.all()] == [1, 2, 3, 4]


def test_noscript_is_transparent_with_retries_off_too(env: Env) -> None:
    """A script the server no longer has is not a failure to retry: nothing ran, so it
    is sent again at once (EVAL), whatever the retry policy."""
    log = env.log(retry=NO_RETRY)
    assert log.add("user", "before") == 1
    env.raw.script_flush()
    assert log.add("user", "after") == 2  # no plan: the quick lane's first try
    env.raw.script_flush()
    assert log.retract([1]) == 3
    assert [m.content for m in log.all()] == ["after"]


def test_stream_key_of_wrong_type(env: Env) -> None:
    log = env.log()
    env.raw.set(log.keys.stream, "not a stream")
    with pytest.raises(
        WrongTypeError, match=log.keys.stream.replace("{", r"\{").replace("}", r"\}")
    ):
        log.add("user", "x")
    assert env.raw.get(log.keys.seq) is None  # the counter did not move
    assert env.raw.get(log.keys.stream) == b"not a stream"


@pytest.mark.parametrize(
    "spoil, error",
    [
        (lambda raw, key: raw.rpush(key, "x"), WrongTypeError),  # a list, not a string
        (lambda raw, key: raw.set(key, "abc"), CorruptLogError),  # a string, not a number
    ],
    ids=["wrong type", "garbage"],
)
def test_bad_seq_key_writes_nothing(env: Env, spoil: Callable[..., object], error: type) -> None:
    log = env.log()
    spoil(env.raw, log.keys.seq)
    with pytest.raises(error, match="seq counter"):
        log.add("user", "x")
    assert env.raw.exists(log.keys.stream) == 0


def test_counter_behind_the_stream_writes_nothing(env: Env) -> None:
    log = env.log()
    log.append_many([{"role": "user", "content": str(i)} for i in range(3)])
    env.raw.set(log.keys.seq, 1)  # an operator's mistake: the counter was rewound
    with pytest.raises(CorruptLogError, match="behind"):
        log.append_many([{"role": "user", "content": "x"}, {"role": "user", "content": "y"}])
    assert env.raw.get(log.keys.seq) == b"1"
    assert env.raw.xlen(log.keys.stream) == 3


def test_out_of_memory_rejects_before_running(
    real_backend: str, flavor: str, private_server: Callable[..., EphemeralServer]
) -> None:
    server = private_server(real_backend)
    admin = redis.Redis.from_url(server.url)
    conversation = new_id()
    history = History(conversation)
    log = MessageLog(redis.Redis.from_url(server.url), conversation)
    with history.append("client", ["first"]) as op:
        assert op.committed(log.add("user", "first")) == 1
    admin.config_set("maxmemory-policy", "noeviction")
    admin.config_set("maxmemory", 1)
    try:
        if flavor == "sync":
            with pytest.raises(OutOfMemoryError), history.append("client", ["a", "b"]):
                log.append_many(
                    [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]
                )
        else:

            async def attempt() -> None:
                client = redis.asyncio.Redis.from_url(server.url)
                with pytest.raises(OutOfMemoryError), history.append("client", ["a"]):
                    await AsyncMessageLog(client, conversation).add("user", "a")
                await client.aclose()

            asyncio.run(attempt())
        assert log.count() == 1 and len(log.all()) == 1
    finally:
        admin.config_set("maxmemory", 0)
    with history.append("client", ["after"]) as op:
        assert op.committed(log.add("user", "after")) == 2
    summary = history.check(admin)  # the refused append wrote nothing
    assert (summary.length, summary.failed) == (2, 1)


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


BRIEF = RetryPolicy(deadline=0.5)  # the default waits 30 s for the server to come back


def test_unreachable_server_is_a_clear_error_and_not_in_doubt(flavor: str) -> None:
    url = f"redis://127.0.0.1:{_closed_port()}/0"
    if flavor == "sync":
        log = MessageLog(redis.Redis.from_url(url, socket_connect_timeout=1), "c", retry=BRIEF)
        for operation in (lambda: log.add("user", "x"), log.count, log.all, log.last):
            with pytest.raises(ServerUnavailableError) as info:
                operation()
            assert not isinstance(info.value, AppendInDoubtError)
            assert isinstance(info.value.__cause__, redis.ConnectionError)
        return

    async def attempt() -> None:
        client = redis.asyncio.Redis.from_url(url, socket_connect_timeout=1)
        alog = AsyncMessageLog(client, "c", retry=BRIEF)
        with pytest.raises(ServerUnavailableError) as info:
            await alog.add("user", "x")
        assert not isinstance(info.value, AppendInDoubtError)
        with pytest.raises(ServerUnavailableError):
            await alog.all()
        await client.aclose()

    asyncio.run(attempt())


def _stall(url: str, seconds: float) -> threading.Thread:
    """Block the server for ``seconds`` (DEBUG SLEEP) from another connection."""
    admin = redis.Redis.from_url(url, socket_timeout=seconds + 10)
    thread = threading.Thread(target=admin.execute_command, args=("DEBUG", "SLEEP", seconds))
    thread.start()
    time.sleep(0.2)  # let DEBUG SLEEP reach the server first
    return thread


EAGER_RETRY = Retry(ConstantBackoff(0.05), 10)  # what redis-py 8 does by default, and then some


PATIENT = RetryPolicy(attempts=10, backoff=0.1, max_backoff=0.2)


@pytest.mark.parametrize("policy", [NO_RETRY, PATIENT], ids=["no retries", "patient retries"])
def test_lost_reply_never_duplicates_whatever_the_clients_retry_settings(
    real_backend: str,
    flavor: str,
    policy: RetryPolicy,
    shared_server: Callable[[str], EphemeralServer],
) -> None:
    """redis-py's own retry (10 re-sends here) never re-sends an append. With retries
    off, a lost reply is reported in doubt; with ours on, the append is re-sent with the
    same idempotency key until the server answers, and is written exactly once."""
    url = shared_server(real_backend).url
    conversation = new_id()
    options: dict[str, Any] = {  # keyword arguments of from_url
        "socket_timeout": 0.3,
        "retry": EAGER_RETRY,
        "retry_on_error": [redis.ConnectionError, redis.TimeoutError],
    }
    expect_doubt = policy.attempts == 0
    # Each log appends once before the stall, so its connection is already open: a stall
    # during connect (redis-py's handshake) would fail before anything was sent.
    history = History(conversation)
    if flavor == "sync":
        log = MessageLog(redis.Redis.from_url(url, **options), conversation, retry=policy)
        with history.append("client", ["warm"]) as op:
            op.committed(log.add("user", "warm"))
        stall = _stall(url, 1.5)
        if expect_doubt:
            with (
                pytest.raises(AppendInDoubtError, match="may have committed") as caught,
                history.append("client", ["once"]),
            ):
                log.add("user", "once")
            assert caught.value.idempotency_key is None
        else:
            with history.append("client", ["once"]) as op:
                assert op.committed(log.add("user", "once")) == 2
    else:

        async def attempt() -> threading.Thread:
            client = redis.asyncio.Redis.from_url(url, **options)
            alog = AsyncMessageLog(client, conversation, retry=policy)
            with history.append("client", ["warm"]) as op:
                op.committed(await alog.add("user", "warm"))
            stall = _stall(url, 1.5)
            if expect_doubt:
                with pytest.raises(AppendInDoubtError), history.append("client", ["once"]):
                    await alog.add("user", "once")
            else:
                with history.append("client", ["once"]) as op:
                    assert op.committed(await alog.add("user", "once")) == 2
            await client.aclose()
            return stall

        stall = asyncio.run(attempt())
    stall.join()
    # The server ran the append it received once unblocked; nothing was written twice.
    reader = MessageLog(redis.Redis.from_url(url), conversation)
    with history.append("reader", ["next"]) as op:
        assert op.committed(reader.add("user", "next")) == 3
    # warm at 1, next at 3, gap-free and nothing unrecorded: "once" at 2, exactly once.
    assert history.check(redis.Redis.from_url(url)).length == 3


def test_cancelled_async_append_has_committed_or_not_and_the_log_stays_consistent(
    real_backend: str, shared_server: Callable[[str], EphemeralServer]
) -> None:
    url = shared_server(real_backend).url
    conversation = new_id()

    history = History(conversation)

    async def scenario() -> None:
        client = redis.asyncio.Redis.from_url(url)
        log = AsyncMessageLog(client, conversation)
        with history.append("client", ["first"]) as op:
            assert op.committed(await log.add("user", "first")) == 1

        async def cancelled() -> None:
            with history.append("client", ["cancelled"]) as op:  # recorded in doubt
                op.committed(await log.add("user", "cancelled"))

        stall = _stall(url, 1.0)
        task = asyncio.create_task(cancelled())
        await asyncio.sleep(0.2)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.to_thread(stall.join)
        count = await log.count()
        assert count in (1, 2)  # committed or not, never half
        with history.read("client", after=0) as read:
            rows = read.returned(await log.all())
        assert [m.seq for m in rows] == list(range(1, count + 1))
        with history.append("client", ["after"]) as op:  # the client is still usable
            assert op.committed(await log.add("user", "after")) == count + 1
        await client.aclose()

    asyncio.run(scenario())
    assert history.check(redis.Redis.from_url(url)).in_doubt == 1


def test_server_stopped_mid_run_then_back(
    real_backend: str, private_server: Callable[..., EphemeralServer]
) -> None:
    server = private_server(real_backend)
    client = redis.Redis.from_url(server.url, socket_connect_timeout=1)
    log = MessageLog(client, new_id(), retry=BRIEF)
    assert log.add("user", "before") == 1
    server.stop()
    with pytest.raises(ServerUnavailableError):
        log.add("user", "lost")
    with pytest.raises(StorageError):
        log.count()
    # The same port again: the same client and log resume without intervention. (An
    # in-memory server lost its data, so the log starts over at 1.)
    restarted = EphemeralServer(server.binary, server.extra_args, port=server.port).start()
    try:
        assert log.add("user", "again") == 1
        assert [m.content for m in log.all()] == ["again"]
    finally:
        restarted.stop()
