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
- **The record** (head, usage, deferred tool requests, scope, branches, revision) is a
  small hash under the conversation's hash tag, ``<prefix>:{X}:pydantic-ai``, with the
  head entry's location, so ``load`` is two round trips (the record, then the history).
- ``read_history`` is one physical read of the log up to the head entry, walking
  ``parent_id`` (entries of other branches in between are skipped);
  ``read_entry`` finds an entry by its id through ``<prefix>:pydantic-ai:entry:<id>``.
- **``branch``** moves the head; the log's view follows (the rows of the history left are
  retracted, or the history is put back with ``replace()``), so other readers see the
  current branch, and the branch left stays in the physical log. **``fork``** is the
  log's ``fork()`` (a copy of the source's view up to the fork point) when the forked
  history is the source's view, else a copy of the history appended to the new log.
- ``delete`` removes the record and ``clear()``s the log's view; the entries stay in the
  physical log (retention: the log's ``ttl``).

**Atomicity.** ``write_record`` appends the new entries (one atomic call), then sets the
record with a compare-and-set on its revision (``ConversationConflict`` on a stale one,
and the rows it appended are retracted). The CAS itself is exact, but the two writes are
not one: a writer that dies between them leaves its entries in the log (unreachable from
any record; other readers of the log see them as messages). Making it one atomic call
needs a facility of the core: see ``docs/integrations.md``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

import orjson
from pydantic import TypeAdapter
from pydantic_ai.conversation_store import (
    ConversationConflict,
    ConversationEntry,
    ConversationRecord,
    ConversationStore,
)
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter
from redis.exceptions import NoScriptError

from .._aio import AsyncMessageLog
from .._keys import ConversationKeys, conversation_of
from ..edits import LogView
from ..errors import InvalidEditError, LogRewoundError, SeqConflictError
from ..models import AgentMessage, StoredMessage
from ..parts import decode_base64
from ._clients import AsyncClient, LoopClients, client_factory

__all__ = ["FORMAT", "RedisConversationStore", "entry_rows", "row_entry"]

FORMAT = "pydantic_ai"
"""The key of the stored entry in a row's ``extras``."""

_RECORD = TypeAdapter(ConversationRecord)
_SUFFIX = ":pydantic-ai"

# KEYS[1]: the record hash. ARGV: the expected revision ("" for none), then "set" with the
# new revision, the record JSON, the head entry's id and location, the locations of the
# other entries it names (branch tips, fork point) and the retention in ms ("" for none);
# or "delete". Returns 1, or 0 (and writes nothing) when the stored revision
# is not the expected one.
_CAS = """
local current = redis.call('HGET', KEYS[1], 'revision') or ''
if current ~= ARGV[1] then return 0 end
if ARGV[2] == 'delete' then
  redis.call('DEL', KEYS[1])
  return 1
end
redis.call('HSET', KEYS[1], 'revision', ARGV[3], 'record', ARGV[4], 'head_id', ARGV[5],
  'head', ARGV[6], 'where', ARGV[7])
if ARGV[8] ~= '' then redis.call('PEXPIRE', KEYS[1], ARGV[8]) end
return 1
"""
_CAS_SHA = hashlib.sha1(_CAS.encode()).hexdigest()


# -- entries as rows ----------------------------------------------------------------------


def entry_rows(entry: ConversationEntry) -> list[AgentMessage]:
    """The log messages of an entry (at least one): its message's parts as neutral
    messages, the last carrying the entry (``extras["pydantic_ai"]``: ``parent_id``,
    ``kind`` and ``message``, the ``ModelMessagesTypeAdapter`` JSON)."""
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


class RedisConversationStore(ConversationStore):
    """A ``ConversationStore`` on the message log (see the module docstring).

    Args:
        redis: a ``redis.asyncio.Redis`` or ``redis.asyncio.cluster.RedisCluster`` client;
            or a function making one, called once per event loop (what :meth:`from_url`
            passes).
        prefix: the log's key prefix (default ``"msglog"``).
        **log_options: the other options of :class:`~redis_msglog.AsyncMessageLog`
            (``ttl``, ``durability``, ``retry``...), for every conversation. With ``ttl``,
            records and the entry index expire with the logs.
    """

    def __init__(
        self,
        redis: AsyncClient | Callable[[], AsyncClient],
        *,
        prefix: str = "msglog",
        **log_options: Any,
    ) -> None:
        ConversationKeys.build(prefix, "x")  # validates the prefix
        self.prefix = prefix
        self._clients = LoopClients(redis)
        self._options = dict(log_options)
        ttl = log_options.get("ttl")
        self._ttl_ms = int(ttl.total_seconds() * 1000) if isinstance(ttl, timedelta) else None
        self._where: dict[str, _Located] = {}  # entry id -> location, as last seen

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

    def _record_key(self, conversation_id: str) -> str:
        keys = ConversationKeys.build(self.prefix, conversation_id)
        return keys.seq.removesuffix(":seq") + _SUFFIX

    def _entry_key(self, entry_id: str) -> str:
        return f"{self.prefix}:pydantic-ai:entry:{entry_id}"

    def _remember(self, entry_id: str | None, where: _Located | None) -> None:
        if entry_id is not None and where is not None:
            if len(self._where) > 10_000:
                self._where.clear()
            self._where[entry_id] = where

    # -- records -------------------------------------------------------------------------

    async def read_record(self, conversation_id: str) -> ConversationRecord | None:
        raw, head, known = await self._clients.get().hmget(
            self._record_key(conversation_id), ["record", "head", "where"]
        )
        if raw is None:
            return None
        record = _RECORD.validate_json(raw)
        for entry_id, where in orjson.loads(known or b"{}").items():
            self._remember(entry_id, _Located(str(where[0]), int(where[1])))
        self._remember(record.head_id, _Located.load(head))
        return record

    async def read_records(
        self, *, scope: str | None = None, limit: int | None = None
    ) -> Sequence[ConversationRecord]:
        """Every record under the prefix (``SCAN``, on a cluster every primary's), newest
        ``updated_at`` first."""
        client = self._clients.get()
        pattern = f"{_glob(self.prefix)}:{{*}}{_SUFFIX}"
        records = []
        async for raw_key in client.scan_iter(match=pattern, count=500):
            key = raw_key.decode() if isinstance(raw_key, bytes) else str(raw_key)
            if conversation_of(self.prefix, key, _SUFFIX) is None:
                continue
            raw = await client.hget(key, "record")
            if raw is not None:
                record = _RECORD.validate_json(raw)
                if scope is None or record.scope == scope:
                    records.append(record)
        records.sort(key=lambda record: record.updated_at, reverse=True)
        return records[:limit]

    async def write_record(
        self,
        record: ConversationRecord,
        *,
        new_entries: Sequence[ConversationEntry] = (),
        expected_revision: str | None,
    ) -> None:
        """Append the new entries (one atomic ``append_many``), then set the record with a
        compare-and-set on its revision; see the module docstring for what is atomic."""
        conversation_id = record.conversation_id
        key = self._record_key(conversation_id)
        current, old_head_id = await self._clients.get().hmget(key, ["revision", "head_id"])
        if _text(current) != (expected_revision or ""):
            raise ConversationConflict(conversation_id)  # nothing written
        log = self.log(conversation_id)
        appended, where = await self._append(log, new_entries) if new_entries else ([], {})
        head: _Located | None = None
        if record.head_id is not None:
            head = where.get(record.head_id) or await self._locate(record.head_id)
            if head is None:
                raise ConversationConflict(conversation_id)  # released by a delete
            if not new_entries:
                head = await self._materialize(log, record, head)
        known = {tip: loc for tip in record.branches if (loc := await self._locate(tip))}
        if record.forked_at is not None and (at := await self._locate(record.forked_at)):
            known[record.forked_at] = at
        if not await self._cas(key, expected_revision or "", record, head, known):
            await self._retract_quietly(log, appended)
            raise ConversationConflict(conversation_id)
        self._remember(record.head_id, head)
        old = _text(old_head_id) or None
        extended = bool(new_entries) and new_entries[0].parent_id == old
        if head is not None and record.head_id != old and not extended:
            await self._follow_head(log, head)

    async def delete_record(self, conversation_id: str, *, expected_revision: str) -> None:
        """Delete the record (compare-and-set on its revision) and ``clear()`` the log's
        view; the entries stay in the physical log until its ``ttl`` (or an operator)
        removes them, so forks of it keep reading."""
        if not await self._cas(self._record_key(conversation_id), expected_revision, None):
            raise ConversationConflict(conversation_id)
        log = self.log(conversation_id)
        if await log.count(view="visible"):
            await log.clear()

    async def _cas(
        self,
        key: str,
        expected: str,
        record: ConversationRecord | None,
        head: _Located | None = None,
        known: dict[str, _Located] | None = None,
    ) -> bool:
        """Set (``record``, with where its head and the other entries it names are) or
        delete (``None``) the record hash if its revision is ``expected`` (``""``: no
        record), in one script on that one key."""
        args: list[str] = [expected, "delete" if record is None else "set"]
        if record is not None:
            args += [
                record.revision,
                _RECORD.dump_json(record).decode(),
                record.head_id or "",
                "" if head is None else head.dump(),
                orjson.dumps(
                    {k: [v.conversation, v.seq] for k, v in (known or {}).items()}
                ).decode(),
                "" if self._ttl_ms is None else str(self._ttl_ms),
            ]
        client = self._clients.get()
        try:
            return bool(await client.evalsha(_CAS_SHA, 1, key, *args))
        except NoScriptError:
            return bool(await client.eval(_CAS, 1, key, *args))

    # -- entries -------------------------------------------------------------------------

    async def _append(
        self, log: AsyncMessageLog, entries: Sequence[ConversationEntry]
    ) -> tuple[list[int], dict[str, _Located]]:
        """Append the entries' rows in one atomic call and index them: the seqs of the
        rows, and where each entry is (the seq of its last row)."""
        rows: list[AgentMessage] = []
        ends: list[int] = []
        for entry in entries:
            rows.extend(entry_rows(entry))
            ends.append(len(rows))
        last = await log.append_many(rows)
        first = last - len(rows) + 1
        where = {
            entry.id: _Located(log.conversation, first + end - 1)
            for entry, end in zip(entries, ends, strict=True)
        }
        async with self._clients.get().pipeline(transaction=False) as pipe:
            for entry_id, located in where.items():
                pipe.set(self._entry_key(entry_id), located.dump(), px=self._ttl_ms)
                self._remember(entry_id, located)
            await pipe.execute()
        return list(range(first, last + 1)), where

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
        self, where: _Located, limit: int | None
    ) -> list[tuple[ConversationEntry, _Located]]:
        """The history ending at the entry at ``where``, with each entry's location."""
        log = self.log(where.conversation)
        window = where.seq if limit is None else min(where.seq, 4 * limit + 4)
        while True:
            start = where.seq - window
            try:
                rows = await log.read(start, window, view="physical")
            except LogRewoundError:
                raise KeyError(f"seq {where.seq} of {where.conversation!r}") from None
            found: dict[str, tuple[ConversationEntry, _Located]] = {}
            for row in rows:
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
        chain.reverse()
        return chain

    # -- keeping the log's view on the head -----------------------------------------------

    async def _materialize(
        self, log: AsyncMessageLog, record: ConversationRecord, head: _Located
    ) -> _Located:
        """For a record whose head is in another conversation's log (a fork): copy the
        history into this one, with the log's ``fork()`` when it is the source's view up to
        the head; return where the head is in this log."""
        if head.conversation == log.conversation:
            return head
        if await log.count():
            # A log already holding messages is not the fork's: keep pointing at the head.
            return head
        chain = await self._chain(head, None)
        source = self.log(head.conversation)
        then = LogView(await source.read(0, head.seq, view="physical")).rows
        try:
            if [row.id for row in then if _carries(row)] == [entry.id for entry, _ in chain]:
                # The source's view when the head was written is the history: fork it.
                await source.fork(log.conversation, at_seq=head.seq)
            else:
                rows = [row for entry, _ in chain for row in entry_rows(entry)]
                await log.append_many(rows, expected_seq=0)
        except SeqConflictError:
            raise ConversationConflict(record.conversation_id) from None
        return _Located(log.conversation, await log.count())

    async def _follow_head(self, log: AsyncMessageLog, head: _Located) -> None:
        """Make the log's view the history ending at ``head`` (after a branch, or a save
        that rewrote the history): retract the rows of the history left when the new one
        is in the view, else put it back with ``replace()``."""
        chain = await self._chain(head, None)
        if head.conversation != log.conversation:  # a fork's head from before the fork
            await log.replace([row for entry, _ in chain for row in entry_rows(entry)])
            return
        wanted = {entry.id for entry, _ in chain}
        visible = await log.all(view="visible")
        kept = [row.id for row in visible if row.id in wanted and _carries(row)]
        if kept == [entry.id for entry, _ in chain]:
            others = [row.seq for row in visible if row.id not in wanted]
            if others:
                await self._retract_quietly(log, others)
            return
        await log.replace([row for entry, _ in chain for row in entry_rows(entry)])

    async def _retract_quietly(self, log: AsyncMessageLog, seqs: list[int]) -> None:
        if seqs:
            with contextlib.suppress(InvalidEditError):  # already out of the view
                await log.retract(seqs)


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


def _text(value: Any) -> str:
    if value is None:
        return ""
    return value.decode() if isinstance(value, bytes) else str(value)


_GLOB = {ord(c): "\\" + c for c in "*?[]\\"}


def _glob(prefix: str) -> str:
    """``prefix`` with the glob's special characters escaped, for ``SCAN MATCH``."""
    return prefix.translate(_GLOB)
