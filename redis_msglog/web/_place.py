"""Where one event-stream client is, and what it is sent next: exactly once, in order.

A client's place is a resume id (``_core/drafts/cursor.py``): the last seq sent, and
each draft it follows with the last delta sent of it. It catches up from reads (the
drafts' states first, then the rows after its seq, then each draft's deltas after its
position), then takes the shared follower's items, skipping what it sent already and
filling any hole from a read: a row's by seq, a delta's by position. Every item sent
moves the place, and the SSE ``id`` of its event is the place after it, so a reconnect
with ``Last-Event-ID`` resumes exactly there, on any web node.

States are read before rows on purpose: a draft that ended before the states were read
and had a message has its row in the rows read after, so a draft the client followed
that is neither held open nor met as a row ended without a message.
"""

from __future__ import annotations

import collections
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from typing import Any, cast

from .._core.drafts.cursor import Item, Resume
from .._core.drafts.scripts import MAX_DRAFTS
from ..drafts import DraftDelta, DraftEnded, DraftOutcome, DraftStarted
from ..edits import Entry
from ..models import StoredMessage
from ._logs import Logs

_ENDED_KEPT = 1000  # ended drafts remembered, so a late delta of one is not sent
_OUTCOMES = ("committed", "aborted", "interrupted")


@dataclass(frozen=True, slots=True)
class Sent:
    """An item to send, the client's resume id after it, and (a committed message) whether
    the client was sent it as a draft first (then it needs no text again)."""

    item: Item
    resume: str
    streamed: bool = False


class Reads:
    """The reads a client's place fills from: one conversation's rows, drafts and deltas."""

    def __init__(self, logs: Logs, conversation: str) -> None:
        self.logs, self.conversation = logs, conversation

    async def rows(self, after: int, through: int | None) -> AsyncIterator[Entry]:
        """The entries after ``after`` (through ``through``, else to the end of the log as
        it is now), read a page at a time."""
        logs = self.logs
        while through is None or after < through:
            limit = logs.page_size if through is None else min(logs.page_size, through - after)
            rows: list[Entry] = await logs.call(
                self.conversation, "read", after, limit, blobs="refs", view="physical"
            )
            if not rows:
                return
            for row in rows:
                yield row
            after = rows[-1].seq

    async def deltas(self, draft: str, after: int) -> list[DraftDelta]:
        found: list[DraftDelta] = await self.logs.call(
            self.conversation, "draft_deltas", draft, after
        )
        return found

    async def states(self) -> list[Any]:
        """Every draft state held (``DraftState``: ended ones too)."""
        log = self.logs.log(self.conversation)
        states, _ = await self.logs.run(self.conversation, log._core.drafts.states_plan())
        return cast(list[Any], states)


