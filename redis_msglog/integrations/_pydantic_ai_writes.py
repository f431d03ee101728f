"""The writing half of :class:`~redis_msglog.integrations.pydantic_ai.RedisConversationStore`:
the one atomic call of the log that stores new entries and the record (an append, the
edit moving the view to a new head, or a fork).
Reached only through :mod:`redis_msglog.integrations.pydantic_ai`, which checks that the
extra is installed first."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson
from pydantic_ai.conversation_store import (
    ConversationConflict,
    ConversationEntry,
    ConversationRecord,
)

from .._async import AsyncMessageLog
from .._core.read.views import MAX_RETRACT
from ..edits import LogView
from ..errors import LogRewoundError
from ._pydantic_ai_entries import EntryReads
from ._pydantic_ai_where import (
    HEAD,
    RECORD,
    RECORD_ATTR,
    REVISION,
    WHERE,
    Located,
    Seen,
    carries_entry,
    locations_from,
    rows_of,
)


class StoreWrites(EntryReads):
    """How a write of the store goes to the log: :meth:`_write` and the calls it picks."""

    # -- one write -----------------------------------------------------------------------

    async def _write(
        self,
        log: AsyncMessageLog,
        record: ConversationRecord,
        new_entries: Sequence[ConversationEntry],
        seen: Seen,
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
            kept = [row.id for row in visible if row.id in ids and carries_entry(row)]
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
        located = locations_from(log.conversation, new_entries, last + 2)
        head = located.get(record.head_id or "", base_at)
        attrs = await self._record_attrs(record, located, head)
        if new_entries:
            await self._index(located)
            await log.append_many(rows_of(new_entries), attrs=attrs, expected_seq=last)
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
        located = locations_from(log.conversation, entries, last + 2)
        head = located.get(record.head_id or "")
        attrs = await self._record_attrs(record, located, head)
        await self._index({e.id: located[e.id] for e in new_entries})
        await log.replace(  # the new entries' usage counted, not the history's copies
            rows_of(entries), attrs=attrs, expected_seq=last, new_from=len(history)
        )
        self._remember_all(record.head_id, head, located)

    async def _copy(
        self,
        log: AsyncMessageLog,
        record: ConversationRecord,
        new_entries: Sequence[ConversationEntry],
        base_at: Located,
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
            if [row.id for row in then if carries_entry(row)] == [entry.id for entry, _ in chain]:
                located = {
                    row.id: Located(log.conversation, 2 + i)
                    for i, row in enumerate(then)
                    if row.id is not None and carries_entry(row)
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
        located: dict[str, Located],
        head: Located | None,
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
            REVISION: record.revision,
            RECORD_ATTR: RECORD.dump_json(record).decode(),
            HEAD: None if head is None else head.dump(),
            WHERE: orjson.dumps(where).decode(),
        }

    def _remember_all(
        self,
        head_id: str | None,
        head: Located | None,
        located: dict[str, Located] | None = None,
    ) -> None:
        for entry_id, where in (located or {}).items():
            self._remember(entry_id, where)
        self._remember(head_id, head)
