"""A draft's deltas as stored (the field ``d`` of its stream's entries: a small JSON
object), a writer's pending deltas coalesced before they are sent, and the message the
deltas spell (the one its commit writes)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import orjson

from ... import errors
from ...drafts import DeltaKind, DraftDelta
from ...models import ToolCall

_KINDS: dict[str, DeltaKind] = {"t": "text", "r": "reasoning", "c": "tool_call"}


def delta_document(
    kind: str, text: str, call_id: str | None, tool_name: str | None
) -> dict[str, Any]:
    """A delta as stored: ``{"k": "t"|"r"|"c", "v": text}``, a tool call's with ``id``
    and, on its first piece, ``n`` (the tool's name)."""
    doc: dict[str, Any] = {"k": kind, "v": text}
    if call_id is not None:
        doc["id"] = call_id
    if tool_name is not None:
        doc["n"] = tool_name
    return doc


def coalesce(pending: list[dict[str, Any]], doc: dict[str, Any]) -> None:
    """Add ``doc`` to ``pending``, joined to the last delta when it continues it (same
    kind, same tool call, no new name): fewer, larger entries for the same text."""
    if pending:
        last = pending[-1]
        if last["k"] == doc["k"] and last.get("id") == doc.get("id") and "n" not in doc:
            last["v"] += doc["v"]
            return
    pending.append(dict(doc))


def encode(pending: Sequence[dict[str, Any]]) -> list[bytes]:
    return [orjson.dumps(doc) for doc in pending]


def decode(draft: str, entries: Iterable[Any], after: int) -> list[DraftDelta]:
    """The deltas of stream entries ``[id, [field, value, ...]]`` whose IDs are
    ``0-<after+1>``, ``0-<after+2>``, ...: :class:`~redis_msglog.CorruptLogError` for
    anything else (an entry written by hand)."""
    out = []
    for raw_id, fields in entries:
        pos = after + 1
        entry_id = raw_id.decode() if isinstance(raw_id, bytes) else raw_id
        if entry_id != f"0-{pos}":
            raise _corrupt(draft, f"entry {entry_id} where 0-{pos} belongs")
        out.append(_delta(draft, pos, fields))
        after = pos
    return out


def _delta(draft: str, pos: int, fields: Any) -> DraftDelta:
    body = fields[1] if isinstance(fields, list) and len(fields) == 2 else None
    try:
        doc = orjson.loads(body) if isinstance(body, (bytes, str)) else None
    except orjson.JSONDecodeError:
        doc = None
    code = doc.get("k") if isinstance(doc, dict) else None
    kind = _KINDS.get(code) if isinstance(code, str) else None
    if kind is None or not isinstance(doc, dict) or not isinstance(doc.get("v"), str):
        raise _corrupt(draft, f"delta {pos} is not one this library writes")
    call_id, name = doc.get("id"), doc.get("n")
    if kind == "tool_call" and not isinstance(call_id, str):
        raise _corrupt(draft, f"tool-call delta {pos} has no id")
    if not isinstance(name, (str, type(None))):
        raise _corrupt(draft, f"delta {pos} has a name that is not text")
    return DraftDelta(draft, pos, kind, doc["v"], call_id if kind == "tool_call" else None, name)


def _corrupt(draft: str, what: str) -> errors.CorruptLogError:
    return errors.CorruptLogError(f"draft {draft}: {what} (written by hand?)")


class Spelled:
    """What deltas spell so far: text, reasoning and tool calls, in order."""

    __slots__ = ("calls", "reasoning", "text")

    def __init__(self) -> None:
        self.text: list[str] = []
        self.reasoning: list[str] = []
        self.calls: dict[str, list[str]] = {}  # id -> [name, arguments...]

    def add(self, kind: str, text: str, call_id: str | None, name: str | None) -> None:
        if kind in ("t", "text"):
            self.text.append(text)
        elif kind in ("r", "reasoning"):
            self.reasoning.append(text)
        else:
            assert call_id is not None
            call = self.calls.setdefault(call_id, [""])
            if name is not None and not call[0]:
                call[0] = name
            call.append(text)

    def tool_calls(self) -> tuple[ToolCall, ...]:
        return tuple(
            ToolCall(id=call_id, name=parts[0], arguments="".join(parts[1:]))
            for call_id, parts in self.calls.items()
        )

    def message(self, role: str, name: str | None) -> dict[str, Any]:
        """The message the deltas spell: ``content`` the text (after a thinking part
        holding the reasoning, when there is any), ``toolCalls`` the calls."""
        text, reasoning = "".join(self.text), "".join(self.reasoning)
        content: Any = text
        if reasoning:
            content = [{"type": "thinking", "thinking": reasoning}]
            if text:
                content.append({"type": "text", "text": text})
        msg: dict[str, Any] = {"role": role, "content": content}
        if name is not None:
            msg["name"] = name
        if self.calls:
            msg["toolCalls"] = [
                {"id": call_id, "name": parts[0], "arguments": "".join(parts[1:])}
                for call_id, parts in self.calls.items()
            ]
        return msg


def spelled(deltas: Iterable[DraftDelta]) -> Spelled:
    out = Spelled()
    for d in deltas:
        out.add(d.kind, d.text, d.tool_call_id, d.tool_name)
    return out
