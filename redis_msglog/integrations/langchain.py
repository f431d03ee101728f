"""LangChain on the message log (``pip install 'redis-msglog[langchain]'``).

- :class:`MessageLogChatHistory`: a ``BaseChatMessageHistory`` (for
  ``RunnableWithMessageHistory`` and the code written for it), sync and native asyncio.
  Messages are stored losslessly (``from_langchain``/``to_langchain_messages``: tool
  calls and results, ids, content blocks, metadata). The first read pins a snapshot
  that the object serves until it writes: ``RunnableWithMessageHistory`` reads the
  history twice in one invocation (before the chain, and after it to cut this turn's
  input from the history it prepended), so an append by another worker in between can
  no longer make it drop this turn's input. After a write the next read is fresh, so
  the object sees its own appends (and everyone else's).
- :class:`MessageLogMiddleware`: a LangChain 1.x ``AgentMiddleware`` for
  ``create_agent`` that mirrors the agent's messages into the log conversation named by
  the thread id, each once (keyed by the message id), as the steps produce them; with
  ``hydrate=True`` it fills a thread that has no history with the log's.

This module imports langchain-core (and, for the middleware, langchain and langgraph);
``redis_msglog`` itself never does.
"""

from __future__ import annotations

import contextlib
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.cluster

from .._core.args import missing_extra

try:
    from langchain.agents.middleware.types import AgentMiddleware, AgentState
    from langchain_core.chat_history import BaseChatMessageHistory
    from langchain_core.messages import BaseMessage, RemoveMessage
    from langgraph.config import get_config
    from langgraph.graph.message import REMOVE_ALL_MESSAGES
    from langgraph.runtime import Runtime
except ModuleNotFoundError as exc:  # the extra is not installed
    raise missing_extra("langchain", exc) from exc

from .._async import AsyncMessageLog
from .._core.args import check_type
from .._sync import MessageLog
from ..errors import IdempotencyConflictError, InvalidArgumentError
from ..formats.langchain import from_langchain, to_langchain_messages
from ..models import StoredMessage
from ._clients import LoopClients, LoopLog, client_factory, from_url
from ._log_options import integration_options

__all__ = ["MessageLogChatHistory", "MessageLogMiddleware"]

SyncClient = redis.Redis | redis.cluster.RedisCluster
AsyncClient = redis.asyncio.Redis | redis.asyncio.cluster.RedisCluster


def _clients(
    url: str, cluster: bool, redis_kwargs: dict[str, Any] | None
) -> tuple[SyncClient, Callable[[], AsyncClient]]:
    """A sync client for ``url``, and a function making asyncio ones (one per loop)."""
    check_type("cluster", cluster, bool, "a bool")
    sync: SyncClient = (
        from_url(redis.cluster.RedisCluster.from_url, url, redis_kwargs)
        if cluster
        else from_url(redis.Redis.from_url, url, redis_kwargs)
    )
    return sync, client_factory(url, cluster=cluster, redis_kwargs=redis_kwargs)


async def _close(owned: SyncClient | None, clients: LoopClients | None) -> None:
    """Close the sync client ``from_url`` made, and the asyncio clients made for the
    running loop (``from_url``'s, or the one derived from a client given)."""
    if owned is not None:
        owned.close()
    if clients is not None:
        await clients.aclose()


def _need(client: Any, kind: str) -> Any:
    if client is None:
        raise InvalidArgumentError(
            f"this call needs a {kind} Redis client: pass one, or use from_url()"
        )
    return client


