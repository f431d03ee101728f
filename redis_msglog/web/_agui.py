"""The event stream in AG-UI (https://docs.ag-ui.com), ``?protocol=ag-ui``: what agent UIs
built on CopilotKit, Agent Framework, ADK and Strands front-ends speak.

A connection is one AG-UI run of the conversation (the thread): ``RUN_STARTED``, then a
``MESSAGES_SNAPSHOT`` of the visible view (unless it resumes), then each committed
message as it lands: ``TEXT_MESSAGE_START`` / ``_CONTENT`` / ``_END``, its tool calls as
``TOOL_CALL_START`` / ``_ARGS`` / ``_END``, a tool result as ``TOOL_CALL_RESULT``. An edit
(a retract, a compaction, a redaction...) is a ``CUSTOM`` event named ``msglog.edit``
and a new ``MESSAGES_SNAPSHOT`` of the view after it. The run never finishes: the log
goes on.

A draft (docs/drafts.md) streams as a text message whose id is the draft's:
``TEXT_MESSAGE_START`` at its start, ``TEXT_MESSAGE_CONTENT`` per text delta, a
``REASONING_MESSAGE_*`` message (id ``<draft>-reasoning``) for its reasoning,
``TOOL_CALL_START`` / ``_ARGS`` per tool call, all closed at its end, then ``CUSTOM``
``msglog.draft`` (its outcome and seq); its committed message is then ``CUSTOM``
``msglog.commit`` only (the client has its text), and a snapshot names it by the draft's
id too. Other messages are ``msglog-<seq>``: unique, and the same on every connection.

AG-UI reserves a "resumable" capability and defines no mechanism (its events carry no
position). Here the SSE ``id`` of the last event of each item is our resume id
(docs/drafts.md): a client reconnecting with ``Last-Event-ID`` gets the rest exactly
once, after ``RUN_STARTED`` and the starts of the draft messages and parts it had open
(the verifier of ``@ag-ui/client`` needs them open; its reducer keeps what it holds).
The events of one item carry no id before its last one, so a cut inside an item resends
it from its start. Validated in the tests against the ``ag-ui-protocol`` models and the
``@ag-ui/client`` runtime under Node."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import orjson

from ..drafts import DraftDelta, DraftEnded, DraftEvent, DraftStarted
from ..edits import EditEntry, Entry
from ..models import StoredMessage

PROTOCOL = "ag-ui"


def message_id(row: StoredMessage) -> str:
    """A message's AG-UI id: its draft's id when it was streamed as a draft (so the
    message a client built from the draft's events and the committed one are one),
    else ``msglog-<seq>``."""
    return row.draft if row.draft is not None else f"msglog-{row.seq}"


def _text(row: StoredMessage) -> str:
    return row.text


def _calls(row: StoredMessage) -> list[dict[str, Any]]:
    return [
        {
            "id": call.id,
            "type": "function",
            "function": {"name": call.name, "arguments": _arguments(call.arguments, call.args)},
        }
        for call in row.tool_calls or ()
    ]


def _arguments(arguments: str | None, args: Any) -> str:
    return arguments if arguments is not None else orjson.dumps(args).decode()


def message(row: StoredMessage) -> dict[str, Any]:
    """The AG-UI message of a stored row (for ``MESSAGES_SNAPSHOT``)."""
    if row.role == "tool":
        return {
            "id": message_id(row),
            "role": "tool",
            "content": _text(row),
            "toolCallId": row.tool_call_id or "",
        }
    found: dict[str, Any] = {"id": message_id(row), "role": row.role, "content": _text(row)}
    if row.name is not None:
        found["name"] = row.name
    if row.role == "assistant" and row.tool_calls:
        found["toolCalls"] = _calls(row)
    return found


def run_started(conversation: str, run_id: str) -> dict[str, Any]:
    return {"type": "RUN_STARTED", "threadId": conversation, "runId": run_id}


def snapshot(rows: Iterable[StoredMessage]) -> dict[str, Any]:
    return {"type": "MESSAGES_SNAPSHOT", "messages": [message(row) for row in rows]}


def row_events(row: StoredMessage) -> list[dict[str, Any]]:
    """The events of one committed message."""
    ident = message_id(row)
    if row.role == "tool":
        return [{
            "type": "TOOL_CALL_RESULT", "messageId": ident,
            "toolCallId": row.tool_call_id or "", "content": _text(row), "role": "tool",
        }]  # fmt: skip
    start: dict[str, Any] = {"type": "TEXT_MESSAGE_START", "messageId": ident, "role": row.role}
    if row.name is not None:
        start["name"] = row.name
    events = [start]
    text = _text(row)
    if text:  # a delta is never empty
        events.append({"type": "TEXT_MESSAGE_CONTENT", "messageId": ident, "delta": text})
    events.append({"type": "TEXT_MESSAGE_END", "messageId": ident})
    for call in _calls(row):
        events.append({
            "type": "TOOL_CALL_START", "toolCallId": call["id"],
            "toolCallName": call["function"]["name"], "parentMessageId": ident,
        })  # fmt: skip
        if call["function"]["arguments"]:
            events.append({
                "type": "TOOL_CALL_ARGS", "toolCallId": call["id"],
                "delta": call["function"]["arguments"],
            })  # fmt: skip
        events.append({"type": "TOOL_CALL_END", "toolCallId": call["id"]})
    return events


def edit_event(entry: EditEntry) -> dict[str, Any]:
    """An edit, as AG-UI's extension point: a ``CUSTOM`` event (a snapshot follows)."""
    value = entry.model_dump(mode="json", by_alias=True, exclude={"row"}, exclude_none=True)
    return {"type": "CUSTOM", "name": "msglog.edit", "value": value}


def sse(events: list[dict[str, Any]], resume: str | None) -> bytes:
    """The SSE bytes of ``events``: one ``data`` line each (the type is inside, as AG-UI's
    own encoder writes it), the last one carrying ``id: <resume>`` when given."""
    out = []
    for n, event in enumerate(events):
        last = resume is not None and n == len(events) - 1
        head = b"id: " + str(resume).encode() + b"\n" if last else b""
        out.append(head + b"data: " + orjson.dumps(event) + b"\n\n")
    return b"".join(out)


def entry_events(row: Entry) -> list[dict[str, Any]] | None:
    """A message's events; ``None`` for an edit (its snapshot needs a read)."""
    if isinstance(row, EditEntry):
        return None
    return row_events(row)


ROLES = ("developer", "system", "assistant", "user")


@dataclass(slots=True)
class Open:
    """What a connection has opened of one draft: its text message, its reasoning
    message, its tool calls (each closed at the draft's end)."""

    text: bool = False
    reasoning: bool = False
    calls: list[str] = field(default_factory=list)


def reasoning_id(draft: str) -> str:
    return f"{draft}-reasoning"


def draft_events(event: DraftEvent, opened: dict[str, Open]) -> list[dict[str, Any]]:
    """A draft's event in AG-UI: its start opens a text message (id: the draft's id), a
    delta adds to it, to its reasoning message or to one of its tool calls (each opened
    on its first piece), its end closes what was opened and says how it ended
    (``CUSTOM`` ``msglog.draft``: the outcome and the seq of its message)."""
    if isinstance(event, DraftStarted):
        opened[event.draft] = Open(text=True)
        role = event.role if event.role in ROLES else "assistant"
        return [{"type": "TEXT_MESSAGE_START", "messageId": event.draft, "role": role}]
    state = opened.setdefault(event.draft, Open())
    if isinstance(event, DraftEnded):
        del opened[event.draft]
        out = [{"type": "TOOL_CALL_END", "toolCallId": call} for call in state.calls]
        if state.reasoning:
            out.append({"type": "REASONING_MESSAGE_END", "messageId": reasoning_id(event.draft)})
        if state.text:
            out.append({"type": "TEXT_MESSAGE_END", "messageId": event.draft})
        value = {"messageId": event.draft, "outcome": event.outcome, "seq": event.seq}
        return [*out, {"type": "CUSTOM", "name": "msglog.draft", "value": value}]
    return _delta_events(event, state)


def _delta_events(delta: DraftDelta, state: Open) -> list[dict[str, Any]]:
    if delta.kind == "tool_call":
        call = delta.tool_call_id or ""
        out: list[dict[str, Any]] = []
        if call not in state.calls:
            state.calls.append(call)
            out.append({
                "type": "TOOL_CALL_START", "toolCallId": call,
                "toolCallName": delta.tool_name or "", "parentMessageId": delta.draft,
            })  # fmt: skip
        return [*out, {"type": "TOOL_CALL_ARGS", "toolCallId": call, "delta": delta.text}]
    if delta.kind == "reasoning":
        ident = reasoning_id(delta.draft)
        out = []
        if not state.reasoning:
            state.reasoning = True
            out.append({"type": "REASONING_MESSAGE_START", "messageId": ident, "role": "reasoning"})
        return [
            *out,
            {"type": "REASONING_MESSAGE_CONTENT", "messageId": ident, "delta": delta.text},
        ]
    out = []
    if not state.text:
        state.text = True
        out.append({"type": "TEXT_MESSAGE_START", "messageId": delta.draft, "role": "assistant"})
    return [*out, {"type": "TEXT_MESSAGE_CONTENT", "messageId": delta.draft, "delta": delta.text}]


def committed(row: StoredMessage) -> dict[str, Any]:
    """The commit of a message this connection was sent as a draft: its text is there."""
    value = {"messageId": message_id(row), "seq": row.seq, "interrupted": row.interrupted}
    return {"type": "CUSTOM", "name": "msglog.commit", "value": value}


def reopened(
    draft: str, spelled: list[DraftDelta], opened: dict[str, Open]
) -> list[dict[str, Any]]:
    """A resumed connection's opening for a draft it was in: its message and the parts
    ``spelled`` had opened, started again (AG-UI's reducer keeps what it holds of them;
    its verifier needs them open before more content)."""
    opened[draft] = state = Open(text=True)
    out = [{"type": "TEXT_MESSAGE_START", "messageId": draft, "role": "assistant"}]
    for delta in spelled:
        out += [e for e in _delta_events(delta, state) if e["type"].endswith("_START")]
    return out
