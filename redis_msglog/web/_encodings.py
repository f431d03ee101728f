"""How an event stream spells what a client is sent (``?protocol=``): this library's own
events (docs/web.md), AG-UI's (:mod:`._agui`) or the AI SDK's UI message stream
(:mod:`._aisdk`). One encoding object per connection: AG-UI and the AI SDK keep what the
connection has opened of each draft. A committed entry's bytes are made once per
encoding for every client whose resume id after it is the shared follower's (the
common case), and kept on the shared item."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any, ClassVar

import orjson

from .._core.stored.codec import edit_document, row_document
from ..drafts import DraftDelta, DraftEnded, DraftStarted
from ..edits import EditEntry, Entry, LogView
from ..models import StoredMessage
from . import _agui as agui
from . import _aisdk as aisdk
from ._place import Place, Reads, Sent


@dataclass(eq=False, slots=True)
class Shared:
    """An item of the shared follower, handed to every client of it: the follower's
    resume ids before and after it, the last delta it handed out of a draft that ends
    (``final``), and its event bytes by encoding once made (``cache``)."""

    item: Any
    before: str
    resume: str
    final: int = 0
    cache: dict[tuple[str, bool], bytes] = field(default_factory=dict)


def entry_data(row: Entry) -> dict[str, Any]:
    """The JSON of one committed entry: a message or an edit (contract of docs/web.md)."""
    if isinstance(row, EditEntry):
        return {"seq": row.seq, "at": row.at.isoformat(), "edit": edit_document(row)}
    return {"seq": row.seq, "at": row.at.isoformat(), "message": row_document(row)}


def draft_data(item: DraftStarted | DraftDelta | DraftEnded) -> tuple[bytes, dict[str, Any]]:
    """A draft event's SSE name and JSON (docs/drafts.md)."""
    if isinstance(item, DraftStarted):
        return b"draft-start", {"draft": item.draft, "role": item.role, "name": item.name}
    if isinstance(item, DraftEnded):
        return b"draft-end", {"draft": item.draft, "outcome": item.outcome, "seq": item.seq}
    data: dict[str, Any] = {
        "draft": item.draft, "pos": item.pos, "kind": item.kind, "text": item.text
    }  # fmt: skip
    if item.tool_call_id is not None:
        data["tool_call_id"] = item.tool_call_id
    if item.tool_name is not None:
        data["tool_name"] = item.tool_name
    return b"draft-delta", data


def sse_event(name: bytes, data: Any, resume: str) -> bytes:
    """One Server-Sent Event: ``id`` is the resume id, so ``Last-Event-ID`` resumes
    exactly (a plain seq while no draft is open)."""
    body = orjson.dumps(data)  # one line: orjson never writes a raw newline
    return b"id: %s\nevent: %s\ndata: %s\n\n" % (resume.encode(), name, body)


class Encoding:
    """This library's own events: ``message``, ``edit``, ``draft-start``,
    ``draft-delta`` and ``draft-end`` (docs/web.md, docs/drafts.md)."""

    name: ClassVar[str] = "msglog"
    done = False
    """The stream ends after the last bytes encoded (the AI SDK's, at its answer's end)."""

    def __init__(self, reads: Reads, place: Place) -> None:
        self.reads, self.place = reads, place

    async def opening(self, resumed: bool) -> bytes:
        """What is sent before the catch-up (it may move the place)."""
        return b""

    async def encode(self, sent: Sent, shared: Shared | None) -> bytes:
        """The bytes of one item sent (``shared``: the follower's, when it is one)."""
        if shared is not None and shared.resume == sent.resume:
            key = (self.name, sent.streamed)
            found = shared.cache.get(key)
            if found is None:
                found = shared.cache[key] = await self.bytes_of(sent)
            return found
        return await self.bytes_of(sent)

    async def bytes_of(self, sent: Sent) -> bytes:
        item = sent.item
        if isinstance(item, (DraftStarted, DraftDelta, DraftEnded)):
            return sse_event(*draft_data(item), sent.resume)
        kind = b"edit" if isinstance(item, EditEntry) else b"message"
        return sse_event(kind, entry_data(item), sent.resume)


class AgUiEncoding(Encoding):
    """AG-UI's events (:mod:`._agui`): a run started, the view's snapshot, the messages,
    the drafts as text messages streaming."""

    name = agui.PROTOCOL

    def __init__(self, reads: Reads, place: Place) -> None:
        super().__init__(reads, place)
        self.opened: dict[str, agui.Open] = {}

    async def opening(self, resumed: bool) -> bytes:
        started = agui.run_started(self.reads.conversation, uuid.uuid4().hex)
        if resumed:  # the drafts it was in: their messages and parts opened again
            events = [started]
            for draft, pos in self.place.drafts.items():
                events += agui.reopened(draft, await _spelled(self.reads, draft, pos), self.opened)
            return agui.sse(events, None)
        entries = await _entries(self.reads, None)
        self.place.move_to(entries[-1].seq if entries else 0)
        return agui.sse([started, agui.snapshot(_view(entries))], self.place.resume())

    async def encode(self, sent: Sent, shared: Shared | None) -> bytes:
        if isinstance(sent.item, (DraftStarted, DraftDelta, DraftEnded)):
            return agui.sse(agui.draft_events(sent.item, self.opened), sent.resume)
        return await super().encode(sent, shared)

    async def bytes_of(self, sent: Sent) -> bytes:
        row = sent.item
        if isinstance(row, EditEntry):  # the view after it, read and folded
            view = _view(await _entries(self.reads, row.seq))
            return agui.sse([agui.edit_event(row), agui.snapshot(view)], sent.resume)
        assert isinstance(row, StoredMessage)
        events = [agui.committed(row)] if sent.streamed else agui.row_events(row)
        return agui.sse(events, sent.resume)


class AiSdkEncoding(Encoding):
    """The AI SDK's UI message stream (:mod:`._aisdk`): one answer, then the end."""

    name = aisdk.PROTOCOL

    def __init__(self, reads: Reads, place: Place) -> None:
        super().__init__(reads, place)
        self.answer = aisdk.Answer()

    async def opening(self, resumed: bool) -> bytes:
        if not resumed or not self.place.drafts:
            return b""
        draft, pos = next(iter(self.place.drafts.items()))
        return self.answer.reopen(draft, await _spelled(self.reads, draft, pos))

    async def encode(self, sent: Sent, shared: Shared | None) -> bytes:
        found = self.answer.chunks(sent.item, sent.resume)
        self.done = self.answer.done
        return found


async def _spelled(reads: Reads, draft: str, pos: int) -> list[DraftDelta]:
    """A draft's deltas through ``pos``: what a client resuming it has been sent."""
    return [d for d in await reads.deltas(draft, 0) if d.pos <= pos] if pos else []


async def _entries(reads: Reads, through: int | None) -> list[Entry]:
    """The physical log, through seq ``through`` (``None``: to its end now)."""
    return [row async for row in reads.rows(0, through)]


def _view(entries: list[Entry]) -> list[StoredMessage]:
    """The visible view of ``entries`` (a trimmed log's, from its first entry)."""
    return LogView(entries, start=entries[0].seq if entries else 1).rows


ENCODINGS: dict[str, type[Encoding]] = {
    "msglog": Encoding,
    agui.PROTOCOL: AgUiEncoding,
    aisdk.PROTOCOL: AiSdkEncoding,
}
"""The encodings an event stream speaks, by ``?protocol=``."""
