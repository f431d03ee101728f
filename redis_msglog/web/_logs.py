"""The app's conversations over one redis client, sync or asyncio, cluster or not: a
log per conversation, and every call made from the event loop (a sync client's in a
worker thread)."""

from __future__ import annotations

import asyncio
import functools
from typing import Any

import redis
import redis.asyncio
import redis.asyncio.cluster

from .._async import AsyncMessageLog
from .._core.facade import DEFAULT_PAGE_SIZE
from .._sync import MessageLog

MAX_CACHED_LOGS = 1024
"""Log objects kept for reuse (cheap to rebuild; the bound keeps memory flat)."""


def is_async_client(client: object) -> bool:
    return isinstance(client, (redis.asyncio.Redis, redis.asyncio.cluster.RedisCluster))


class Logs:
    """Conversation logs of one client, configured with the app's log options."""

    def __init__(self, client: Any, options: dict[str, Any]) -> None:
        self.client = client
        self.sync = not is_async_client(client)
        self.options = options
        self.page_size: int = options.get("page_size", DEFAULT_PAGE_SIZE)
        self._kind = MessageLog if self.sync else AsyncMessageLog
        self.log = functools.lru_cache(maxsize=MAX_CACHED_LOGS)(self._new_log)

    def _new_log(self, conversation: str) -> Any:
        return self._kind(self.client, conversation, **self.options)

    async def call(self, conversation: str, method: str, *args: Any, **kwargs: Any) -> Any:
        """``log.<method>(*args, **kwargs)`` of ``conversation``, awaited."""
        bound = getattr(self.log(conversation), method)
        if self.sync:
            return await asyncio.to_thread(bound, *args, **kwargs)
        return await bound(*args, **kwargs)

    async def run(self, conversation: str, plan: Any) -> Any:
        """A plan of ``conversation``'s log (``_core/steps.py``) run, awaited."""
        log = self.log(conversation)
        if self.sync:
            return await asyncio.to_thread(log._run, plan)
        return await log._run(plan)

    async def blob(self, conversation: str, digest: str) -> bytes | None:
        """The bytes stored off the rows under ``digest`` (``None``: not stored)."""
        log = self.log(conversation)
        (value,) = await self.run(
            conversation, log._core._read(("HGET", log._core.keys.blobs, digest))
        )
        return value if value is None or isinstance(value, bytes) else str(value).encode()


POOLS = (
    redis.ConnectionPool,
    redis.BlockingConnectionPool,
    redis.asyncio.ConnectionPool,
    redis.asyncio.BlockingConnectionPool,
)


def follower_client(client: Any, size: int) -> Any:
    """A client like ``client`` (same server, options and login) over a pool of its own of
    ``size`` connections, for the followers' blocking ``XREAD``: they never take a
    connection of ``client``'s pool, which the pages and appends keep to themselves.
    ``None`` when ``client`` cannot be copied so (a cluster client, a Sentinel pool...):
    then the app needs a ``follower_client`` given."""
    pool = getattr(client, "connection_pool", None)
    if type(client) not in (redis.Redis, redis.asyncio.Redis) or type(pool) not in POOLS:
        return None
    assert pool is not None
    own = type(pool)(
        connection_class=pool.connection_class, max_connections=size, **pool.connection_kwargs
    )
    return type(client).from_pool(own)
