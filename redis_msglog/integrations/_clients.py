"""What the integrations share: the asyncio client a store was given, or one per event
loop made from a URL (frameworks run sync entry points on event loops of their own, and a
``redis.asyncio`` connection belongs to the loop that opened it)."""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable, Mapping
from typing import TypeVar

import redis.asyncio
import redis.asyncio.cluster
import redis.connection

from .._args import check_type, shown
from ..errors import InvalidArgumentError, ServerUnavailableError, StorageError

T = TypeVar("T")

AsyncClient = redis.asyncio.Redis | redis.asyncio.cluster.RedisCluster
"""The clients the integrations take: ``redis.asyncio.Redis`` or ``RedisCluster``."""


def check_url(url: object) -> str:
    """``url`` if redis-py can parse it (``redis://``, ``rediss://``, ``unix://``)."""
    if not isinstance(url, str):
        raise InvalidArgumentError(f"url must be a str, got {type(url).__name__}")
    try:
        redis.connection.parse_url(url)
    except (ValueError, TypeError) as exc:
        raise InvalidArgumentError(f"url {shown(url)}: {exc}") from exc
    return url


def from_url(factory: Callable[..., T], url: object, kwargs: object) -> T:
    """``factory(url, **kwargs)`` (a client's ``from_url``), its errors typed: argument
    errors, and a cluster client's failure to reach the cluster (it connects at once)."""
    if kwargs is not None and not isinstance(kwargs, Mapping):
        raise InvalidArgumentError(f"redis_kwargs must be a dict, got {type(kwargs).__name__}")
    try:
        return factory(check_url(url), **(kwargs or {}))
    except redis.exceptions.RedisClusterException as exc:
        # No node reachable (its cause: a connection error), or bad arguments (a db other
        # than 0, a unix socket, a server not in cluster mode).
        if isinstance(exc.__cause__, (ConnectionError, redis.exceptions.ConnectionError)):
            raise ServerUnavailableError(f"no node of {shown(url)} answered: {exc}") from exc
        raise InvalidArgumentError(f"a cluster client for {shown(url)}: {exc}") from exc
    except (TypeError, ValueError) as exc:
        raise InvalidArgumentError(f"a client for {shown(url)}: {exc}") from exc
    except redis.exceptions.RedisError as exc:
        raise StorageError(f"a client for {shown(url)}: {exc}") from exc


def client_factory(url: str, *, cluster: bool = False) -> Callable[[], AsyncClient]:
    """Makes a client for ``url`` (a Redis Cluster's, with ``cluster=True``)."""
    check_url(url)
    check_type("cluster", cluster, bool, "a bool")
    if cluster:
        return lambda: redis.asyncio.cluster.RedisCluster.from_url(url)
    return lambda: redis.asyncio.Redis.from_url(url)


class LoopClients:
    """The client given, or, given a function making one, one client per running event
    loop, made on first use."""

    def __init__(self, client: AsyncClient | Callable[[], AsyncClient]) -> None:
        if not callable(client) and not isinstance(client, AsyncClient):
            raise InvalidArgumentError(
                "needs a redis.asyncio client (Redis or RedisCluster) or a function making "
                f"one, got {type(client).__name__}"
            )
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
