"""What the integrations share: the asyncio client a store was given, or one per event
loop made from a URL (frameworks run sync entry points on event loops of their own, and a
``redis.asyncio`` connection belongs to the loop that opened it)."""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable

import redis.asyncio
import redis.asyncio.cluster

AsyncClient = redis.asyncio.Redis | redis.asyncio.cluster.RedisCluster
"""The clients the integrations take: ``redis.asyncio.Redis`` or ``RedisCluster``."""


def client_factory(url: str, *, cluster: bool = False) -> Callable[[], AsyncClient]:
    """Makes a client for ``url`` (a Redis Cluster's, with ``cluster=True``)."""
    if cluster:
        return lambda: redis.asyncio.cluster.RedisCluster.from_url(url)
    return lambda: redis.asyncio.Redis.from_url(url)


class LoopClients:
    """The client given, or, given a function making one, one client per running event
    loop, made on first use."""

    def __init__(self, client: AsyncClient | Callable[[], AsyncClient]) -> None:
        self._client = None if callable(client) else client
        self._factory = client if callable(client) else None
        self._made: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, AsyncClient] = (
            weakref.WeakKeyDictionary()
        )

    def get(self) -> AsyncClient:
        """The client to use on the running event loop."""
        if self._client is not None:
            return self._client
        assert self._factory is not None
        loop = asyncio.get_running_loop()
        client = self._made.get(loop)
        if client is None:
            client = self._made[loop] = self._factory()
        return client

    async def aclose(self) -> None:
        """Close the client made for the running loop (a client given is the caller's)."""
        client = self._made.pop(asyncio.get_running_loop(), None)
        if client is not None:
            await client.aclose()
