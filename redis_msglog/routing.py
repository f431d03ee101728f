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


def _redirect_message(key: str, error: BaseException | None) -> str:
    return f"gave up on {key} after {MAX_REDIRECTS} cluster redirections: {error}"


class Router:
    """Connections for one conversation, from a ``redis.Redis`` or ``RedisCluster``."""

    def __init__(self, client: Any, key: str) -> None:
        self.client = client
        self.key = key
        self.cluster = is_cluster(client)
        self._stale = False  # the slot table may be out of date: refresh before routing

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
                return self._on(self._pool(ask), action, ask)
            except redis_errors.MovedError as exc:
                self._stale, ask, last = True, None, exc
            except redis_errors.AskError as exc:
                ask, last = (exc.host, int(exc.port)), exc
            except _REDIRECTS as exc:
                self._stale, ask, last = True, None, exc
                time.sleep(_pause(attempt))
            except _ConnectionFailure:
                self._stale = True  # failover: the next call asks the cluster again
                raise
        raise redis_errors.ClusterError(_redirect_message(self.key, last))

    def _pool(self, ask: tuple[str, int] | None) -> Any:
        node = (
            self.client.get_node(host=ask[0], port=ask[1])
            if ask
            else self.client.get_node_from_key(self.key)
        )
        if node is None:
            raise redis_errors.ClusterDownError(f"no known node serves {ask or self.key}")
        return self.client.get_redis_connection(node).connection_pool

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


class AsyncRouter:
    """The asyncio twin of :class:`Router`."""

    def __init__(self, client: Any, key: str) -> None:
        self.client = client
        self.key = key
        self.cluster = is_cluster(client)
        self._stale = False

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
                node = (
                    self.client.get_node(host=ask[0], port=ask[1])
                    if ask
                    else self.client.get_node_from_key(self.key)
                )
                if node is None:
                    raise redis_errors.ClusterDownError(f"no known node serves {ask or self.key}")
                conn = node.acquire_connection()
                try:
                    await conn.connect()  # failing here, nothing was sent
                    return await self._on(conn, action, ask)
                finally:
                    node.release(conn)
            except redis_errors.MovedError as exc:
                self._stale, ask, last = True, None, exc
            except redis_errors.AskError as exc:
                ask, last = (exc.host, int(exc.port)), exc
            except _REDIRECTS as exc:
                self._stale, ask, last = True, None, exc
                await asyncio.sleep(_pause(attempt))
            except _ConnectionFailure:
                self._stale = True
                raise
        raise redis_errors.ClusterError(_redirect_message(self.key, last))

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
