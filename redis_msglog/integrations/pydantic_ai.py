"""Pydantic AI: ``RedisConversationStore``, a ``ConversationStore`` backend on the message
log (``pip install 'redis-msglog[pydantic-ai]'``).

::

    from pydantic_ai.conversation import Conversation
    from redis_msglog.integrations.pydantic_ai import RedisConversationStore

    store = RedisConversationStore.from_url(url="redis://localhost:6379")
    conversation = await store.load("conv-42") or Conversation(conversation_id="conv-42")
    await store.save(await agent.run("hi", conversation=conversation))

A Pydantic AI conversation ``X`` is the log conversation ``X`` under the store's
``prefix``: ``MessageLog(client, "X")``, ``follow()``, ``msglog show X`` and the exporters
read its messages. How the store maps to the log (docs/integrations.md):

- **Entries are messages of the log.** An entry is stored as the log messages of its
  ``ModelMessage`` (a request's system prompt, user prompt and each tool result a message
  of its own; a response one assistant message with its text, thinking and tool calls),
  appended with one atomic ``append_many``. Each has the entry's id as its ``id``; the
  last one carries the message in Pydantic AI's own JSON (``ModelMessagesTypeAdapter``)
  and the entry's ``parent_id`` in ``extras["pydantic_ai"]``, which is what the store
  reads back: exactly the message saved.
- **The record** (head, usage, deferred tool requests, scope, branches, revision) is in
  the conversation's attributes (``log.attrs()``): ``pydantic_ai.revision``,
  ``pydantic_ai.record`` (its JSON), ``pydantic_ai.head`` and ``pydantic_ai.where`` (where
  the head and the other entries it names are), so ``load`` is two round trips (the
  attributes, then the history).
- **Every write is one atomic call of the log**, carrying the record in ``attrs=`` with
  ``expected_seq`` (the last seq read with the revision): a save is one ``append_many``;
  a ``branch`` one ``retract`` (or ``replace``) moving the log's view to the new head; a
  ``fork`` the log's ``fork()`` (or a ``replace``); a ``delete`` one ``clear()``. Entries
  and record commit together or not at all; a stale revision writes nothing.
- ``read_history`` is one physical read of the log up to the head entry, walking
  ``parent_id`` (entries of other branches in between are skipped);
  ``read_entry`` finds an entry by its id through ``<prefix>:pydantic-ai:entry:<id>``,
  written before the call (where the entry will be is known from ``expected_seq``) and
  checked against the row it names (a store with the log option ``scope=("acme", ...)``:
  ``<prefix>:{acme:}:pydantic-ai:entry:<id>``, inside tenant ``acme``'s ACL pattern).
- ``delete`` removes the record and ``clear()``s the log's view; the entries stay in the
  physical log (retention: the log's ``ttl``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from datetime import timedelta
from typing import Any

from .._core.args import missing_extra

try:
    from pydantic_ai.conversation_store import (
        ConversationConflict,
        ConversationEntry,
        ConversationRecord,
        ConversationStore,
    )
except ModuleNotFoundError as exc:  # the extra is not installed
    raise missing_extra("pydantic-ai", exc) from exc

from .._async import AsyncDirectory
from .._core.lifecycle.scope import MAX_LIST_LIMIT
from .._core.stored.keys import ConversationKeys, conversation_of
from ..errors import SeqConflictError
from ._clients import AsyncClient, LoopClients, client_factory
from ._log_options import integration_options
from ._pydantic_ai_rows import FORMAT, entry_rows, row_entry
from ._pydantic_ai_where import GONE, RECORD, RECORD_ATTR, escape_glob
from ._pydantic_ai_writes import StoreWrites

__all__ = ["FORMAT", "RedisConversationStore", "entry_rows", "row_entry"]

_TRIES = 8
"""Writes tried while only other writers' appends (not a save) move the log's end."""


class RedisConversationStore(StoreWrites, ConversationStore):
    """A ``ConversationStore`` on the message log (see the module docstring).

    Args:
        redis: a ``redis.asyncio.Redis`` or ``redis.asyncio.cluster.RedisCluster`` client
            (it serves the first event loop it is used on; other loops get a client
            derived from it: docs/integrations.md), or a function making one, called
            when the store is made and once per other event loop (what :meth:`from_url`
            passes).
        prefix: the log's key prefix (default ``"msglog"``).
        **log_options: the other options of :class:`~redis_msglog.AsyncMessageLog`
            (``ttl``, ``durability``, ``retry``...), for every conversation. With ``ttl``,
            records (the logs' attributes) and the entry index expire with the logs.
            With ``scope=("acme", ...)`` every conversation is registered in that scope,
            :meth:`read_records` lists the scope's index (no ``SCAN``) and the entry
            index is ``<prefix>:{acme:}:pydantic-ai:entry:<id>``: what a tenant's ACL
            user (``acl_rules(tenant="acme")``) may reach, its ids starting ``acme:``.
    """

    def __init__(
        self,
        redis: AsyncClient | Callable[[], AsyncClient],
        *,
        prefix: str = "msglog",
        **log_options: Any,
    ) -> None:
        ConversationKeys.build(prefix, "x")  # validates the prefix
        log_options = integration_options(log_options)
        self.prefix = prefix
        self._clients = LoopClients(redis)
        self._options = dict(log_options)
        ttl = log_options.get("ttl")
        self._ttl_ms = int(ttl.total_seconds() * 1000) if isinstance(ttl, timedelta) else None
        self._where = {}
        self._seen = {}
        self._last_chain = []

    @classmethod
    def from_url(
        cls, url: str, *, cluster: bool = False, prefix: str = "msglog", **log_options: Any
    ) -> RedisConversationStore:
        """A store on the server (``cluster=True``: the Redis Cluster) at ``url``, with one
        client per event loop it is used on; :meth:`aclose` closes the running loop's."""
        return cls(client_factory(url, cluster=cluster), prefix=prefix, **log_options)

    async def aclose(self) -> None:
        """Close the client :meth:`from_url` made for the running event loop."""
        await self._clients.aclose()

    # -- records -------------------------------------------------------------------------

    async def read_record(self, conversation_id: str) -> ConversationRecord | None:
        """The record in the conversation's attributes: one round trip (``attrs()``)."""
        seen = await self._read_attrs(self.log(conversation_id))
        return None if seen.record is None else RECORD.validate_json(seen.record)

    async def read_records(
        self, *, scope: str | None = None, limit: int | None = None
    ) -> Sequence[ConversationRecord]:
        """Every record of the store, newest ``updated_at`` first: a scoped store's (log
        option ``scope=``) from its scope's index (``AsyncDirectory``: no ``SCAN``, what a
        tenant's ACL user may read), else every one under the prefix (``SCAN`` for the
        view hashes, where attributes live, on a cluster every primary's); their record
        fields read a page at a time. ``scope``: Pydantic AI's own, a record's field."""
        client = self._clients.get()
        field = f"a:{RECORD_ATTR}"
        records: list[ConversationRecord] = []
        keys: list[str] = []

        async def flush() -> None:
            async with client.pipeline(transaction=False) as pipe:
                for key in keys:
                    pipe.hget(key, field)
                raws = await pipe.execute(raise_on_error=False)
            keys.clear()
            for raw in raws:
                # Skipped: conversations without a record, and a damaged key (another
                # type, set by hand), which `msglog verify` reports; one bad
                # conversation does not hide every other record.
                if raw is not None and not isinstance(raw, Exception):
                    record = RECORD.validate_json(raw)
                    if scope is None or record.scope == scope:
                        records.append(record)

        async for key in self._view_keys(client):
            keys.append(key)
            if len(keys) >= 500:
                await flush()
        if keys:
            await flush()
        records.sort(key=lambda record: record.updated_at, reverse=True)
        return records[:limit]

    async def _view_keys(self, client: AsyncClient) -> AsyncIterator[str]:
        """The view hash of each conversation: a scoped store's from its scope's index,
        else every one under the prefix (``SCAN``)."""
        if (own := self._options.get("scope")) is not None:
            directory = AsyncDirectory(client, prefix=self.prefix)
            cursor: str | None = None
            while True:
                page = await directory.list(own, limit=MAX_LIST_LIMIT, cursor=cursor)
                for found in page.conversations:
                    yield ConversationKeys.build(self.prefix, found.conversation).view
                if (cursor := page.cursor) is None:
                    return
        pattern = f"{escape_glob(self.prefix)}:{{*}}:view"
        async for raw_key in client.scan_iter(match=pattern, count=500):
            key = raw_key.decode() if isinstance(raw_key, bytes) else str(raw_key)
            if conversation_of(self.prefix, key, ":view") is not None:
                yield key

    async def write_record(
        self,
        record: ConversationRecord,
        *,
        new_entries: Sequence[ConversationEntry] = (),
        expected_revision: str | None,
    ) -> None:
        """Store the new entries and the record in ONE atomic call of the log, a
        compare-and-set on its last seq as read with the record (``expected_seq``): an
        ``append_many`` with the record in ``attrs=``, or the edit that moves the log's
        view to the new head (``retract``/``replace``), or the log's ``fork``; with nothing
        to append or move, ``set_attrs``. If another writer got in first, the record is
        read again: a new revision is a ``ConversationConflict``; an append that left the
        revision as it was (another writer of the log's messages) is not a conflict, as for
        ``InMemoryConversationStore``: the write is planned again on the new end (up to 8
        times, then ``ConversationConflict``)."""
        log = self.log(record.conversation_id)
        seen = self._seen.pop(log.conversation, None)
        if seen is None or seen.revision != expected_revision:
            seen = await self._read_attrs(log)
        for _ in range(_TRIES):
            if seen.revision != expected_revision:
                raise ConversationConflict(log.conversation)  # nothing written
            try:
                await self._write(log, record, new_entries, seen)
            except SeqConflictError:
                seen = await self._read_attrs(log)
                continue
            self._seen.pop(log.conversation, None)
            return
        raise ConversationConflict(log.conversation)

    async def delete_record(self, conversation_id: str, *, expected_revision: str) -> None:
        """Remove the record from the conversation's attributes and ``clear()`` the log's
        view, in one call (a compare-and-set on the last seq read with the revision); the
        entries stay in the physical log until its ``ttl`` (or an operator) removes them,
        so forks of it keep reading."""
        log = self.log(conversation_id)
        seen = self._seen.pop(conversation_id, None)
        if seen is None or seen.revision != expected_revision:
            seen = await self._read_attrs(log)
        for _ in range(_TRIES):
            if seen.revision != expected_revision:
                raise ConversationConflict(conversation_id)
            try:
                await log.clear(attrs=GONE, expected_seq=seen.last_seq)
            except SeqConflictError:
                seen = await self._read_attrs(log)
                continue
            self._seen.pop(conversation_id, None)
            return
        raise ConversationConflict(conversation_id)
