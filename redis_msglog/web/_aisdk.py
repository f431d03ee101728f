"""The event stream as the AI SDK's UI message stream (``?protocol=ai-sdk``): what
``useChat`` reads (https://ai-sdk.dev/docs/ai-sdk-ui/stream-protocol), with its header
``x-vercel-ai-ui-message-stream: v1``.

That protocol streams one answer, not a conversation: a connection carries the
assistant draft in progress (the next one, if it ends before the connection meets it)
from its first delta, then ``finish`` and ``[DONE]``, and the response ends. With no
draft in progress the answer is ``204 No Content``: what ``useChat``'s ``resume``
(``DefaultChatTransport.reconnectToStream``) takes for "no active stream". A reload
replays the answer from its first delta, as the SDK's own resumable streams do;
a client that keeps its place sends ``Last-Event-ID`` (each event's ``id`` is the resume
id) and gets the rest only, after ``start`` and the starts of the parts it had open.

The parts: ``start`` (``messageId``: the draft's id), ``text-*`` and ``reasoning-*``
(ids ``<draft>-text`` and ``<draft>-reasoning``), ``tool-input-start`` /
``tool-input-delta`` per tool call, ``tool-input-available`` at the end (its input the
arguments parsed as JSON, else the text), ``message-metadata`` (``seq``, ``outcome``),
then ``finish`` (``finishReason``: ``"stop"``, or ``"interrupted"`` for an interrupted
draft) or ``abort`` for a draft that ended with no message."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from ..drafts import DraftDelta, DraftEnded, DraftStarted

PROTOCOL = "ai-sdk"
HEADERS = {"x-vercel-ai-ui-message-stream": "v1"}
DONE = b"data: [DONE]\n\n"


def _sse(chunks: list[dict[str, Any]], resume: str) -> bytes:
    head = b"id: " + resume.encode() + b"\n"
    return b"".join(head + b"data: " + orjson.dumps(chunk) + b"\n\n" for chunk in chunks)


@dataclass(slots=True)
class Answer:
    """One connection's answer: the draft it streams and the parts it opened."""

    draft: str | None = None
    text: bool = False
    reasoning: bool = False
    calls: dict[str, tuple[str, list[str]]] = field(default_factory=dict)
    done: bool = False

    def reopen(self, draft: str, spelled: list[DraftDelta]) -> bytes:
        """A resumed answer's opening: ``start`` and the parts ``spelled`` opened."""
        self.draft = draft
        chunks = [{"type": "start", "messageId": draft}]
        for delta in spelled:
            chunks += [c for c in self._delta(delta) if c["type"].endswith("-start")]
        return b"".join(b"data: " + orjson.dumps(c) + b"\n\n" for c in chunks)

    def chunks(self, item: Any, resume: str) -> bytes:
        """An item's chunks: those of the answer's draft, nothing for anything else."""
        if self.done:
            return b""
        if isinstance(item, DraftStarted):
            if self.draft is not None or item.role != "assistant":
                return b""
            self.draft = item.draft
            return _sse([{"type": "start", "messageId": item.draft}], resume)
        if not isinstance(item, (DraftDelta, DraftEnded)) or item.draft != self.draft:
            return b""
        if isinstance(item, DraftDelta):
            return _sse(self._delta(item), resume)
        self.done = True
        return _sse(self._end(item), resume) + DONE

    def _delta(self, delta: DraftDelta) -> list[dict[str, Any]]:
        draft = delta.draft
        if delta.kind == "tool_call":
            call = delta.tool_call_id or ""
            out: list[dict[str, Any]] = []
            if call not in self.calls:
                self.calls[call] = (delta.tool_name or "", [])
                out.append({
                    "type": "tool-input-start", "toolCallId": call, "toolName": self.calls[call][0]
                })  # fmt: skip
            self.calls[call][1].append(delta.text)
            return [
                *out,
                {"type": "tool-input-delta", "toolCallId": call, "inputTextDelta": delta.text},
            ]
        kind = "reasoning" if delta.kind == "reasoning" else "text"
        out = []
        if not getattr(self, kind):
            setattr(self, kind, True)
            out.append({"type": f"{kind}-start", "id": f"{draft}-{kind}"})
        return [*out, {"type": f"{kind}-delta", "id": f"{draft}-{kind}", "delta": delta.text}]

    def _end(self, ended: DraftEnded) -> list[dict[str, Any]]:
        draft, out = ended.draft, []
        for kind in ("text", "reasoning"):
            if getattr(self, kind):
                out.append({"type": f"{kind}-end", "id": f"{draft}-{kind}"})
        for call, (name, pieces) in self.calls.items():
            out.append({
                "type": "tool-input-available", "toolCallId": call, "toolName": name,
                "input": _input("".join(pieces)),
            })  # fmt: skip
        if ended.outcome == "aborted" or ended.seq == 0:
            return [*out, {"type": "abort", "reason": ended.outcome}]
        metadata = {"seq": ended.seq, "outcome": ended.outcome}
        reason = "interrupted" if ended.outcome == "interrupted" else "stop"
        return [
            *out,
            {"type": "message-metadata", "messageMetadata": metadata},
            {"type": "finish", "finishReason": reason},
        ]


def _input(arguments: str) -> Any:
    try:
        return orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return arguments
