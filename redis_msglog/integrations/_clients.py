"""What the integrations share: asyncio clients that work from any event loop.

A ``redis.asyncio`` connection belongs to the event loop that opened it: used from
another one (a second ``asyncio.run``, a framework's sync entry point running a loop of
its own, a thread with its own loop) it fails with ``Event loop is closed``, ``attached
to a different loop``, or hangs. So an integration never uses one client on two loops:

- a client made from a URL: one per event loop, made on first use there;
- a client you pass: it serves the first event loop the integration uses it on; on any
  other loop the integration uses a client of its own with the same connection settings
  (:func:`derived_client`), made on first use there.

:class:`LoopLog` is an :class:`~redis_msglog.AsyncMessageLog` whose every call runs on
the running loop's client, for integrations that keep one log object (the Agents SDK
session, the LangChain history and middleware).
"""

from __future__ import annotations

import asyncio
import inspect
import threading
import weakref
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import redis.asyncio
import redis.asyncio.cluster
import redis.connection
from redis.cluster import LoadBalancingStrategy

from .._async import AsyncMessageLog
from .._core.args import check_type, shown
from .._io.routing import AsyncRouter, is_cluster
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


def client_factory(
    url: str, *, cluster: bool = False, redis_kwargs: Mapping[str, Any] | None = None
) -> Callable[[], AsyncClient]:
    """Makes a client for ``url`` (a Redis Cluster's, with ``cluster=True``);
    ``redis_kwargs`` go to its ``from_url``. Bad arguments are typed errors."""
    check_url(url)
    check_type("cluster", cluster, bool, "a bool")
    if redis_kwargs is not None and not isinstance(redis_kwargs, Mapping):
        raise InvalidArgumentError(
            f"redis_kwargs must be a dict, got {type(redis_kwargs).__name__}"
        )
    kwargs = dict(redis_kwargs or {})
    if cluster:
        return lambda: from_url(redis.asyncio.cluster.RedisCluster.from_url, url, kwargs)
    return lambda: from_url(redis.asyncio.Redis.from_url, url, kwargs)


def derived_client(client: AsyncClient) -> AsyncClient:
    """A new client with ``client``'s connection settings, for another event loop.

    ``Redis``: a new pool of the same class, connection class and connection keyword
    arguments (address, credentials or credential provider, TLS, timeouts, protocol,
    ``decode_responses``...) and the same ``max_connections``. ``RedisCluster``: the
    same startup nodes and connection settings. Anything else set on the client object
    itself (response callbacks changed after it was made, say) is not carried over."""
    if is_cluster(client):
        assert isinstance(client, redis.asyncio.cluster.RedisCluster)
        return _derived_cluster(client)
    assert isinstance(client, redis.asyncio.Redis)
    pool = client.connection_pool
    made = type(pool)(
        connection_class=pool.connection_class,
        max_connections=pool.max_connections,
        **pool.connection_kwargs,
    )
    return redis.asyncio.Redis.from_pool(made)  # the new client owns (and closes) its pool


_CLUSTER_PARAMETERS = frozenset(
    inspect.signature(redis.asyncio.cluster.RedisCluster.__init__).parameters
)


def _derived_cluster(client: redis.asyncio.cluster.RedisCluster) -> AsyncClient:
    settings = {k: v for k, v in client.connection_kwargs.items() if k in _CLUSTER_PARAMETERS}
    connection_class = client.connection_kwargs.get("connection_class")
    if isinstance(connection_class, type) and issubclass(
        connection_class, redis.asyncio.connection.SSLConnection
    ):
        settings["ssl"] = True
    nodes = [redis.asyncio.cluster.ClusterNode(n.host, n.port) for n in client.startup_nodes]
    strategy = client.load_balancing_strategy
    if strategy is None and client.read_from_replicas:  # what that (deprecated) flag means
        strategy = LoadBalancingStrategy.ROUND_ROBIN
    if strategy is not None:
        settings["load_balancing_strategy"] = strategy
    return redis.asyncio.cluster.RedisCluster(
        startup_nodes=nodes,
        require_full_coverage=client.nodes_manager.require_full_coverage,
        **settings,
    )


# Which event loop each client given to an integration serves, and the clients derived
# from it for other loops: process-wide, because an integration object per call (the
# LangChain factory ``lambda sid: MessageLogChatHistory(sid, async_redis=client)``)
# shares the client across objects and loops. Weak: a client or loop that goes, goes.
_LOCK = threading.Lock()
_CLAIMED: weakref.WeakKeyDictionary[Any, weakref.ref[asyncio.AbstractEventLoop]] = (
    weakref.WeakKeyDictionary()
)
_DERIVED: weakref.WeakKeyDictionary[
    Any, weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Derived]
] = weakref.WeakKeyDictionary()


