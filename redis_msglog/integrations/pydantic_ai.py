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
  checked against the row it names.
- ``delete`` removes the record and ``clear()``s the log's view; the entries stay in the
  physical log (retention: the log's ``ttl``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

import orjson
from pydantic import TypeAdapter

from .._args import missing_extra

try:
    from pydantic_ai.conversation_store import (
        ConversationConflict,
        ConversationEntry,
        ConversationRecord,
        ConversationStore,
    )
    from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter
except ModuleNotFoundError as exc:  # the extra is not installed
    raise missing_extra("pydantic-ai", exc) from exc

from .._args import check_type
from .._async import AsyncMessageLog
from .._keys import ConversationKeys, conversation_of
from .._shell import check_log_options
from .._views import MAX_RETRACT
from ..edits import Attributes, Entry, LogView
from ..errors import LogRewoundError, SeqConflictError
from ..models import AgentMessage, StoredMessage
from ..parts import decode_base64
from ._clients import AsyncClient, LoopClients, client_factory

__all__ = ["FORMAT", "RedisConversationStore", "entry_rows", "row_entry"]

FORMAT = "pydantic_ai"
"""The key of the stored entry in a row's ``extras``."""

_RECORD = TypeAdapter(ConversationRecord)


# -- entries as rows ----------------------------------------------------------------------


def entry_rows(entry: ConversationEntry) -> list[AgentMessage]:
    """The log messages of an entry (at least one): its message's parts as neutral
    messages, the last carrying the entry (``extras["pydantic_ai"]``: ``parent_id``,
    ``kind`` and ``message``, the ``ModelMessagesTypeAdapter`` JSON)."""
    check_type("entry", entry, ConversationEntry, "a ConversationEntry")
    native: dict[str, Any] = ModelMessagesTypeAdapter.dump_python([entry.message], mode="json")[0]
    if native.get("kind") == "response":
        rows = [_response_row(native)]
    else:
        rows = _request_rows(native, first=entry.parent_id is None)
    if not rows:
        rows = [{"role": "user", "content": ""}]
    carried = {"parent_id": entry.parent_id, "kind": entry.kind, "message": native}
    rows[-1] = {**rows[-1], "extras": {FORMAT: carried}}
    return [AgentMessage.model_validate({**row, "id": entry.id}) for row in rows]


def row_entry(row: AgentMessage) -> ConversationEntry | None:
    """The entry a row carries (the last row of an entry's rows), else ``None``."""
    check_type("row", row, AgentMessage, "an AgentMessage")
    carried = (row.extras or {}).get(FORMAT)
    if not isinstance(carried, dict) or "message" not in carried or row.id is None:
        return None
    message: ModelMessage = ModelMessagesTypeAdapter.validate_json(
        orjson.dumps([carried["message"]])
    )[0]
    return ConversationEntry(
        id=row.id,
        parent_id=carried.get("parent_id"),
        message=message,
        kind=carried.get("kind", "message"),
    )


def _request_rows(native: dict[str, Any], *, first: bool) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    if first and isinstance(native.get("instructions"), str):
        rows.append({"role": "system", "content": native["instructions"]})
    for part in native.get("parts") or []:
        kind = part.get("part_kind")
        if kind == "system-prompt":
            rows.append({"role": "system", "content": str(part.get("content", ""))})
        elif kind == "user-prompt":
            rows.append({"role": "user", "content": _user_content(part.get("content"))})
        elif isinstance(part.get("tool_call_id"), str) and "content" in part:
            content = part["content"]
            text = content if isinstance(content, str) else orjson.dumps(content).decode()
            rows.append(
                {
                    "role": "tool",
                    "content": text,
                    "tool_call_id": part["tool_call_id"],
                    "name": part.get("tool_name"),
                }
            )
        elif kind == "retry-feedback":
            content = part.get("content")
            text = content if isinstance(content, str) else orjson.dumps(content).decode()
            rows.append({"role": "user", "content": text})
    return rows


def _user_content(content: Any) -> str | list[dict[str, Any]]:
    if isinstance(content, str):
        return content
    parts: list[dict[str, Any]] = []
    for item in content or []:
        if isinstance(item, str):
            parts.append({"type": "text", "text": item})
        elif (part := _user_part(item)) is not None:
            parts.append(part)
    if len(parts) == 1 and parts[0]["type"] == "text":
        return str(parts[0]["text"])
    return parts


_URL_KINDS = {"image-url": "image", "audio-url": "audio", "document-url": "file"}


def _user_part(item: dict[str, Any]) -> dict[str, Any] | None:
    kind = item.get("kind")
    if kind == "text-content":
        return {"type": "text", "text": str(item.get("content", ""))}
    if kind in _URL_KINDS and isinstance(item.get("url"), str):
        return {"type": _URL_KINDS[kind], "url": item["url"], "media_type": item.get("media_type")}
    if kind == "binary" and isinstance(item.get("data"), str):
        try:
            data = decode_base64(item["data"])
        except ValueError:
            return None
        media_type = item.get("media_type") or ""
        major = media_type.split("/", 1)[0]
        part_type = major if major in ("image", "audio") else "file"
        return {"type": part_type, "data": data, "media_type": media_type or None}
    return None  # video, cache points, uploaded files: in the entry's JSON only


def _response_row(native: dict[str, Any]) -> dict[str, Any]:
    parts: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    for part in native.get("parts") or []:
        kind = part.get("part_kind")
        if kind == "text":
            parts.append({"type": "text", "text": part.get("content", "")})
        elif kind == "thinking":
            signature = part.get("signature")
            anthropic = part.get("provider_name") == "anthropic" and isinstance(signature, str)
            parts.append(
                {
                    "type": "thinking",
                    "thinking": part.get("content") or "",
                    "signature": signature if isinstance(signature, str) else None,
                    "provider": "anthropic" if anthropic else None,
                }
            )
        elif kind == "tool-call" and isinstance(part.get("tool_call_id"), str):
            args = part.get("args")
            call: dict[str, Any] = {"id": part["tool_call_id"], "name": part.get("tool_name", "")}
            call["arguments" if isinstance(args, str) else "args"] = args
            calls.append(call)
    content: str | list[dict[str, Any]] = parts
    if len(parts) == 1 and parts[0]["type"] == "text":
        content = str(parts[0]["text"])
    elif not parts:
        content = ""
    row: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        row["tool_calls"] = calls
    return row


# -- the store ----------------------------------------------------------------------------

_REVISION = f"{FORMAT}.revision"
_RECORD_ATTR = f"{FORMAT}.record"
_HEAD = f"{FORMAT}.head"
_WHERE = f"{FORMAT}.where"
_GONE: dict[str, str | None] = dict.fromkeys((_REVISION, _RECORD_ATTR, _HEAD, _WHERE))
_TRIES = 8
"""Writes tried while only other writers' appends (not a save) move the log's end."""


@dataclasses.dataclass(frozen=True)
class _Located:
    """An entry in a log: the conversation and the seq of its last row."""

    conversation: str
    seq: int

    def dump(self) -> str:
        return orjson.dumps([self.conversation, self.seq]).decode()

    @classmethod
    def load(cls, raw: Any) -> _Located | None:
        if raw is None or raw in (b"", ""):
            return None
        value = orjson.loads(raw)
        return cls(str(value[0]), int(value[1]))


@dataclasses.dataclass(frozen=True)
class _Seen:
    """A conversation's record as its attributes hold it, and the log's last seq read with
    them (``attrs()``, one round trip): the ``expected_seq`` of the next write."""

    last_seq: int
    revision: str | None
    record: bytes | None  # the record's JSON
    head: _Located | None
    where: dict[str, _Located]

    @classmethod
    def of(cls, attrs: Attributes) -> _Seen:
        values = attrs.values
        record = values.get(_RECORD_ATTR)
        where = {
            entry_id: _Located(str(at[0]), int(at[1]))
            for entry_id, at in orjson.loads(values.get(_WHERE) or "{}").items()
        }
        return cls(
            last_seq=attrs.last_seq,
            revision=values.get(_REVISION),
            record=None if record is None else record.encode(),
            head=_Located.load(values.get(_HEAD)),
            where=where,
        )

    @property
    def head_id(self) -> str | None:
        if self.record is None:
            return None
        head_id = orjson.loads(self.record).get("head_id")
        return None if head_id is None else str(head_id)


class RedisConversationStore(ConversationStore):
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
    """

    def __init__(
        self,
        redis: AsyncClient | Callable[[], AsyncClient],
        *,
        prefix: str = "msglog",
        **log_options: Any,
    ) -> None:
        ConversationKeys.build(prefix, "x")  # validates the prefix
        check_log_options(log_options)
        self.prefix = prefix
        self._clients = LoopClients(redis)
        self._options = dict(log_options)
        ttl = log_options.get("ttl")
        self._ttl_ms = int(ttl.total_seconds() * 1000) if isinstance(ttl, timedelta) else None
        self._where: dict[str, _Located] = {}  # entry id -> location, as last seen
        self._seen: dict[str, _Seen] = {}  # conversation -> its attributes, as last read
        self._last_chain: list[tuple[ConversationEntry, _Located]] = []  # the last history read

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

    def log(self, conversation_id: str) -> AsyncMessageLog:
        """The log of a conversation."""
        return AsyncMessageLog(
            self._clients.get(), conversation_id, prefix=self.prefix, **self._options
        )

    def _entry_key(self, entry_id: str) -> str:
        return f"{self.prefix}:pydantic-ai:entry:{entry_id}"

    def _remember(self, entry_id: str | None, where: _Located | None) -> None:
        if entry_id is not None and where is not None:
            if len(self._where) > 10_000:
                self._where.clear()
            self._where[entry_id] = where

    # -- records -------------------------------------------------------------------------

    async def _read_attrs(self, log: AsyncMessageLog) -> _Seen:
        """The conversation's attributes and last seq (one round trip), remembered for the
        write that follows and for the entries they locate."""
        seen = _Seen.of(await log.attrs())
        for entry_id, where in seen.where.items():
            self._remember(entry_id, where)
        self._remember(seen.head_id, seen.head)
        if len(self._seen) > 10_000:
            self._seen.clear()
        self._seen[log.conversation] = seen
        return seen

    async def read_record(self, conversation_id: str) -> ConversationRecord | None:
        """The record in the conversation's attributes: one round trip (``attrs()``)."""
        seen = await self._read_attrs(self.log(conversation_id))
        return None if seen.record is None else _RECORD.validate_json(seen.record)

    async def read_records(
        self, *, scope: str | None = None, limit: int | None = None
    ) -> Sequence[ConversationRecord]:
        """Every record under the prefix (``SCAN`` for the view hashes, where attributes
        live, on a cluster every primary's; their record fields read a page at a time),
        newest ``updated_at`` first."""
        client = self._clients.get()
        pattern = f"{_glob(self.prefix)}:{{*}}:view"
        field = f"a:{_RECORD_ATTR}"
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
                    record = _RECORD.validate_json(raw)
                    if scope is None or record.scope == scope:
                        records.append(record)

        async for raw_key in client.scan_iter(match=pattern, count=500):
            key = raw_key.decode() if isinstance(raw_key, bytes) else str(raw_key)
            if conversation_of(self.prefix, key, ":view") is not None:
                keys.append(key)
                if len(keys) >= 500:
                    await flush()
        if keys:
            await flush()
        records.sort(key=lambda record: record.updated_at, reverse=True)
        return records[:limit]

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
                await log.clear(attrs=_GONE, expected_seq=seen.last_seq)
            except SeqConflictError:
                seen = await self._read_attrs(log)
                continue
            self._seen.pop(conversation_id, None)
            return
        raise ConversationConflict(conversation_id)

    # -- one write -----------------------------------------------------------------------

    async def _write(
        self,
        log: AsyncMessageLog,
        record: ConversationRecord,
        new_entries: Sequence[ConversationEntry],
        seen: _Seen,
    ) -> None:
        """The one call storing ``new_entries`` and ``record`` on a log that ends at
        ``seen.last_seq`` (``SeqConflictError`` if it no longer does: nothing written).

        Where each entry will be is known before the call: its rows follow the call's one
        edit entry (the ``attrs`` entry of an append, the ``compact`` entry of a
        ``replace``, the ``fork`` entry), from ``last_seq + 2`` on."""
        last = seen.last_seq
        base = new_entries[0].parent_id if new_entries else record.head_id
        if base is None:
            base_at = None
        elif base == seen.head_id and seen.head is not None:
            base_at = seen.head
        elif (base_at := await self._locate(base)) is None:
            raise ConversationConflict(record.conversation_id)  # released by a delete
        if base_at is not None and base_at.conversation != log.conversation:
            # A fork's head, in the log it was forked from: copy its history here.
            await self._copy(log, record, new_entries, base_at, last)
            return
        if base != seen.head_id:
            # The history moved (a branch, a save that rewrote it): the log's view follows.
            chain = [] if base_at is None else await self._chain_to(base_at)
            wanted = [entry.id for entry, _ in chain]
            visible = await log.all(view="visible")
            ids = set(wanted)
            kept = [row.id for row in visible if row.id in ids and _carries(row)]
            others = [row.seq for row in visible if row.id not in ids]
            if kept != wanted or (others and new_entries) or len(others) > MAX_RETRACT:
                # Not in the view, or rows to hide and rows to add (or more to hide than
                # one retract takes): the history, put back.
                await self._replace(log, record, [e for e, _ in chain], new_entries, last)
                return
            if others:
                at = await self._record_attrs(record, {}, base_at)
                await log.retract(others, attrs=at, expected_seq=last)
                self._remember_all(record.head_id, base_at)
                return
        located = _located(log.conversation, new_entries, last + 2)
        head = located.get(record.head_id or "", base_at)
        attrs = await self._record_attrs(record, located, head)
        if new_entries:
            await self._index(located)
            await log.append_many(_rows(new_entries), attrs=attrs, expected_seq=last)
        else:
            await log.set_attrs(attrs, expected_seq=last)
        self._remember_all(record.head_id, head, located)

    async def _replace(
        self,
        log: AsyncMessageLog,
        record: ConversationRecord,
        history: Sequence[ConversationEntry],
        new_entries: Sequence[ConversationEntry],
        last: int,
    ) -> None:
        """Make the log's view the history then the new entries (one ``replace``, which
        copies the history's rows: the original rows stay in the physical log)."""
        entries = [*history, *new_entries]
        located = _located(log.conversation, entries, last + 2)
        head = located.get(record.head_id or "")
        attrs = await self._record_attrs(record, located, head)
        await self._index({e.id: located[e.id] for e in new_entries})
        await log.replace(_rows(entries), attrs=attrs, expected_seq=last)
        self._remember_all(record.head_id, head, located)

    async def _copy(
        self,
        log: AsyncMessageLog,
        record: ConversationRecord,
        new_entries: Sequence[ConversationEntry],
        base_at: _Located,
        last: int,
    ) -> None:
        """Store a history that ends in another log (a fork's) in this one: the log's
        ``fork()`` when this log is empty and the source's view when the head was written
        is the history (a copy of that view, with its fork entry), else a ``replace`` with
        the history's rows; either way one call, carrying the record."""
        source = self.log(base_at.conversation)
        try:
            entries = await source.read(0, base_at.seq, view="physical")
            chain = await self._chain(base_at, None, entries)
        except (LogRewoundError, KeyError):  # the source expired or was deleted
            raise ConversationConflict(record.conversation_id) from None
        if last == 0 and not new_entries:
            then = LogView(entries).rows
            if [row.id for row in then if _carries(row)] == [entry.id for entry, _ in chain]:
                located = {
                    row.id: _Located(log.conversation, 2 + i)
                    for i, row in enumerate(then)
                    if row.id is not None and _carries(row)
                }
                head = located.get(record.head_id or "")
                attrs = await self._record_attrs(record, located, head)
                await source.fork(log.conversation, at_seq=base_at.seq, attrs=attrs)
                self._remember_all(record.head_id, head, located)
                return
        await self._replace(log, record, [entry for entry, _ in chain], new_entries, last)

    async def _record_attrs(
        self,
        record: ConversationRecord,
        located: dict[str, _Located],
        head: _Located | None,
    ) -> dict[str, str | None]:
        """The attributes holding ``record``: its revision, its JSON, where its head is and
        where the other entries it names are (branch tips, fork point)."""
        where: dict[str, list[Any]] = {}
        for entry_id in [*record.branches, record.forked_at]:
            if entry_id is not None:
                at = located.get(entry_id) or await self._locate(entry_id)
                if at is not None:
                    where[entry_id] = [at.conversation, at.seq]
        return {
            _REVISION: record.revision,
            _RECORD_ATTR: _RECORD.dump_json(record).decode(),
            _HEAD: None if head is None else head.dump(),
            _WHERE: orjson.dumps(where).decode(),
        }

    def _remember_all(
        self,
        head_id: str | None,
        head: _Located | None,
        located: dict[str, _Located] | None = None,
    ) -> None:
        for entry_id, where in (located or {}).items():
            self._remember(entry_id, where)
        self._remember(head_id, head)

    # -- entries -------------------------------------------------------------------------

    async def _index(self, located: dict[str, _Located]) -> None:
        """Write where each new entry will be (``read_entry``'s index) BEFORE the call
        that writes it: an index key of a call that then fails names a row that does not
        carry the entry, which ``read_entry`` checks."""
        if not located:
            return
        async with self._clients.get().pipeline(transaction=False) as pipe:
            for entry_id, where in located.items():
                pipe.set(self._entry_key(entry_id), where.dump(), px=self._ttl_ms)
            await pipe.execute()

    async def _locate(self, entry_id: str) -> _Located | None:
        if (where := self._where.get(entry_id)) is not None:
            return where
        where = _Located.load(await self._clients.get().get(self._entry_key(entry_id)))
        self._remember(entry_id, where)
        return where

    async def read_entry(self, entry_id: str) -> ConversationEntry:
        where = await self._locate(entry_id)
        if where is not None:
            try:
                rows = await self.log(where.conversation).read(where.seq - 1, 1, view="physical")
            except LogRewoundError:
                raise KeyError(entry_id) from None  # the log expired or was deleted
            for row in rows:
                if isinstance(row, StoredMessage) and row.id == entry_id:
                    entry = row_entry(row)
                    if entry is not None:
                        return entry
        raise KeyError(entry_id)

    async def read_history(
        self, head_id: str | None, *, limit: int | None = None
    ) -> list[ConversationEntry]:
        """The entries up to ``head_id``, oldest first (the last ``limit``): one physical
        read of the log holding the head, up to it, for a history stored in one log."""
        if head_id is None or limit == 0:
            return []
        where = await self._locate(head_id)
        if where is None:
            raise KeyError(head_id)
        chain = await self._chain(where, limit)
        return [entry for entry, _ in chain]

    async def _chain(
        self, where: _Located, limit: int | None, entries: Sequence[Entry] | None = None
    ) -> list[tuple[ConversationEntry, _Located]]:
        """The history ending at the entry at ``where``, with each entry's location
        (``entries``: the log's physical entries up to ``where``, if already read)."""
        log = self.log(where.conversation)
        window = where.seq if limit is None else min(where.seq, 4 * limit + 4)
        while True:
            start = where.seq - window
            if entries is None or start != 0:
                try:
                    entries = await log.read(start, window, view="physical")
                except LogRewoundError:
                    raise KeyError(f"seq {where.seq} of {where.conversation!r}") from None
            found: dict[str, tuple[ConversationEntry, _Located]] = {}
            for row in entries:
                if isinstance(row, StoredMessage) and (entry := row_entry(row)) is not None:
                    found[entry.id] = (entry, _Located(where.conversation, row.seq))
            chain, missing = _walk(found, where, limit)
            if missing is None or start == 0:
                break
            window = min(where.seq, window * 4)
        while missing is not None and (limit is None or len(chain) < limit):
            # The history continues in another log (not a copy made by fork()).
            entry = await self.read_entry(missing)
            located = await self._locate(missing)
            assert located is not None
            chain.append((entry, located))
            missing = entry.parent_id
        for entry, located in chain:
            self._remember(entry.id, located)
        chain.reverse()
        if limit is None:
            self._last_chain = chain
        return chain

    async def _chain_to(self, where: _Located) -> list[tuple[ConversationEntry, _Located]]:
        """The history ending at ``where``: a prefix of the last history read (a branch
        back, right after the ABC read the history) or one read."""
        for index, (_, located) in enumerate(self._last_chain):
            if located == where:
                return self._last_chain[: index + 1]
        return await self._chain(where, None)


def _rows(entries: Sequence[ConversationEntry]) -> list[AgentMessage]:
    return [row for entry in entries for row in entry_rows(entry)]


def _located(
    conversation: str, entries: Sequence[ConversationEntry], first_seq: int
) -> dict[str, _Located]:
    """Where each entry will be when the rows of ``entries`` are written from
    ``first_seq`` on: the seq of its last row."""
    located: dict[str, _Located] = {}
    seq = first_seq - 1
    for entry in entries:
        seq += len(entry_rows(entry))
        located[entry.id] = _Located(conversation, seq)
    return located


def _walk(
    found: dict[str, tuple[ConversationEntry, _Located]], head: _Located, limit: int | None
) -> tuple[list[tuple[ConversationEntry, _Located]], str | None]:
    """Walk ``parent_id`` from the entry at ``head`` through ``found``: the entries, newest
    first, and the id of the first one not found (``None``: the whole history)."""
    by_seq = {where.seq: entry_id for entry_id, (_, where) in found.items()}
    next_id: str | None = by_seq.get(head.seq)
    if next_id is None:
        raise KeyError(f"no entry at seq {head.seq} of {head.conversation!r}")
    chain: list[tuple[ConversationEntry, _Located]] = []
    while next_id is not None and (limit is None or len(chain) < limit):
        if next_id not in found:
            return chain, next_id
        entry, where = found[next_id]
        chain.append((entry, where))
        next_id = entry.parent_id
    return chain, None


def _carries(row: AgentMessage) -> bool:
    """Whether a row is the last of an entry's rows (the one carrying it)."""
    return FORMAT in (row.extras or {})


_GLOB = {ord(c): "\\" + c for c in "*?[]\\"}


def _glob(prefix: str) -> str:
    """``prefix`` with the glob's special characters escaped, for ``SCAN MATCH``."""
    return prefix.translate(_GLOB)
