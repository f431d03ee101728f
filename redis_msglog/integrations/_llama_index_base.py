"""LlamaIndex's ``BaseChatStore`` on the message log: :class:`MessageLogBaseChatStore`, the
store ``ChatMemoryBuffer``, ``ChatSummaryMemoryBuffer`` and every memory that takes a
``chat_store`` of that interface (the slot ``RedisChatStore`` fills) read and write.

Every call is at most one write of the log, atomic; a call that names a position
(``delete_message(key, idx)``, ``add_message(key, message, idx)``) is a compare-and-set
on the log's last seq read with the view, retried when another writer got in between,
so it never removes or inserts at a position that moved. The mapping
(docs/integrations.md, "``BaseChatStore``"):

- ``get_messages``: ``all()`` (the visible view);
- ``add_message``: one ``append_many``; with ``idx``: ``replace()`` of the view with the
  message inserted (compare-and-set);
- ``set_messages``: one ``replace()`` (``[]``: ``clear()``);
- ``delete_messages``: one ``clear()`` (compare-and-set, so what it returns is what it
  hid); ``delete_message(key, idx)``: ``retract()`` of the ``idx``-th visible message
  (0-based, as ``RedisChatStore``); ``delete_last_message``: the log's atomic ``pop()``;
- ``get_keys``: the store's scope index (:class:`~redis_msglog.Directory`), no ``SCAN``.

Nothing is deleted: hidden messages stay in the physical log until ``ttl``.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

import redis
import redis.cluster
from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.storage.chat_store.base import BaseChatStore

from .._async import AsyncDirectory, AsyncMessageLog
from .._core.lifecycle.scope import check_scope
from .._core.stored.keys import ConversationKeys
from .._sync import Directory, MessageLog
from ..errors import InvalidArgumentError, SeqConflictError
from ..models import StoredMessage
from ._clients import AsyncClient, LoopClients, LoopLog, client_factory, from_url
from ._llama_index_messages import from_llama_index, to_llama_index
from ._log_options import integration_options

__all__ = ["DEFAULT_SCOPE", "MessageLogBaseChatStore"]

SyncClient = redis.Redis | redis.cluster.RedisCluster
DEFAULT_SCOPE = ("llama-index",)
"""The scope a store's conversations are registered in when none is given."""

L = TypeVar("L")
_KEPT_LOGS = 1024


class _Logs(Generic[L]):
    """Log objects per key, the newest ``_KEPT_LOGS``: a scoped log registers its
    conversation before its first write (two round trips), so a store keeps its logs
    instead of making one per call."""

    def __init__(self, make: Callable[[str], L]) -> None:
        self._make = make
        self._kept: OrderedDict[str, L] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str) -> L:
        with self._lock:
            log = self._kept.pop(key, None)
            if log is None:
                log = self._make(key)
            self._kept[key] = log
            while len(self._kept) > _KEPT_LOGS:
                self._kept.popitem(last=False)
            return log


def _need(client: Any, kind: str) -> Any:
    if client is None:
        raise InvalidArgumentError(
            f"this call needs a {kind} Redis client: pass one, or use from_url()"
        )
    return client


def _inserted(rows: Sequence[StoredMessage], idx: int, message: ChatMessage) -> list[Any]:
    """The view's messages with ``message`` put at ``idx`` (as ``list.insert`` puts it)."""
    messages: list[Any] = [row.as_message() for row in rows]
    messages.insert(idx, from_llama_index(message))
    return messages


