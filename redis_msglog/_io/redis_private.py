"""Every use of redis-py's private attributes, in one place: a pool's own lists of idle
and in-use connections (taken from and given back directly, see ``_io.pool``), a sync
connection's socket and reply parser (its read timeout put back after a bounded
connect), and an asyncio connection's stream writer (written to when that cannot block)
and the slot of its read timeout (where a maintenance push finds the read's deadline).

These are not redis-py's API and may change in any release: ``tests/contract/test_redis_private.py``
checks that each attribute named here still exists on the installed redis-py's objects,
and :func:`has_expected_layout` keeps the library off a pool laid out differently (it
then uses the pool's public ``get_connection``/``release``).
"""

from __future__ import annotations

from typing import Any

import redis
import redis.asyncio.connection

CHECKED_WITH = ("8.0.0", "8.1.0")
"""The redis-py versions this module's attributes were checked against."""

POOL_ATTRIBUTES = ("_available_connections", "_in_use_connections")
"""Of ``redis.ConnectionPool`` and ``redis.asyncio.ConnectionPool``."""
SYNC_POOL_ATTRIBUTES = ("_lock", "_created_connections")
"""Of ``redis.ConnectionPool`` only (the asyncio pool has no lock to take: one loop)."""
SYNC_CONNECTION_ATTRIBUTES = ("_sock", "_parser")
"""Of a connected ``redis.Connection``."""
PARSER_ATTRIBUTES = {"_HiredisParser": "_socket_timeout", "_RESP2Parser": "_buffer"}
"""Of a connected sync connection's parser, by parser class (hiredis's, or redis-py's)."""
ASYNC_CONNECTION_ATTRIBUTES = ("_writer", "_active_read_timeout")
"""Of a connected ``redis.asyncio.Connection``."""


def has_expected_layout(pool: Any) -> bool:
    """Whether ``pool`` keeps its connections as this module expects."""
    if not isinstance(getattr(pool, "_available_connections", None), list) or not isinstance(
        getattr(pool, "_in_use_connections", None), set
    ):
        return False
    return not isinstance(pool, redis.ConnectionPool) or isinstance(
        getattr(pool, "_created_connections", None), int
    )


# -- sync pools: under the pool's own lock, as its get_connection and release -------


def grab(pool: Any) -> Any | None:
    """An idle connection of ``pool``, or a new one while it is under
    ``max_connections``, moved to its in-use set; ``None`` when all are in use."""
    with pool._lock:
        idle = pool._available_connections
        if idle:
            conn = idle.pop()
        elif pool._created_connections < pool.max_connections:
            conn = pool.make_connection()
        else:
            return None
        pool._in_use_connections.add(conn)
    return conn


def put_back(pool: Any, conn: Any) -> None:
    """Move ``conn`` from ``pool``'s in-use set back to its idle list."""
    with pool._lock:
        pool._in_use_connections.discard(conn)
        pool._available_connections.append(conn)


def restore_read_timeout(conn: Any, timeout: float | None) -> None:
    """Give a sync connection back its own read timeout: its socket keeps the one it was
    connected with, and its reply parser copied it (and puts it back on the socket after
    any read with a timeout of its own, such as the pool's ``can_read`` check)."""
    settimeout = getattr(getattr(conn, "_sock", None), "settimeout", None)
    if settimeout is not None:
        settimeout(timeout)
    parser: Any = getattr(conn, "_parser", None)
    if hasattr(parser, "_socket_timeout"):  # hiredis
        parser._socket_timeout = timeout
    buffer: Any = getattr(parser, "_buffer", None)
    if hasattr(buffer, "socket_timeout"):  # redis-py's own parsers
        buffer.socket_timeout = timeout


# -- asyncio pools and connections --------------------------------------------------


def grab_async(pool: Any) -> Any | None:
    """The asyncio twin of :func:`grab` (no lock: one event loop uses the pool)."""
    # No await from the look to the add: no other task of this loop can take it meanwhile.
    idle = pool._available_connections
    if idle:
        conn = idle.pop()
    elif len(pool._in_use_connections) < pool.max_connections:
        conn = pool.make_connection()
    else:
        return None
    pool._in_use_connections.add(conn)
    return conn


def put_back_async(pool: Any, conn: Any) -> None:
    """The asyncio twin of :func:`put_back`."""
    pool._in_use_connections.discard(conn)
    pool._available_connections.append(conn)


def set_read_deadline(conn: Any, deadline: Any) -> None:
    """Give an asyncio connection the deadline of the read in flight (``None``: none),
    where redis-py keeps its own read timeout: a maintenance push that relaxes the
    connection's timeout reschedules it (``deadline.reschedule(when)``)."""
    if _READ_TIMEOUT_SLOT:  # a redis-py without it: nothing relaxes a read's timeout
        conn._active_read_timeout = deadline


_READ_TIMEOUT_SLOT = hasattr(redis.asyncio.connection.AbstractConnection, "_active_read_timeout")


def stream_writer(conn: Any) -> Any | None:
    """An asyncio connection's ``StreamWriter`` (``None`` when it has none)."""
    return getattr(conn, "_writer", None)