class MessageLogChatHistory(BaseChatMessageHistory):
    """A LangChain chat history whose messages are the log conversation ``session_id``.

    Args:
        session_id: the conversation id.
        redis: a ``redis.Redis`` or ``redis.cluster.RedisCluster`` client, for the sync
            methods (``messages``, ``add_messages``, ``clear``).
        async_redis: a ``redis.asyncio`` client (or cluster client), for the async ones
            (``aget_messages``, ``aadd_messages``, ``aclear``), or a function making one.
            They work from any event
            loop: the client serves the first loop they run on, and every other loop
            gets a client with its connection settings (docs/integrations.md).
        **log_options: options of :class:`~redis_msglog.MessageLog` (``prefix``,
            ``ttl``, ``durability``...).

    ``.log`` (sync) and ``.alog`` (asyncio) are the underlying logs. Reads are pinned
    to the first read's snapshot until this object writes (or :meth:`refresh`): see the
    module docstring.
    """

    def __init__(
        self,
        session_id: str,
        redis: SyncClient | None = None,
        *,
        async_redis: AsyncClient | Callable[[], AsyncClient] | None = None,
        **log_options: Any,
    ) -> None:
        if redis is None and async_redis is None:
            raise InvalidArgumentError(
                "pass a Redis client (redis=), an asyncio one (async_redis=), or both"
            )
        log_options = integration_options(log_options)
        self.session_id = session_id
        self.log: MessageLog | None = (
            None if redis is None else MessageLog(redis, session_id, **log_options)
        )
        self._async_clients = None if async_redis is None else LoopClients(async_redis)
        self.alog: AsyncMessageLog | None = (
            None
            if self._async_clients is None
            else LoopLog(self._async_clients, session_id, **log_options)
        )
        self._snapshot: list[BaseMessage] | None = None
        self._owned: SyncClient | None = None

    @classmethod
    def from_url(
        cls,
        session_id: str,
        *,
        url: str,
        cluster: bool = False,
        redis_kwargs: dict[str, Any] | None = None,
        **log_options: Any,
    ) -> MessageLogChatHistory:
        """A history with a sync client and asyncio clients (one per event loop) made from
        ``url`` (``cluster=True`` for a Redis Cluster node); ``redis_kwargs`` go to the
        clients' ``from_url``."""
        sync_client, make_async = _clients(url, cluster, redis_kwargs)
        history = cls(session_id, sync_client, async_redis=make_async, **log_options)
        history._owned = sync_client
        return history

    async def aclose(self) -> None:
        """Close the clients :meth:`from_url` made (the sync one, and the running event
        loop's asyncio ones) or derived for this loop from an asyncio client you passed
        (clients you passed are yours)."""
        await _close(self._owned, self._async_clients)
        self._owned = None

    def refresh(self) -> None:
        """Drop the pinned snapshot: the next read reads the log again."""
        self._snapshot = None

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        """The history (the pinned snapshot, read at the first access)."""
        if self._snapshot is None:
            log: MessageLog = _need(self.log, "sync")
            self._snapshot = to_langchain_messages(log.all())
        return list(self._snapshot)

    async def aget_messages(self) -> list[BaseMessage]:
        """The history, read with the asyncio client (the same pinned snapshot)."""
        if self._snapshot is None:
            log: AsyncMessageLog = _need(self.alog, "asyncio")
            self._snapshot = to_langchain_messages(await log.all())
        return list(self._snapshot)

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Append the messages with one atomic ``append_many``; unpins the snapshot."""
        log: MessageLog = _need(self.log, "sync")
        converted = from_langchain(list(messages))  # bad input raises before any I/O
        self._snapshot = None
        log.append_many(converted)

    async def aadd_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Append the messages with one atomic ``append_many`` (asyncio)."""
        log: AsyncMessageLog = _need(self.alog, "asyncio")
        converted = from_langchain(list(messages))
        self._snapshot = None
        await log.append_many(converted)

    def clear(self) -> None:
        """Empty the history with the log's ``clear()`` (an entry; nothing is deleted)."""
        log: MessageLog = _need(self.log, "sync")
        self._snapshot = None
        log.clear()

    async def aclear(self) -> None:
        """Empty the history with the log's ``clear()`` (asyncio)."""
        log: AsyncMessageLog = _need(self.alog, "asyncio")
        self._snapshot = None
        await log.clear()


# -- the agent middleware ---------------------------------------------------------------

_MAX_THREADS = 4096  # threads whose mirrored ids one middleware remembers


