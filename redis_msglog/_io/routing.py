"""Which server connection a conversation's commands go to.

With a plain client that is its connection pool. With a Redis Cluster client it is the
node owning the conversation's hash slot (every key of a conversation shares it), found in
the client's slot table and followed through ``MOVED`` (slot moved: refresh the table),
``ASK`` (slot being migrated: ``ASKING`` before each command sent to the target). Redis
answers these without running the command, so re-sending it is safe even for an append.
``TRYAGAIN`` (a multi-key command during a migration), ``CLUSTERDOWN`` (failover in
progress) and lost connections are raised to the caller, whose retry policy decides how
long to wait for the cluster (:data:`UNAVAILABLE`).

The library sends on connections it takes from these pools itself (instead of calling
``execute_command``) so that appends are never re-sent by redis-py's retry machinery and
stream replies come back raw; how it takes them (waiting for a busy pool, connecting once
within the call's deadline) is in ``_io.pool``.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar, cast

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.cluster
from redis import exceptions as redis_errors
from redis.utils import HIREDIS_AVAILABLE

from .._core.retry import redirect_pause
from .._core.steps import Command
from . import pool as _pool

T = TypeVar("T")

MAX_REDIRECTS = 16
NoPermission = redis_errors.NoPermissionError

UNAVAILABLE = (
    redis_errors.ConnectionError,
    redis_errors.TimeoutError,
    redis_errors.ClusterError,  # CLUSTERDOWN, or redirections that never settled
    redis_errors.TryAgainError,
)
"""Failures that leave a command unrun (no connection carried it, or the cluster refused
it: failover, slot migration), so re-sending is safe. A lost reply after an append was
sent is the exception: it arrives as ``core.ReplyLost`` and is handled first."""


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


_process = [os.getpid()]  # this process's id, kept by a fork hook (no syscall per call)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=lambda: _process.__setitem__(0, os.getpid()))


class _Routing:
    """What both routers share: the client, the key, and how to read a failed try."""

    def __init__(self, client: Any, key: str) -> None:
        self.client = client
        self.key = key
        self.cluster = is_cluster(client)
        self._stale = False  # the slot table may be out of date: refresh before routing
        self._pool = None if self.cluster else _pool.borrowable_pool(client)

    def _node(self, ask: tuple[str, int] | None) -> Any:
        node = (
            self.client.get_node(host=ask[0], port=ask[1])
            if ask
            else self.client.get_node_from_key(self.key)
        )
        if node is None:
            raise redis_errors.ClusterDownError(f"no known node serves {ask or self.key}")
        return node

    def _redirect(self, exc: BaseException) -> tuple[str, int] | None:
        """Where the next try goes: an ``ASK`` target, or (``None``) the slot owner after
        a ``MOVED``. Anything else is re-raised, after marking the slot table for a
        refresh if it may be out of date (a failover, a migration, no node reachable)."""
        if isinstance(exc, redis_errors.MovedError):  # before AskError: it is a subclass
            self._stale = True
            return None
        if isinstance(exc, redis_errors.AskError):
            return exc.host, int(exc.port)
        if isinstance(exc, (*UNAVAILABLE, OSError, redis_errors.RedisClusterException)):
            self._stale = True
        if isinstance(exc, redis_errors.RedisClusterException):
            # Not a RedisError: the slot table could not be fetched from any node; if
            # because the login was refused, that is the failure (no outage to wait out).
            if isinstance(exc.__cause__, (redis_errors.AuthenticationError, NoPermission)):
                raise exc.__cause__
            raise redis_errors.ConnectionError(f"no cluster node reachable: {exc}") from exc
        raise exc

    def _give_up(self, last: BaseException | None) -> redis_errors.ClusterError:
        return redis_errors.ClusterError(
            f"gave up on {self.key} after {MAX_REDIRECTS} cluster redirections: {last}"
        )


class Router(_Routing):
    """Connections for one conversation, from a ``redis.Redis`` or ``RedisCluster``."""

    def __init__(self, client: Any, key: str) -> None:
        super().__init__(client, key)
        self._waiting = None if self._pool is None else _pool.waiting_for(self._pool)

    def run(self, action: Callable[[Any, bool], T], within: float) -> T:
        """``action(connection, asking)`` on the owning node, following cluster
        redirections; ``asking`` is true on the target of an ``ASK``, where every command
        must be preceded by ``ASKING`` (it covers only the next command). A connection
        failure is raised to the caller (it decides whether to re-send) after marking the
        slot table for a refresh. ``within``: how long a connect, or a wait for a busy
        pool, may take (see ``_io.pool``)."""
        if not self.cluster:
            pool, waiting = self._pool, self._waiting
            if pool is None or waiting is None:
                return self._on(self.client.connection_pool, action, False)
            if pool.pid != _process[0] or waiting.pid != _process[0]:
                # After a fork: redis-py's own call resets the pool; a new waiting line.
                self._waiting = _pool.waiting_for(pool)
                return self._on(pool, action, False)
            return self._borrowed(pool, waiting, action, within)
        ask: tuple[str, int] | None = None
        last: BaseException | None = None
        for redirect in range(MAX_REDIRECTS):
            try:
                if self._stale:
                    self.client.nodes_manager.initialize()
                    self._stale = False
                pool = self.client.get_redis_connection(self._node(ask)).connection_pool
                if _pool.is_plain_pool(pool) and pool.pid == _process[0]:
                    return self._borrowed(pool, _pool.waiting_for(pool), action, within, ask)
                return self._on(pool, action, ask is not None)
            except (redis_errors.RedisError, redis_errors.RedisClusterException, OSError) as exc:
                ask, last = self._redirect(exc), exc
                time.sleep(redirect_pause(redirect))
        raise self._give_up(last)

    @staticmethod
    def _borrowed(
        pool: Any,
        waiting: _pool.Waiting,
        action: Callable[[Any, bool], T],
        within: float,
        ask: tuple[str, int] | None = None,
    ) -> T:
        """``action`` on a connection taken from ``pool`` (see ``_io.pool.borrowable_pool``),
        disconnected if it failed, then given back."""
        conn = _pool.take(pool, waiting, within)  # failing here, nothing was sent
        try:
            return action(conn, ask is not None)
        except redis_errors.ResponseError:
            raise  # the server answered: the connection is fine
        except BaseException:
            conn.disconnect()  # a reply may be left unread: never hand this on
            raise
        finally:
            _pool.give_back(pool, waiting, conn)

    @staticmethod
    def _on(pool: Any, action: Callable[[Any, bool], T], asking: bool) -> T:
        conn = pool.get_connection()  # connects: a failure here means nothing was sent
        try:
            return action(conn, asking)
        except redis_errors.ResponseError:
            raise  # the server answered: the connection is fine
        except BaseException:
            conn.disconnect()  # a reply may be left unread: never hand this on
            raise
        finally:
            pool.release(conn)


class AsyncRouter(_Routing):
    """The asyncio twin of :class:`Router`."""

    def __init__(self, client: Any, key: str) -> None:
        super().__init__(client, key)
        self._waiting = None if self._pool is None else _pool.async_waiting_for(self._pool)

    async def run(self, action: Callable[[Any, bool], Awaitable[T]], within: float) -> T:
        if not self.cluster:
            pool, waiting = self._pool, self._waiting
            if pool is not None and waiting is not None:
                conn = await _pool.take_async(pool, waiting, within)  # failing: nothing sent
                try:  # _on's, inlined: a coroutine layer less on every call's path
                    return await action(conn, False)
                except redis_errors.ResponseError:
                    raise
                except BaseException:
                    await conn.disconnect(nowait=True)  # the stream is unusable
                    raise
                finally:
                    _pool.give_back_async(pool, waiting, conn)
            pool = self.client.connection_pool
            conn = await pool.get_connection()
            try:
                return await self._on(conn, action, False)
            finally:
                await pool.release(conn)
        ask: tuple[str, int] | None = None
        last: BaseException | None = None
        for redirect in range(MAX_REDIRECTS):
            try:
                await self.client.initialize()  # a no-op once the client knows the cluster
                if self._stale:
                    await self.client.nodes_manager.initialize()
                    self._stale = False
                return await self._on_node(self._node(ask), action, within, ask is not None)
            except (redis_errors.RedisError, redis_errors.RedisClusterException, OSError) as exc:
                ask, last = self._redirect(exc), exc
                await asyncio.sleep(redirect_pause(redirect))
        raise self._give_up(last)

    async def _on_node(
        self, node: Any, action: Callable[[Any, bool], Awaitable[T]], within: float, asking: bool
    ) -> T:
        """``action`` on a connection of a cluster node, waiting while all of the node's
        connections (its ``max_connections``) are in use."""
        waiting = _pool.node_waiting_for(self.client, node)
        conn = _acquire(node) if not waiting.futures else None
        if conn is None:
            conn = await _pool.wait_async(lambda: _acquire(node), waiting, within, node)
        try:
            if not conn.is_connected:  # failing here, nothing was sent
                await _pool.connect_within_async(conn, within)
            return await self._on(conn, action, asking)
        finally:
            node.release(conn)
            if waiting.futures:
                waiting.wake_one()

    @staticmethod
    async def _on(conn: Any, action: Callable[[Any, bool], Awaitable[T]], asking: bool) -> T:
        try:
            return await action(conn, asking)
        except redis_errors.ResponseError:
            raise
        except BaseException:
            # Cancelled or failed mid-reply: the connection's stream is unusable.
            await conn.disconnect(nowait=True)
            raise


def _acquire(node: Any) -> Any | None:
    """A connection of an asyncio cluster node, or ``None`` when all are in use."""
    try:
        return node.acquire_connection()
    except redis_errors.MaxConnectionsError:
        return None


_hiredis_pack: Callable[[Command], bytes] | None = None
if HIREDIS_AVAILABLE:
    import hiredis

    _hiredis_pack = cast(Callable[[Command], bytes], hiredis.pack_command)


def pack(conn: Any, commands: Sequence[Command], split: int = 0) -> list[bytes]:
    """``conn.pack_commands(commands)``, the same bytes, in C: redis-py's asyncio client
    packs in Python, argument by argument (~13 us for an append's 18 arguments, measured,
    against ~2 us here), and its sync one adds a Python pass per argument. Only for the
    connection's default encoding (UTF-8, strict), the one hiredis writes; anything
    hiredis refuses (a bool, ``None``) goes to redis-py for its own error. ``split``: one
    command whose first ``split`` arguments are packed from a cache (an append's first
    try: see :func:`pack_split`)."""
    encoder = conn.encoder
    if (
        _hiredis_pack is not None
        and encoder.encoding in _UTF8
        and encoder.encoding_errors == "strict"
    ):
        if split and len(commands) == 1:
            packed = pack_split(commands[0], split)
            if packed is not None:
                return [packed]
        try:
            if len(commands) == 1:
                return [_hiredis_pack(commands[0])]
            return [b"".join([_hiredis_pack(command) for command in commands])]
        except (TypeError, ValueError):  # UnicodeEncodeError is a ValueError
            pass
    by_redis_py: list[bytes] = conn.pack_commands(commands)
    return by_redis_py


_UTF8 = frozenset({"utf-8", "utf8", "UTF-8", "UTF8"})


_HEADS: dict[Command, bytes] = {}  # a command's first arguments, packed (hiredis)
_MAX_HEADS = 256


def pack_split(command: Command, split: int) -> bytes | None:
    """``command`` packed as :func:`pack` packs it (hiredis, UTF-8), its first ``split``
    arguments from a cache: an append's ``EVALSHA``, its script, its keys and most of its
    arguments are the same call after call, and hiredis spends ~1,300 instructions an
    argument (a ``sprintf`` and a Python conversion each: ~21,000 an append, callgrind).
    ``None``: an argument hiredis refuses (:func:`pack` then hands it to redis-py)."""
    if _hiredis_pack is None:
        return None
    head = command[:split]
    packed_head = _HEADS.get(head)
    try:
        if packed_head is None:
            packed = _hiredis_pack(head)
            packed_head = packed[packed.index(b"\r\n") + 2 :]  # its arguments, not its count
            if len(_HEADS) >= _MAX_HEADS:
                _HEADS.clear()
            _HEADS[head] = packed_head
        tail = _hiredis_pack(command[split:])
    except (TypeError, ValueError):  # UnicodeEncodeError is a ValueError
        return None
    return b"*%d\r\n%b%b" % (len(command), packed_head, tail[tail.index(b"\r\n") + 2 :])


def asking_before_each(commands: Sequence[Command], asking: bool) -> list[Command]:
    """``commands``, each preceded by ``ASKING`` on the target of an ``ASK`` redirection
    (the importing node serves only the command right after it), for one packed write.
    Read the replies back with :func:`without_asking`."""
    if not asking:
        return list(commands)
    return [part for command in commands for part in (("ASKING",), command)]


def without_asking(replies: list[Any], asking: bool) -> list[Any]:
    """The replies to the caller's commands, the ``ASKING`` ones (``OK``) dropped."""
    return replies[1::2] if asking else replies