class MessageLogBaseChatStore(BaseChatStore):
    """A LlamaIndex ``BaseChatStore`` whose keys are log conversations (module docstring).

    Args:
        redis: a ``redis.Redis`` or ``redis.cluster.RedisCluster`` client, for the sync
            methods (``get_messages``, ``add_message``..., what ``ChatMemoryBuffer.get``
            and ``put`` call).
        async_redis: a ``redis.asyncio`` client (or cluster client), or a function making
            one, for the async ones (``aget_messages``, ``async_add_message``...); it
            works from any event loop (docs/integrations.md).
        prefix: the log's key prefix.
        scope: the scope every conversation of the store is registered in (default
            ``("llama-index",)``), which ``get_keys`` lists without ``SCAN``. A key that
            already exists in the log without this scope cannot be written by the store
            (:class:`~redis_msglog.ScopeMismatchError`).
        ttl: as ``RedisChatStore`` takes it (int seconds), or a ``timedelta``.
        **log_options: the other options of :class:`~redis_msglog.MessageLog`.
    """

    prefix: str = "msglog"
    scope: tuple[str, ...] = DEFAULT_SCOPE

    _sync: SyncClient | None = PrivateAttr(default=None)
    _owned: SyncClient | None = PrivateAttr(default=None)
    _clients: LoopClients | None = PrivateAttr(default=None)
    _logs: _Logs[MessageLog] = PrivateAttr()
    _alogs: _Logs[AsyncMessageLog] = PrivateAttr()

    def __init__(
        self,
        redis: SyncClient | None = None,
        *,
        async_redis: AsyncClient | Callable[[], AsyncClient] | None = None,
        prefix: str = "msglog",
        scope: Sequence[str] = DEFAULT_SCOPE,
        **log_options: Any,
    ) -> None:
        if redis is None and async_redis is None:
            raise InvalidArgumentError(
                "pass a Redis client (redis=), an asyncio one (async_redis=), or both"
            )
        ConversationKeys.build(prefix, "x")  # validates the prefix
        checked = check_scope(scope)
        options = integration_options({**log_options, "prefix": prefix, "scope": checked})
        super().__init__(prefix=prefix, scope=checked)
        self._sync = redis
        self._clients = None if async_redis is None else LoopClients(async_redis)
        clients = self._clients
        self._logs = _Logs(lambda key: MessageLog(_need(redis, "sync"), key, **options))
        self._alogs = _Logs(lambda key: LoopLog(_need(clients, "asyncio"), key, **options))

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        cluster: bool = False,
        redis_kwargs: dict[str, Any] | None = None,
        **options: Any,
    ) -> MessageLogBaseChatStore:
        """A store with a sync client and asyncio clients (one per event loop) made from
        ``url`` (``cluster=True`` for a Redis Cluster node); ``redis_kwargs`` go to the
        clients' ``from_url``. :meth:`close` / :meth:`aclose` close them."""
        make_async = client_factory(url, cluster=cluster, redis_kwargs=redis_kwargs)
        sync: SyncClient = (
            from_url(redis.cluster.RedisCluster.from_url, url, redis_kwargs)
            if cluster
            else from_url(redis.Redis.from_url, url, redis_kwargs)
        )
        store = cls(sync, async_redis=make_async, **options)
        store._owned = sync
        return store

    @classmethod
    def class_name(cls) -> str:
        return "MessageLogBaseChatStore"

    def log(self, key: str) -> MessageLog:
        """The sync log of chat store key ``key``."""
        return self._logs.get(key)

    def alog(self, key: str) -> AsyncMessageLog:
        """The asyncio log of ``key`` (on the running event loop's client)."""
        return self._alogs.get(key)

    def close(self) -> None:
        """Close the sync client :meth:`from_url` made (a client you passed is yours)."""
        if self._owned is not None:
            self._owned.close()
            self._owned = None

    async def aclose(self) -> None:
        """:meth:`close`, and close the asyncio clients made (or derived from the one you
        passed) for the running event loop."""
        self.close()
        if self._clients is not None:
            await self._clients.aclose()

    # -- sync --------------------------------------------------------------------------

    def get_messages(self, key: str) -> list[ChatMessage]:
        """The visible messages of ``key``, oldest first."""
        return [to_llama_index(row) for row in self.log(key).all()]

    def set_messages(self, key: str, messages: list[ChatMessage]) -> None:
        """Make ``messages`` the whole history: one ``replace()`` (``[]``: ``clear()``)."""
        rows = [from_llama_index(m) for m in messages]  # bad input raises before any I/O
        log = self.log(key)
        if rows:
            log.replace(rows)
        elif log.count(view="visible"):
            log.clear()

    def add_message(self, key: str, message: ChatMessage, idx: int | None = None) -> None:
        """Append ``message`` (one atomic append); with ``idx``, put it at that position
        of the history as ``list.insert`` does (one conditional ``replace()``)."""
        row = from_llama_index(message)
        log = self.log(key)
        if idx is None:
            log.append_many([row])
            return
        while True:
            last = log.count()
            try:
                log.replace(_inserted(log.all(), idx, message), expected_seq=last)
            except SeqConflictError:
                continue
            return

    def delete_messages(self, key: str) -> list[ChatMessage] | None:
        """Hide the whole history with one ``clear()`` and return it (``None`` if it was
        empty, as ``SimpleChatStore`` for a key it does not hold)."""
        log = self.log(key)
        while True:
            last = log.count()
            rows = log.all()
            if not rows:
                return None
            try:
                log.clear(expected_seq=last)
            except SeqConflictError:
                continue
            return [to_llama_index(row) for row in rows]

    def delete_message(self, key: str, idx: int) -> ChatMessage | None:
        """Hide the ``idx``-th message of the history (0-based; ``None`` if there is
        none, a negative ``idx`` included) with one ``retract()`` and return it."""
        if idx < 0:
            return None
        log = self.log(key)
        while True:
            last = log.count()
            rows = log.all()
            if idx >= len(rows):
                return None
            try:
                log.retract([rows[idx].seq], expected_seq=last)
            except SeqConflictError:
                continue
            return to_llama_index(rows[idx])

    def delete_last_message(self, key: str) -> ChatMessage | None:
        """Hide the newest message with the log's atomic ``pop()`` and return it."""
        row = self.log(key).pop()
        return None if row is None else to_llama_index(row)

    def get_keys(self) -> list[str]:
        """Every key this store's scope holds, oldest-created first, read from the scope's
        index (pages of 1000; no ``SCAN``). A key emptied by ``delete_messages`` stays
        listed: its history is still in the log."""
        directory = Directory(_need(self._sync, "sync"), prefix=self.prefix)
        keys: list[str] = []
        cursor: str | None = None
        while True:
            page = directory.list(self.scope, limit=1000, cursor=cursor)
            keys.extend(c.conversation for c in page.conversations if c.last_seq)
            if page.cursor is None:
                return keys[::-1]
            cursor = page.cursor

    # -- asyncio -----------------------------------------------------------------------

    async def aget_messages(self, key: str) -> list[ChatMessage]:
        """:meth:`get_messages`, asyncio."""
        return [to_llama_index(row) for row in await self.alog(key).all()]

    async def aset_messages(self, key: str, messages: list[ChatMessage]) -> None:
        """:meth:`set_messages`, asyncio."""
        rows = [from_llama_index(m) for m in messages]
        log = self.alog(key)
        if rows:
            await log.replace(rows)
        elif await log.count(view="visible"):
            await log.clear()

    async def async_add_message(
        self, key: str, message: ChatMessage, idx: int | None = None
    ) -> None:
        """:meth:`add_message`, asyncio."""
        row = from_llama_index(message)
        log = self.alog(key)
        if idx is None:
            await log.append_many([row])
            return
        while True:
            last = await log.count()
            try:
                rows = _inserted(await log.all(), idx, message)
                await log.replace(rows, expected_seq=last)
            except SeqConflictError:
                continue
            return

    async def adelete_messages(self, key: str) -> list[ChatMessage] | None:
        """:meth:`delete_messages`, asyncio."""
        log = self.alog(key)
        while True:
            last = await log.count()
            rows = await log.all()
            if not rows:
                return None
            try:
                await log.clear(expected_seq=last)
            except SeqConflictError:
                continue
            return [to_llama_index(row) for row in rows]

    async def adelete_message(self, key: str, idx: int) -> ChatMessage | None:
        """:meth:`delete_message`, asyncio."""
        if idx < 0:
            return None
        log = self.alog(key)
        while True:
            last = await log.count()
            rows = await log.all()
            if idx >= len(rows):
                return None
            try:
                await log.retract([rows[idx].seq], expected_seq=last)
            except SeqConflictError:
                continue
            return to_llama_index(rows[idx])

    async def adelete_last_message(self, key: str) -> ChatMessage | None:
        """:meth:`delete_last_message`, asyncio."""
        row = await self.alog(key).pop()
        return None if row is None else to_llama_index(row)

    async def aget_keys(self) -> list[str]:
        """:meth:`get_keys`, asyncio."""
        directory = AsyncDirectory(_need(self._clients, "asyncio").get(), prefix=self.prefix)
        keys: list[str] = []
        cursor: str | None = None
        while True:
            page = await directory.list(self.scope, limit=1000, cursor=cursor)
            keys.extend(c.conversation for c in page.conversations if c.last_seq)
            if page.cursor is None:
                return keys[::-1]
            cursor = page.cursor