class MessageLogMiddleware(AgentMiddleware[AgentState[Any], Any, Any]):
    """Mirrors a ``create_agent`` agent's messages into the log, the conversation being
    the run's thread id (``config={"configurable": {"thread_id": ...}}``).

    Before each model call, after it, and after the agent, the messages of the state
    that are not in the log yet are appended, in order, each with the idempotency key
    ``"lc:<message id>"``: once each, even when two workers or a retried step mirror
    the same message. Which ids a thread has in the log is read once per process (then
    remembered for the last 4096 threads). The agent's state is never changed, except
    by ``hydrate``.

    Args:
        redis: a sync client (``redis.Redis`` or ``RedisCluster``) for ``invoke``.
        async_redis: an asyncio client for ``ainvoke``/``astream`` (or a function making
            one), used from any event loop as :class:`MessageLogChatHistory` does.
        hydrate: before the agent runs, a thread whose messages are all new to the log
            while the log has some gets the log's history put before them (a worker
            without the thread's checkpoint continues the conversation).
        **log_options: options of :class:`~redis_msglog.MessageLog`.
    """

    def __init__(
        self,
        redis: SyncClient | None = None,
        *,
        async_redis: AsyncClient | Callable[[], AsyncClient] | None = None,
        hydrate: bool = False,
        **log_options: Any,
    ) -> None:
        if redis is None and async_redis is None:
            raise InvalidArgumentError(
                "pass a Redis client (redis=), an asyncio one (async_redis=), or both"
            )
        log_options = integration_options(log_options)
        check_type("hydrate", hydrate, bool, "a bool")
        super().__init__()
        self._redis = redis
        self._async_clients = None if async_redis is None else LoopClients(async_redis)
        self.hydrate = hydrate
        self._options = log_options
        self._seen: OrderedDict[str, set[str]] = OrderedDict()
        self._logs: OrderedDict[tuple[str, bool], MessageLog | AsyncMessageLog] = OrderedDict()
        self._lock = threading.Lock()
        self._owned: SyncClient | None = None

    @classmethod
    def from_url(
        cls,
        *,
        url: str,
        cluster: bool = False,
        redis_kwargs: dict[str, Any] | None = None,
        hydrate: bool = False,
        **log_options: Any,
    ) -> MessageLogMiddleware:
        """A middleware with a sync and an asyncio client made from ``url``."""
        sync_client, make_async = _clients(url, cluster, redis_kwargs)
        middleware = cls(sync_client, async_redis=make_async, hydrate=hydrate, **log_options)
        middleware._owned = sync_client
        return middleware

    async def aclose(self) -> None:
        """Close the clients :meth:`from_url` made (the sync one, and the running event
        loop's asyncio ones) or derived for this loop from an asyncio client you passed
        (clients you passed are yours)."""
        await _close(self._owned, self._async_clients)
        self._owned = None

    def log(self, thread_id: str) -> MessageLog:
        """The log of a thread (sync)."""
        log = self._cached(thread_id, False)
        assert isinstance(log, MessageLog)
        return log

    def alog(self, thread_id: str) -> AsyncMessageLog:
        """The log of a thread (asyncio)."""
        log = self._cached(thread_id, True)
        assert isinstance(log, AsyncMessageLog)
        return log

    def _cached(self, thread_id: str, use_async: bool) -> MessageLog | AsyncMessageLog:
        key = (thread_id, use_async)
        with self._lock:
            log = self._logs.get(key)
            if log is not None:
                self._logs.move_to_end(key)
                return log
        if use_async:
            log = LoopLog(_need(self._async_clients, "asyncio"), thread_id, **self._options)
        else:
            log = MessageLog(_need(self._redis, "sync"), thread_id, **self._options)
        with self._lock:
            log = self._logs.setdefault(key, log)
            while len(self._logs) > _MAX_THREADS:
                self._logs.popitem(last=False)
        return log

    # -- hooks ------------------------------------------------------------------------

    def before_agent(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any] | None:
        if not self.hydrate:
            return None
        thread = _thread_id(runtime)
        rows = self.log(thread).all()
        return self._hydrated(thread, rows, state)

    async def abefore_agent(
        self, state: AgentState[Any], runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        if not self.hydrate:
            return None
        thread = _thread_id(runtime)
        rows = await self.alog(thread).all()
        return self._hydrated(thread, rows, state)

    def before_model(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any] | None:
        self._mirror(state, runtime)
        return None

    async def abefore_model(
        self, state: AgentState[Any], runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        await self._amirror(state, runtime)
        return None

    def after_model(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any] | None:
        self._mirror(state, runtime)
        return None

    async def aafter_model(
        self, state: AgentState[Any], runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        await self._amirror(state, runtime)
        return None

    def after_agent(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any] | None:
        self._mirror(state, runtime)
        return None

    async def aafter_agent(
        self, state: AgentState[Any], runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        await self._amirror(state, runtime)
        return None

    # -- mirroring --------------------------------------------------------------------

    def _mirror(self, state: AgentState[Any], runtime: Runtime[Any]) -> None:
        thread = _thread_id(runtime)
        log = self.log(thread)
        seen = self._known(thread)
        if seen is None:
            seen = self._remember(thread, log.all())
        for message in self._new(state, seen):
            # A conflict: a message with this id is in the log already (edited since).
            with contextlib.suppress(IdempotencyConflictError):
                log.append_many(from_langchain([message]), idempotency_key=_key(message))
            seen.add(str(message.id))

    async def _amirror(self, state: AgentState[Any], runtime: Runtime[Any]) -> None:
        thread = _thread_id(runtime)
        log = self.alog(thread)
        seen = self._known(thread)
        if seen is None:
            seen = self._remember(thread, await log.all())
        for message in self._new(state, seen):
            with contextlib.suppress(IdempotencyConflictError):
                await log.append_many(from_langchain([message]), idempotency_key=_key(message))
            seen.add(str(message.id))

    @staticmethod
    def _new(state: AgentState[Any], seen: set[str]) -> list[BaseMessage]:
        return [m for m in state.get("messages", []) if m.id is not None and m.id not in seen]

    def _known(self, thread: str) -> set[str] | None:
        with self._lock:
            seen = self._seen.get(thread)
            if seen is not None:
                self._seen.move_to_end(thread)
            return seen

    def _remember(self, thread: str, rows: list[StoredMessage]) -> set[str]:
        ids = {_row_id(row) for row in rows}
        with self._lock:
            seen = self._seen.setdefault(thread, ids)
            seen |= ids
            while len(self._seen) > _MAX_THREADS:
                self._seen.popitem(last=False)
        return seen

    def _hydrated(
        self, thread: str, rows: list[StoredMessage], state: AgentState[Any]
    ) -> dict[str, Any] | None:
        seen = self._remember(thread, rows)
        current = list(state.get("messages", []))
        if not rows or any(m.id in seen for m in current):
            return None  # nothing to fill in, or the thread has its history
        history = to_langchain_messages(rows)
        for row, message in zip(rows, history, strict=True):
            message.id = _row_id(row)  # rows written without an id get a stable one
        return {"messages": [RemoveMessage(id=REMOVE_ALL_MESSAGES), *history, *current]}


def _row_id(row: StoredMessage) -> str:
    return row.id if row.id is not None else f"msglog-{row.seq}"


def _key(message: BaseMessage) -> str:
    return f"lc:{message.id}"


def _thread_id(runtime: Runtime[Any]) -> str:
    info = getattr(runtime, "execution_info", None)
    thread = getattr(info, "thread_id", None)
    if thread is None:
        try:
            thread = get_config().get("configurable", {}).get("thread_id")
        except RuntimeError:
            thread = None
    if thread is None:
        raise InvalidArgumentError(
            "MessageLogMiddleware needs a thread id: invoke the agent with "
            'config={"configurable": {"thread_id": ...}}'
        )
    return str(thread)
