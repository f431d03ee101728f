"""The reading half of :class:`~redis_msglog.integrations.pydantic_ai.RedisConversationStore`:
the store's state, its logs, the attributes read before a write, and finding entries
(``read_entry``, ``read_history``) through the entry index and the rows.
Reached only through :mod:`redis_msglog.integrations.pydantic_ai`, which checks that the
extra is installed first."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic_ai.conversation_store import ConversationEntry

from .._async import AsyncMessageLog
from ..edits import Entry
from ..errors import LogRewoundError
from ..models import StoredMessage
from ._clients import LoopClients
from ._pydantic_ai_rows import row_entry
from ._pydantic_ai_where import Located, Seen, walk_parents


class EntryReads:
    """The store's state (set by ``RedisConversationStore.__init__``) and its reads."""

    prefix: str
    _clients: LoopClients
    _options: dict[str, Any]
    _ttl_ms: int | None
    _where: dict[str, Located]  # entry id -> location, as last seen
    _seen: dict[str, Seen]  # conversation -> its attributes, as last read
    _last_chain: list[tuple[ConversationEntry, Located]]  # the last history read

    def log(self, conversation_id: str) -> AsyncMessageLog:
        """The log of a conversation."""
        return AsyncMessageLog(
            self._clients.get(), conversation_id, prefix=self.prefix, **self._options
        )

    def _entry_key(self, entry_id: str) -> str:
        # A scoped store's index is under its top scope's hash tag, which a tenant's ACL
        # pattern (~<prefix>:{<tenant>:*) covers: no key outside the tenant's.
        scope = self._options.get("scope")
        tag = f":{{{scope[0]}:}}" if scope else ""
        return f"{self.prefix}{tag}:pydantic-ai:entry:{entry_id}"

    def _remember(self, entry_id: str | None, where: Located | None) -> None:
        if entry_id is not None and where is not None:
            if len(self._where) > 10_000:
                self._where.clear()
            self._where[entry_id] = where

    async def _read_attrs(self, log: AsyncMessageLog) -> Seen:
        """The conversation's attributes and last seq (one round trip), remembered for the
        write that follows and for the entries they locate."""
        seen = Seen.of(await log.attrs())
        for entry_id, where in seen.where.items():
            self._remember(entry_id, where)
        self._remember(seen.head_id, seen.head)
        if len(self._seen) > 10_000:
            self._seen.clear()
        self._seen[log.conversation] = seen
        return seen

    # -- entries -------------------------------------------------------------------------

    async def _index(self, located: dict[str, Located]) -> None:
        """Write where each new entry will be (``read_entry``'s index) BEFORE the call
        that writes it: an index key of a call that then fails names a row that does not
        carry the entry, which ``read_entry`` checks."""
        if not located:
            return
        async with self._clients.get().pipeline(transaction=False) as pipe:
            for entry_id, where in located.items():
                pipe.set(self._entry_key(entry_id), where.dump(), px=self._ttl_ms)
            await pipe.execute()

    async def _locate(self, entry_id: str) -> Located | None:
        if (where := self._where.get(entry_id)) is not None:
            return where
        where = Located.load(await self._clients.get().get(self._entry_key(entry_id)))
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
        self, where: Located, limit: int | None, entries: Sequence[Entry] | None = None
    ) -> list[tuple[ConversationEntry, Located]]:
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
            found: dict[str, tuple[ConversationEntry, Located]] = {}
            for row in entries:
                if isinstance(row, StoredMessage) and (entry := row_entry(row)) is not None:
                    found[entry.id] = (entry, Located(where.conversation, row.seq))
            chain, missing = walk_parents(found, where, limit)
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

    async def _chain_to(self, where: Located) -> list[tuple[ConversationEntry, Located]]:
        """The history ending at ``where``: a prefix of the last history read (a branch
        back, right after the ABC read the history) or one read."""
        for index, (_, located) in enumerate(self._last_chain):
            if located == where:
                return self._last_chain[: index + 1]
        return await self._chain(where, None)