class _Derived:
    """A client derived for one loop, and the integration objects using it: the last of
    them to close closes it (one object's ``aclose`` must not cut the others off)."""

    def __init__(self, client: AsyncClient) -> None:
        self.client = client
        self.users: weakref.WeakSet[LoopClients] = weakref.WeakSet()


def _given_client_for(
    client: AsyncClient, loop: asyncio.AbstractEventLoop, user: LoopClients
) -> AsyncClient:
    """``client`` on the first loop an integration used it on, else a derived one."""
    with _LOCK:
        claimed = _CLAIMED.get(client)
        if claimed is None:
            # Claimed once: after that loop ends the client's connections are still its
            # (they cannot serve another), so later loops get clients of their own.
            _CLAIMED[client] = claimed = weakref.ref(loop)
        if claimed() is loop:
            return client
        derived = _DERIVED.setdefault(client, weakref.WeakKeyDictionary())
        made = derived.get(loop)
        if made is None:
            made = derived[loop] = _Derived(derived_client(client))
        made.users.add(user)
        return made.client


class LoopClients:
    """One asyncio client per running event loop (see the module docstring).

    Given a client: that client on the first loop any integration uses it on, a
    :func:`derived_client` on every other (shared by every integration object given the
    same client). Given a function making one (what ``from_url`` passes): one made at
    once, serving the first loop that asks, and one more per other loop. Thread-safe:
    loops in several threads may ask at once."""

    def __init__(self, client: AsyncClient | Callable[[], AsyncClient]) -> None:
        if not callable(client) and not isinstance(client, AsyncClient):
            raise InvalidArgumentError(
                "needs a redis.asyncio client (Redis or RedisCluster) or a function making "
                f"one, got {type(client).__name__}"
            )
        self._given: AsyncClient | None = None if callable(client) else client
        self._factory: Callable[[], AsyncClient] | None = client if callable(client) else None
        self.first: AsyncClient = client if self._given is None else self._given  # type: ignore[assignment]
        if self._factory is not None:
            self.first = self._factory()
        self._first_loop: weakref.ref[asyncio.AbstractEventLoop] | None = None
        self._made: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, AsyncClient] = (
            weakref.WeakKeyDictionary()
        )

    def get(self) -> AsyncClient:
        """The client to use on the running event loop."""
        loop = asyncio.get_running_loop()
        if self._given is not None:
            return _given_client_for(self._given, loop, self)
        assert self._factory is not None
        with _LOCK:
            if self._first_loop is None:
                self._first_loop = weakref.ref(loop)  # claimed once, as a given client
            if self._first_loop() is loop:
                return self.first
            client = self._made.get(loop)
            if client is None:
                client = self._made[loop] = self._factory()
            return client

    async def aclose(self) -> None:
        """Close the clients made for the running loop (a client given is the caller's;
        the one derived from it for this loop is closed once no other integration object
        given the same client uses it)."""
        loop = asyncio.get_running_loop()
        with _LOCK:
            made, first = None, None
            if self._given is not None:
                derived = _DERIVED.get(self._given)
                shared = None if derived is None else derived.get(loop)
                if shared is not None:
                    shared.users.discard(self)
                    if not shared.users:
                        made = derived.pop(loop).client if derived is not None else None
            else:
                made = self._made.pop(loop, None)
                on_this_loop = self._first_loop is not None and self._first_loop() is loop
                first = self.first if on_this_loop else None
        for client in (made, first):
            if client is not None:
                await client.aclose()


class LoopLog(AsyncMessageLog):
    """An :class:`~redis_msglog.AsyncMessageLog` usable from any event loop: each call
    runs on the running loop's client of ``clients`` (outside a loop, the first one)."""

    def __init__(self, clients: LoopClients, conversation: str, **options: Any) -> None:
        self._clients = clients
        self._routers: weakref.WeakKeyDictionary[Any, AsyncRouter] = weakref.WeakKeyDictionary()
        super().__init__(clients.first, conversation, **options)

    @property
    def _redis(self) -> Any:
        try:
            return self._clients.get()
        except RuntimeError:  # no running event loop: a synchronous attribute access
            return self._clients.first

    @_redis.setter
    def _redis(self, client: Any) -> None:
        pass  # AsyncMessageLog's constructor sets it: the clients decide per loop

    @property
    def _router(self) -> AsyncRouter:
        client = self._redis
        router = self._routers.get(client)
        if router is None:
            router = self._routers.setdefault(client, AsyncRouter(client, self._core.keys.stream))
        return router

    @_router.setter
    def _router(self, router: AsyncRouter) -> None:
        pass
