"""The client path of the library's own round trips: packing in C, and idle connections
borrowed from the default pool (``_io.pool.borrowable_pool``) with the pool's
bookkeeping and the pool's check kept."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
import redis
import redis.asyncio

from redis_msglog import NO_RETRY, AsyncMessageLog, MessageLog
from redis_msglog._io.pool import borrowable_pool
from redis_msglog._io.routing import pack
from redis_msglog.testing import EphemeralServer

from ..conftest import new_id

COMMANDS = [
    ("EVALSHA", "ab" * 20, 3, "msglog:{é}:seq", "k", "", 120000, -5, 2**70, b'{"x":"\xc3\xa9"}'),
    ("XRANGE", "msglog:{c}:stream", "1-0", "+", "COUNT", 1000),
]


def test_packing_in_c_writes_the_bytes_redis_py_writes() -> None:
    for client in (redis.Redis(), redis.asyncio.Redis()):
        conn = client.connection_pool.make_connection()
        for commands in ([COMMANDS[0]], COMMANDS):
            assert b"".join(pack(conn, commands)) == b"".join(conn.pack_commands(commands))
        with pytest.raises(redis.DataError):  # hiredis refuses a bool: redis-py's error
            pack(conn, [("SET", "k", True)])
        with pytest.raises(UnicodeEncodeError):
            pack(conn, [("SET", "\ud800", "v")])


def test_only_the_default_kind_of_pool_is_borrowed_from() -> None:
    assert borrowable_pool(redis.Redis()) is not None
    assert borrowable_pool(redis.asyncio.Redis()) is not None
    assert borrowable_pool(redis.Redis(protocol=3)) is None
    blocking = redis.BlockingConnectionPool()
    assert borrowable_pool(redis.Redis(connection_pool=blocking)) is None
    latin = redis.Redis(encoding="latin-1")  # borrowed, but packed by redis-py
    conn = latin.connection_pool.make_connection()
    assert pack(conn, [("GET", "é")]) == conn.pack_commands([("GET", "é")])


def _kill_others(url: str) -> None:
    admin = redis.Redis.from_url(url)
    admin.client_kill_filter(_type="normal", skipme=True)


def test_a_borrowed_connection_the_server_closed_is_replaced_before_sending(
    private_server: Callable[..., EphemeralServer],
) -> None:
    server = private_server("redis")
    client = redis.Redis.from_url(server.url)
    log = MessageLog(client, new_id(), retry=NO_RETRY)  # one try: a lost reply would raise
    assert log.add("user", "a") == 1
    pool = client.connection_pool
    assert len(pool._available_connections) == 1 and not pool._in_use_connections
    _kill_others(server.url)
    assert log.add("user", "b") == 2  # reconnected before the script was sent
    assert [m.content for m in log.all()] == ["a", "b"]
    assert len(pool._available_connections) == 1 and not pool._in_use_connections


def test_an_async_borrowed_connection_the_server_closed_is_replaced_before_sending(
    private_server: Callable[..., EphemeralServer],
) -> None:
    server = private_server("redis")

    async def scenario() -> None:
        client = redis.asyncio.Redis.from_url(server.url)
        log = AsyncMessageLog(client, new_id(), retry=NO_RETRY)
        assert await log.add("user", "a") == 1
        pool = client.connection_pool
        assert len(pool._available_connections) == 1 and not pool._in_use_connections
        await asyncio.to_thread(_kill_others, server.url)
        assert await log.add("user", "b") == 2
        assert [m.content for m in await log.all()] == ["a", "b"]
        assert not pool._in_use_connections
        await client.aclose()
        assert not any(c.is_connected for c in pool._available_connections)

    asyncio.run(scenario())


def test_a_closed_client_reconnects_like_redis_py(
    private_server: Callable[..., EphemeralServer],
) -> None:
    server = private_server("redis")
    client = redis.Redis.from_url(server.url)
    log = MessageLog(client, new_id())
    log.add("user", "a")
    client.close()  # disconnects the pool's connections, idle ones included
    assert not any(c._sock for c in client.connection_pool._available_connections)
    assert log.add("user", "b") == 2


def _append_in_child(log: MessageLog) -> None:
    log.add("user", "child")  # the inherited pool resets: never the parent's socket


def test_a_forked_child_does_not_borrow_the_parents_connection(
    private_server: Callable[..., EphemeralServer],
) -> None:
    import multiprocessing

    server = private_server("redis")
    client = redis.Redis.from_url(server.url)
    log = MessageLog(client, new_id())
    log.add("user", "parent")  # an idle connection in the pool, inherited by the child
    child = multiprocessing.get_context("fork").Process(target=_append_in_child, args=(log,))
    child.start()
    child.join(30)
    assert child.exitcode == 0
    log.add("user", "parent again")  # the parent's connection is intact
    assert [m.content for m in log.all()] == ["parent", "child", "parent again"]
