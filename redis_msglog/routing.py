"""Which server connection a conversation's commands go to.

With a plain client that is its connection pool. With a Redis Cluster client it is the
node owning the conversation's hash slot (every key of a conversation shares it), found in
the client's slot table and followed through ``MOVED`` (slot moved: refresh the table),
``ASK`` (slot being migrated: ``ASKING`` on the target), ``TRYAGAIN`` (a multi-key command
during a migration) and ``CLUSTERDOWN`` (failover in progress). Redis answers each of
these without running the command, so re-sending it is safe even for an append.

The library sends on connections it takes from these pools itself (instead of calling
``execute_command``) so that appends are never re-sent by redis-py's retry machinery and
stream replies come back raw.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import redis.asyncio.cluster
import redis.cluster
from redis import exceptions as redis_errors

T = TypeVar("T")

MAX_REDIRECTS = 16
_REDIRECTS = (redis_errors.AskError, redis_errors.TryAgainError, redis_errors.ClusterDownError)
_ConnectionFailure = (redis_errors.ConnectionError, redis_errors.TimeoutError, OSError)


def is_cluster(client: object) -> bool:
    return isinstance(client, (redis.cluster.RedisCluster, redis.asyncio.cluster.RedisCluster))


def socket_timeout(client: Any) -> float | None:
    """The client's ``socket_timeout`` (for sizing blocking reads under it)."""
    if is_cluster(client):
        kwargs = (
            getattr(client, "connection_kwargs", None) or client.nodes_manager.connection_kwargs
        )
    else:
        kwargs = client.connection_pool.connection_kwargs
    value = kwargs.get("socket_timeout")
    return None if value is None else float(value)


def _pause(attempt: int) -> float:
    return float(min(1.0, 0.02 * 2**attempt))


class _Routing:
    """What both routers share: the client, the key, and how to read a failed try."""

    def __init__(self, client: Any, key: str) -> None:
        self.client = client
        self.key = key
        self.cluster = is_cluster(client)
        self._stale = False  # the slot table may be out of date: refresh before routing

    def _node(self, ask: tuple[str, int] | None) -> Any:
        node = (
            self.client.get_node(host=ask[0], port=ask[1])
            if ask
            else self.client.get_node_from_key(self.key)
        )
        if node is None:
            raise redis_errors.ClusterDownError(f"no known node serves {ask or self.key}")
        return node

    def _redirect(self, exc: BaseException, attempt: int) -> tuple[tuple[str, int] | None, float]:
        """Where the next try goes (an ``ASK`` target or the slot owner) and how long to
        wait first. Re-raises what is not a redirection; a connection failure is raised
        after marking the slot table for a refresh (failover: ask the cluster again)."""
        if isinstance(exc, redis_errors.MovedError):
            self._stale = True
            return None, 0.0
        if isinstance(exc, redis_errors.AskError):
            return (exc.host, int(exc.port)), 0.0
        if isinstance(exc, _REDIRECTS):
            self._stale = True
            return None, _pause(attempt)
        if isinstance(exc, _ConnectionFailure):
            self._stale = True
        raise exc

    def _give_up(self, last: BaseException | None) -> redis_errors.ClusterError:
        return redis_errors.ClusterError(
            f"gave up on {self.key} after {MAX_REDIRECTS} cluster redirections: {last}"
        )


class Router(_Routing):
    """Connections for one conversation, from a ``redis.Redis`` or ``RedisCluster``."""

    def run(self, action: Callable[[Any], T]) -> T:
        """``action(connection)`` on the owning node, following cluster redirections.
        A connection failure is raised to the caller (it decides whether to re-send)
        after marking the slot table for a refresh."""
        if not self.cluster:
            return self._on(self.client.connection_pool, action, None)
        ask: tuple[str, int] | None = None
        last: BaseException | None = None
        for attempt in range(MAX_REDIRECTS):
            try:
                if self._stale:
                    self.client.nodes_manager.initialize()
                    self._stale = False
                pool = self.client.get_redis_connection(self._node(ask)).connection_pool
                return self._on(pool, action, ask)
            except (redis_errors.RedisError, OSError) as exc:
                ask, delay = self._redirect(exc, attempt)
                last = exc
                time.sleep(delay)
        raise self._give_up(last)

    @staticmethod
    def _on(pool: Any, action: Callable[[Any], T], ask: tuple[str, int] | None) -> T:
        conn = pool.get_connection()  # connects: a failure here means nothing was sent
        try:
            if ask:
                conn.send_command("ASKING")
                conn.read_response()
            return action(conn)
        except redis_errors.ResponseError:
            raise  # the server answered: the connection is fine
        except BaseException:
            conn.disconnect()  # a reply may be left unread: never hand this on
            raise
        finally:
            pool.release(conn)


class AsyncRouter(_Routing):
    """The asyncio twin of :class:`Router`."""

    async def run(self, action: Callable[[Any], Awaitable[T]]) -> T:
        if not self.cluster:
            pool = self.client.connection_pool
            conn = await pool.get_connection()
            try:
                return await self._on(conn, action, None)
            finally:
                await pool.release(conn)
        await self.client.initialize()  # a no-op once the client knows the cluster
        ask: tuple[str, int] | None = None
        last: BaseException | None = None
        for attempt in range(MAX_REDIRECTS):
            try:
                if self._stale:
                    await self.client.nodes_manager.initialize()
                    self._stale = False
                node = self._node(ask)
                conn = node.acquire_connection()
                try:
                    await conn.connect()  # failing here, nothing was sent
                    return await self._on(conn, action, ask)
                finally:
                    node.release(conn)
            except (redis_errors.RedisError, OSError) as exc:
                ask, delay = self._redirect(exc, attempt)
                last = exc
                await asyncio.sleep(delay)
        raise self._give_up(last)

    @staticmethod
    async def _on(
        conn: Any, action: Callable[[Any], Awaitable[T]], ask: tuple[str, int] | None
    ) -> T:
        try:
            if ask:
                await conn.send_command("ASKING")
                await conn.read_response()
            return await action(conn)
        except redis_errors.ResponseError:
            raise
        except BaseException:
            # Cancelled or failed mid-reply: the connection's stream is unusable.
            await conn.disconnect(nowait=True)
            raise
