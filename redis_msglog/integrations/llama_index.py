"""LlamaIndex: ``MessageLogChatStore``, an ``AsyncDBChatStore`` on the message log, for
``Memory`` (``pip install 'redis-msglog[llama-index]'``), and
:class:`MessageLogBaseChatStore`, a ``BaseChatStore`` for ``ChatMemoryBuffer`` and the
other memories ``RedisChatStore`` serves (in ``_llama_index_base.py``).

::

    from llama_index.core.memory import Memory
    from redis_msglog.integrations.llama_index import MessageLogChatStore

    store = MessageLogChatStore.from_url(url="redis://localhost:6379")
    memory = Memory.from_defaults(session_id="conv-42", chat_store=store, token_limit=4000)

A chat store key is the log conversation of that id under the store's ``prefix``, so
``MessageLog(client, "conv-42")``, ``follow()`` and ``msglog show conv-42`` read what
``Memory`` writes, and ``Memory`` reads what any other writer appends. How each call maps
to the log (docs/integrations.md):

- ``ACTIVE``/``ARCHIVED`` are the log's archive watermark: ``get_messages(status=ACTIVE)``
  reads ``view="active"``, ``ARCHIVED`` ``view="archived"``, ``None`` ``view="visible"``;
  ``archive_oldest_messages(n)`` moves the watermark with one ``archive()``, a
  compare-and-set on the log's last seq (retried when another writer got in between:
  the log has no server-side "oldest n");
- ``add_message(s)`` is one (atomic) append; ``set_messages`` one ``replace()``;
- ``delete_*`` are retractions (``retract``; ``delete_messages()`` with no status is a
  ``clear()``): entries of the log, nothing is deleted; ``delete_message(key, idx)``
  takes the message's seq as its id (the reference store takes its row id);
- ``get_keys()`` lists every conversation under the prefix (``SCAN``).

Messages are stored losslessly: each ``ChatMessage`` becomes an
:class:`~redis_msglog.AgentMessage` (roles, text, images, audio, documents, thinking, tool
calls and tool results in their neutral places, so ``to_openai()``, ``to_anthropic()``...
read them), and what has no neutral place (a ``developer`` role, ``additional_kwargs``,
video, citation and cache blocks, a thinking block's details...) is kept as a JSON merge
patch in ``extras["llama_index"]``: :func:`to_llama_index` gives back a ``ChatMessage``
equal to the one stored.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, cast

from redis import exceptions as redis_errors

from .._core.args import missing_extra

try:
    from llama_index.core.base.llms.types import ChatMessage
    from llama_index.core.bridge.pydantic import PrivateAttr
    from llama_index.core.storage.chat_store.base_db import AsyncDBChatStore, MessageStatus
except ModuleNotFoundError as exc:  # the extra is not installed
    raise missing_extra("llama-index", exc) from exc

from .._async import AsyncMessageLog
from .._core.lifecycle.scope import error_for
from .._core.read.views import MAX_RETRACT
from .._core.stored.keys import ConversationKeys, conversation_of, key_pattern
from .._io.failures import CLIENT_FAILURES, step_failure
from ..errors import InvalidEditError, LogRewoundError, PermissionDeniedError, SeqConflictError
from ..models import StoredMessage
from ._clients import AsyncClient, LoopClients, client_factory
from ._llama_index_base import MessageLogBaseChatStore
from ._llama_index_messages import FORMAT, from_llama_index, to_llama_index
from ._log_options import integration_options

__all__ = [
    "FORMAT",
    "MessageLogBaseChatStore",
    "MessageLogChatStore",
    "from_llama_index",
    "to_llama_index",
]

_VIEWS = {None: "visible", MessageStatus.ACTIVE: "active", MessageStatus.ARCHIVED: "archived"}


# -- the chat store -----------------------------------------------------------------------


class MessageLogChatStore(AsyncDBChatStore):
    """An ``AsyncDBChatStore`` whose keys are log conversations (see the module docstring).

    Args:
        redis: a ``redis.asyncio.Redis`` or ``redis.asyncio.cluster.RedisCluster`` client
            (it serves the first event loop it is used on; other loops get a client
            derived from it: docs/integrations.md), or a function making one, called
            when the store is made and once per other event loop (what :meth:`from_url`
            passes).
        prefix: the log's key prefix (default ``"msglog"``).
        **log_options: the other options of :class:`~redis_msglog.AsyncMessageLog`
            (``ttl``, ``durability``, ``retry``, ``blob_threshold``...), for every key.
    """

    prefix: str = "msglog"

    _clients: LoopClients = PrivateAttr()
    _options: dict[str, Any] = PrivateAttr(default_factory=dict)

    def __init__(
        self,
        redis: AsyncClient | Callable[[], AsyncClient],
        *,
        prefix: str = "msglog",
        **log_options: Any,
    ) -> None:
        ConversationKeys.build(prefix, "x")  # validates the prefix
        options = integration_options(log_options)
        super().__init__(prefix=prefix)
        self._clients = LoopClients(redis)
        self._options = options

    @classmethod
    def from_url(
        cls, url: str, *, cluster: bool = False, prefix: str = "msglog", **log_options: Any
    ) -> MessageLogChatStore:
        """A store on the server (``cluster=True``: the Redis Cluster) at ``url``.

        It makes one client per event loop it is used on (LlamaIndex's sync methods run
        each call on a loop of their own); :meth:`aclose` closes the running loop's."""
        return cls(client_factory(url, cluster=cluster), prefix=prefix, **log_options)

    @classmethod
    def class_name(cls) -> str:
        return "MessageLogChatStore"

    def log(self, key: str) -> AsyncMessageLog:
        """The log of chat store key ``key`` (on the running event loop's client)."""
        return AsyncMessageLog(self._clients.get(), key, prefix=self.prefix, **self._options)

    async def aclose(self) -> None:
        """Close the client :meth:`from_url` made for the running event loop (a client
        given to the constructor is the caller's to close)."""
        await self._clients.aclose()

    # -- reads -------------------------------------------------------------------------

    async def get_messages(
        self,
        key: str,
        status: MessageStatus | None = MessageStatus.ACTIVE,
        limit: int | None = None,
        offset: int | None = None,
    ) -> list[ChatMessage]:
        """The messages of ``key`` with ``status`` (``None``: both), oldest first, after
        skipping ``offset`` and at most ``limit``."""
        view = _view(status)
        log = self.log(key)
        if not offset:
            rows = await (log.all(view=view) if limit is None else log.read(0, limit, view=view))
        else:
            rows = (await log.all(view=view))[offset:]
            rows = rows if limit is None else rows[:limit]
        return [to_llama_index(row) for row in rows]

    async def count_messages(
        self, key: str, status: MessageStatus | None = MessageStatus.ACTIVE
    ) -> int:
        """How many messages of ``key`` have ``status`` (``None``: both)."""
        return await self.log(key).count(view=_view(status))

    async def get_keys(self) -> list[str]:
        """Every conversation under the prefix, found with ``SCAN`` (on a cluster, every
        primary's), not only the keys this store wrote."""
        found: set[str] = set()
        scan = self._clients.get().scan_iter(match=key_pattern(self.prefix), count=500)
        try:
            async for raw in scan:
                name = raw.decode() if isinstance(raw, bytes) else str(raw)
                for suffix in (":seq", ":stream"):
                    if (conversation := conversation_of(self.prefix, name, suffix)) is not None:
                        found.add(conversation)
        except redis_errors.NoPermissionError:
            raise PermissionDeniedError(
                "get_keys needs SCAN, which a tenant's Redis user may not run (acl_rules("
                "tenant=...)): SCAN would list every tenant's keys. Nothing was read."
            ) from None
        except CLIENT_FAILURES as exc:  # as every other call of the store says them
            raise error_for(step_failure(exc), None) from exc
        return sorted(found)

    # -- writes ------------------------------------------------------------------------

    async def add_message(
        self, key: str, message: ChatMessage, status: MessageStatus = MessageStatus.ACTIVE
    ) -> None:
        """Append one message (one atomic append)."""
        await self.add_messages(key, [message], status=status)

    async def add_messages(
        self,
        key: str,
        messages: list[ChatMessage],
        status: MessageStatus = MessageStatus.ACTIVE,
    ) -> None:
        """Append the messages with one atomic ``append_many``. With ``ARCHIVED``, which
        the watermark allows only for a conversation with no active message (archived
        messages are the oldest), they are then archived: a second call, so a failure in
        between leaves them active (:class:`~redis_msglog.InvalidEditError`, a
        ``ValueError``, if active messages exist)."""
        log = self.log(key)
        rows = [from_llama_index(m) for m in messages]
        if _status(status) is not MessageStatus.ARCHIVED:
            await log.append_many(rows)
            return
        if not rows:
            return
        while True:
            last = await log.count()
            if await log.count(view="active"):
                raise InvalidEditError(
                    f"chat store key {key!r} has active messages: archived ones must be "
                    "older (the log's archive watermark)"
                )
            try:
                seq = await log.append_many(rows, expected_seq=last)
            except SeqConflictError:
                continue
            await log.archive(seq)
            return

    async def set_messages(
        self,
        key: str,
        messages: list[ChatMessage],
        status: MessageStatus = MessageStatus.ACTIVE,
    ) -> None:
        """Replace the conversation's messages with one atomic ``replace()`` (the old
        ones stay in the physical log); ``ARCHIVED`` archives them with a second call."""
        log = self.log(key)
        if not messages:
            await self.delete_messages(key)
            return
        seq = await log.replace([from_llama_index(m) for m in messages])
        if _status(status) is MessageStatus.ARCHIVED:
            await log.archive(seq)

    async def delete_message(self, key: str, idx: int) -> ChatMessage | None:
        """Retract the message whose seq is ``idx`` and return it; ``None`` if no visible
        message has that seq (beyond the end, an edit, already retracted)."""
        if idx < 1:
            return None
        log = self.log(key)
        try:
            entries = await log.read(idx - 1, 1, view="physical")
        except LogRewoundError:
            return None  # beyond the end
        found = [row for row in entries if isinstance(row, StoredMessage) and row.seq == idx]
        if not found:
            return None
        try:
            await log.retract([idx])
        except InvalidEditError:
            return None  # not a visible row: retracted already, compacted away...
        return to_llama_index(found[0])

    async def delete_messages(self, key: str, status: MessageStatus | None = None) -> None:
        """Retract the messages with ``status``; ``None`` (all of them): one ``clear()``."""
        log = self.log(key)
        if status is None:
            if await log.count(view="visible"):
                await log.clear()
            return
        view = _view(status)
        await self._retract_where(log, lambda done: log.all(view=view))

    async def delete_oldest_messages(self, key: str, n: int) -> list[ChatMessage]:
        """Retract the ``n`` oldest active messages and return them: one ``retract()``, a
        compare-and-set on the log's last seq, retried if another writer got in first."""
        if n <= 0:
            return []
        log = self.log(key)
        rows = await self._retract_where(log, lambda done: log.read(0, n - done, view="active"))
        return [to_llama_index(row) for row in rows]

    async def archive_oldest_messages(self, key: str, n: int) -> list[ChatMessage]:
        """Archive the ``n`` oldest active messages (all of them if fewer) and return
        them.

        One ``archive()`` moves the watermark through the ``n``-th active message, as a
        compare-and-set on the log's last seq read before the messages: if another
        writer appended or edited in between, nothing is written and it reads and tries
        again (the log has no server-side "oldest n", so this is the atomic form)."""
        if n <= 0:
            return []
        log = self.log(key)
        while True:
            last = await log.count()  # first: a write after it fails the compare-and-set
            rows = await log.read(0, n, view="active")
            if not rows:
                return []
            try:
                await log.archive(rows[-1].seq, expected_seq=last)
            except SeqConflictError:
                continue
            return [to_llama_index(row) for row in rows]

    async def _retract_where(
        self, log: AsyncMessageLog, rows_of: Callable[[int], Any]
    ) -> list[StoredMessage]:
        """Retract the rows ``rows_of(retracted so far)`` reads, atomically with the
        compare-and-set on the last seq read before them; retried until it holds. Returns
        them. More rows than one ``retract()`` takes go in several such calls."""
        done: list[StoredMessage] = []
        while True:
            last = await log.count()
            rows = cast(Sequence[StoredMessage], await rows_of(len(done)))
            chunk = list(rows[:MAX_RETRACT])
            if not chunk:
                return done
            try:
                await log.retract([row.seq for row in chunk], expected_seq=last)
            except SeqConflictError:
                continue
            done.extend(chunk)
            if len(rows) <= MAX_RETRACT:
                return done


def _status(status: MessageStatus | str | None) -> MessageStatus | None:
    return None if status is None else MessageStatus(status)


def _view(status: MessageStatus | str | None) -> Any:
    return _VIEWS[_status(status)]