class Place:
    """One client's place (see the module), and the items that move it."""

    def __init__(self, resume: Resume, reads: Reads) -> None:
        self.seq = resume.seq
        self.drafts: dict[str, int] = dict(resume.drafts)  # followed: last delta sent
        self._ended: collections.OrderedDict[str, bool] = collections.OrderedDict()
        self._reads = reads
        self._text: str | None = None  # resume(), kept until the place moves

    def resume(self) -> str:
        if self._text is None:
            self._text = str(Resume(self.seq, self.drafts))
        return self._text

    def move_to(self, seq: int) -> None:
        """Start after seq ``seq`` (an opening that sent the log up to it)."""
        self.seq, self._text = seq, None

    def take(self, item: Item, before: str, after: str) -> Sent | None:
        """The fast path of :meth:`live`, for a client exactly where the shared follower
        was before ``item`` (its resume id ``before``: the common case, a client that
        keeps up): the item is next, whole, and the place becomes ``after``. ``None``
        when the client is elsewhere (then :meth:`live` decides)."""
        if self.resume() != before:
            return None
        if isinstance(item, DraftStarted) and item.draft in self._ended:
            return None
        streamed = self._move(item)
        self._text = after
        return Sent(item, after, streamed)

    async def catch_up(self) -> AsyncIterator[Sent]:
        """What the client is sent before the live items: the rest of the drafts it was
        in, the rows after its seq, the drafts in progress from their first delta."""
        states = await self._reads.states()
        async for row in self._reads.rows(self.seq, None):
            async for sent in self._row(row):
                yield sent
        held = set()
        for state in states:
            held.add(state.id)
            for sent in await self._state(state):
                yield sent
        for draft in [d for d in self.drafts if d not in held]:  # gone: ended, no message
            yield self._end(DraftEnded(draft, "aborted", 0, ""))

    async def _state(self, state: Any) -> list[Sent]:
        draft, ended = state.id, state.status == "ended"
        if draft in self.drafts:
            if not ended:
                return self._deltas(await self._reads.deltas(draft, self.drafts[draft]))
            if state.outcome not in _OUTCOMES:
                return []
            out = await self._rest(draft, state.pos)
            outcome = cast(DraftOutcome, state.outcome)
            return [*out, self._end(DraftEnded(draft, outcome, state.seq, ""))]
        if draft in self._ended or ended or len(self.drafts) >= MAX_DRAFTS:
            self._forget(draft, shown=False)
            return []
        out = [self._apply(DraftStarted(draft, state.role, state.name, ""))]
        return out + self._deltas(await self._reads.deltas(draft, 0))

    async def live(self, item: Item, final: int = 0) -> AsyncIterator[Sent]:
        """What the client is sent for an item of the shared follower (``final``: for a
        draft's end, the last delta the follower handed out of it)."""
        if isinstance(item, DraftStarted):
            new = item.draft not in self.drafts and item.draft not in self._ended
            sent = [self._apply(item)] if new else []
        elif isinstance(item, DraftDelta):
            sent = await self._live_delta(item)
        elif isinstance(item, DraftEnded):
            sent = await self._live_end(item, final)
        else:
            if item.seq > self.seq:
                async for row in self._reads.rows(self.seq, item.seq - 1):  # a hole
                    async for one in self._row(row):
                        yield one
                async for one in self._row(item):
                    yield one
            return
        for one in sent:
            yield one

    async def _live_delta(self, delta: DraftDelta) -> list[Sent]:
        known = self.drafts.get(delta.draft)
        if known is None or delta.pos <= known:
            return []
        hole = await self._rest(delta.draft, delta.pos - 1) if delta.pos > known + 1 else []
        return [*hole, self._apply(delta)]

    async def _live_end(self, ended: DraftEnded, final: int) -> list[Sent]:
        if ended.draft not in self.drafts:
            return []
        return [*await self._rest(ended.draft, final), self._end(ended)]

    async def _row(self, row: Entry) -> AsyncIterator[Sent]:
        draft = row.draft if isinstance(row, StoredMessage) else None
        if draft is not None and draft in self.drafts:  # its end was not met yet
            for sent in await self._rest(draft, None):
                yield sent
            interrupted = cast(StoredMessage, row).interrupted
            outcome: DraftOutcome = "interrupted" if interrupted else "committed"
            yield self._end(DraftEnded(draft, outcome, row.seq, ""))
        streamed = self._move(row)
        yield Sent(row, self.resume(), streamed)

    async def _rest(self, draft: str, final: int | None) -> list[Sent]:
        """The draft's deltas after the last one sent, up to ``final`` (``None``: all)."""
        if final is not None and self.drafts[draft] >= final:
            return []
        rest = await self._reads.deltas(draft, self.drafts[draft])
        return self._deltas(d for d in rest if final is None or d.pos <= final)

    def _deltas(self, deltas: Iterable[DraftDelta]) -> list[Sent]:
        return [self._apply(delta) for delta in deltas]

    def _end(self, ended: DraftEnded) -> Sent:
        self._move(ended)
        return Sent(ended, self.resume())

    def _apply(self, item: DraftStarted | DraftDelta) -> Sent:
        self._move(item)
        return Sent(item, self.resume())

    def _move(self, item: Item) -> bool:
        """Move the place past ``item``, sent; for a committed message, whether it was
        sent as a draft first (its draft's end was)."""
        self._text = None
        if isinstance(item, (DraftStarted, DraftDelta)):
            self.drafts[item.draft] = item.pos if isinstance(item, DraftDelta) else 0
            return False
        if isinstance(item, DraftEnded):
            del self.drafts[item.draft]
            self._forget(item.draft, shown=True)
            return False
        draft = item.draft if isinstance(item, StoredMessage) else None
        streamed = draft is not None and self._ended.get(draft, False)
        if draft is not None:
            self._forget(draft, shown=streamed)
        self.seq = item.seq
        return streamed

    def _forget(self, draft: str, *, shown: bool) -> None:
        self._ended[draft] = shown or self._ended.get(draft, False)
        if len(self._ended) > _ENDED_KEPT:
            self._ended.popitem(last=False)
