"""Reads cost one round trip each, counted at the socket: a cold ``all()``, ``last(n)``,
``read()`` and ``count()`` of an edit-free log, and a warm ``all()`` with new rows, each
send one burst of commands and wait for one burst of replies (both clients)."""

from __future__ import annotations

import asyncio
import selectors
import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
import redis.asyncio

from redis_msglog import AsyncMessageLog, MessageLog
from redis_msglog.testing import EphemeralServer

from ..conftest import new_id
from ..support.proxy import ReplyDroppingProxy


class RoundTripCounter(ReplyDroppingProxy):
    """Forwards every connection and counts round trips: bursts of bytes from the client
    that follow a reply from the server (or open the connection)."""

    def __init__(self, upstream_port: int) -> None:
        self.round_trips = 0
        self._count_lock = threading.Lock()
        super().__init__(upstream_port)

    def _pump(self, client: socket.socket, upstream: socket.socket) -> None:
        replied = True  # a new connection: its first bytes open a round trip
        with selectors.DefaultSelector() as selector, client, upstream:
            selector.register(client, selectors.EVENT_READ, upstream)
            selector.register(upstream, selectors.EVENT_READ, client)
            while not self._closed:
                for key, _ in selector.select(timeout=0.5):
                    source = key.fileobj
                    assert isinstance(source, socket.socket)  # registered above
                    try:
                        data = source.recv(65536)
                    except OSError:
                        return
                    if not data:
                        return
                    if source is client and replied:
                        with self._count_lock:
                            self.round_trips += 1
                    replied = source is upstream
                    try:
                        key.data.sendall(data)
                    except OSError:
                        return

    def counted(self, call: Callable[[], Any]) -> int:
        """The round trips ``call`` makes."""
        before = self.round_trips
        call()
        return self.round_trips - before


@pytest.fixture
def server(shared_server: Callable[[str], EphemeralServer]) -> EphemeralServer:
    return shared_server("redis")


@pytest.fixture
def proxy(server: EphemeralServer) -> Iterator[RoundTripCounter]:
    counter = RoundTripCounter(server.port)
    try:
        yield counter
    finally:
        counter.close()


def _filled(server: EphemeralServer, rows: int) -> str:
    """A conversation of ``rows`` messages, written past the proxy."""
    conversation = new_id()
    writer = MessageLog(redis.Redis.from_url(server.url), conversation)
    writer.append_many([{"role": "user", "content": f"m{i}"} for i in range(rows)])
    return conversation


def test_sync_reads_are_one_round_trip_each(
    server: EphemeralServer, proxy: RoundTripCounter
) -> None:
    client = redis.Redis.from_url(proxy.url)
    client.ping()  # the connection's own handshake, not a read's
    conversation = _filled(server, 5)

    def cold(read: Callable[[MessageLog], Any]) -> int:
        log = MessageLog(client, conversation)
        return proxy.counted(lambda: read(log))

    assert cold(lambda log: log.count()) == 1
    assert cold(lambda log: log.read()) == 1
    assert cold(lambda log: log.last(3)) == 1
    assert cold(lambda log: log.all()) == 1
    warm = MessageLog(client, conversation)
    MessageLog(redis.Redis.from_url(server.url), conversation).add("user", "new")
    rows: list[Any] = []
    assert proxy.counted(lambda: rows.extend(warm.all())) == 1
    assert [row.content for row in rows][-2:] == ["m4", "new"]


def test_async_reads_are_one_round_trip_each(
    server: EphemeralServer, proxy: RoundTripCounter
) -> None:
    async def main() -> None:
        client = redis.asyncio.Redis.from_url(proxy.url)
        await client.ping()  # the connection's own handshake, not a read's
        conversation = _filled(server, 5)

        async def cold(read: Callable[[AsyncMessageLog], Any]) -> int:
            log = AsyncMessageLog(client, conversation)
            before = proxy.round_trips
            await read(log)
            return proxy.round_trips - before

        assert await cold(lambda log: log.count()) == 1
        assert await cold(lambda log: log.read()) == 1
        assert await cold(lambda log: log.last(3)) == 1
        assert await cold(lambda log: log.all()) == 1
        warm = AsyncMessageLog(client, conversation)
        MessageLog(redis.Redis.from_url(server.url), conversation).add("user", "new")
        before = proxy.round_trips
        rows = await warm.all()
        assert proxy.round_trips - before == 1
        assert [row.content for row in rows][-2:] == ["m4", "new"]
        await client.aclose()

    asyncio.run(main())
