"""The private redis-py attributes the library uses (all named in ``_io.redis_private``)
still exist on the installed redis-py's objects: a pool, a connected sync connection
with either reply parser, a connected asyncio connection.

Checked against the redis-py versions in ``_io.redis_private.CHECKED_WITH``; a failure
names the installed version: look at what that release changed before adding it there.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
from collections.abc import Callable
from typing import Any

import pytest
import redis
import redis.asyncio
from redis._parsers import _HiredisParser, _RESP2Parser

from redis_msglog._io import redis_private as private
from redis_msglog._io.pool import is_plain_pool
from redis_msglog.testing import EphemeralServer

INSTALLED = importlib.metadata.version("redis")
CHECKED = f"redis-py {INSTALLED} (the library was checked with {private.CHECKED_WITH})"


def _missing(obj: Any, names: tuple[str, ...]) -> list[str]:
    return [f"{type(obj).__name__}.{name}" for name in names if not hasattr(obj, name)]


def test_the_checked_versions_are_named() -> None:
    assert private.CHECKED_WITH, "name the redis-py versions _io/redis_private.py was checked with"
    assert all(version.count(".") == 2 for version in private.CHECKED_WITH)


def test_the_pools_keep_their_connections_where_the_library_takes_them() -> None:
    sync_pool, async_pool = redis.ConnectionPool(), redis.asyncio.ConnectionPool()
    missing = _missing(sync_pool, private.POOL_ATTRIBUTES + private.SYNC_POOL_ATTRIBUTES)
    missing += _missing(async_pool, private.POOL_ATTRIBUTES)
    assert not missing, f"{CHECKED} has no {missing}"
    # The layout check that keeps the library off any other pool accepts these.
    assert private.has_expected_layout(sync_pool) and is_plain_pool(sync_pool), CHECKED
    assert private.has_expected_layout(async_pool) and is_plain_pool(async_pool), CHECKED


@pytest.mark.parametrize("parser", [_HiredisParser, _RESP2Parser])
def test_a_connected_sync_connection_has_its_socket_and_parser_timeout(
    shared_server: Callable[[str], EphemeralServer], parser: type[Any]
) -> None:
    client = redis.Redis.from_url(shared_server("redis").url, parser_class=parser)
    conn = client.connection_pool.get_connection()
    try:
        missing = _missing(conn, private.SYNC_CONNECTION_ATTRIBUTES)
        inner = conn._parser
        missing += _missing(inner, (private.PARSER_ATTRIBUTES[parser.__name__],))
        assert not missing, f"{CHECKED} has no {missing}"
        if parser is _RESP2Parser:
            assert hasattr(inner._buffer, "socket_timeout"), CHECKED
        private.restore_read_timeout(conn, 1.5)
        sock: Any = conn._sock
        assert sock.gettimeout() == 1.5, CHECKED
    finally:
        client.connection_pool.release(conn)
        client.close()


def test_a_connected_asyncio_connection_has_its_stream_writer(
    shared_server: Callable[[str], EphemeralServer],
) -> None:
    async def main() -> None:
        client = redis.asyncio.Redis.from_url(shared_server("redis").url)
        conn = await client.connection_pool.get_connection()
        try:
            missing = _missing(conn, private.ASYNC_CONNECTION_ATTRIBUTES)
            assert not missing, f"{CHECKED} has no {missing}"
            assert isinstance(private.stream_writer(conn), asyncio.StreamWriter), CHECKED
        finally:
            await client.connection_pool.release(conn)
            await client.aclose()

    asyncio.run(main())


def test_a_connection_taken_and_given_back_moves_between_the_pools_lists() -> None:
    pool = redis.ConnectionPool(max_connections=1)
    conn = private.grab(pool)
    assert conn is not None and pool._in_use_connections == {conn}, CHECKED
    assert private.grab(pool) is None  # max_connections reached
    private.put_back(pool, conn)
    assert pool._available_connections == [conn] and not pool._in_use_connections, CHECKED
    async_pool = redis.asyncio.ConnectionPool(max_connections=1)
    conn = private.grab_async(async_pool)
    assert conn is not None and private.grab_async(async_pool) is None, CHECKED
    private.put_back_async(async_pool, conn)
    assert async_pool._available_connections == [conn], CHECKED
