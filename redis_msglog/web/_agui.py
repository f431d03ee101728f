"""The event stream in AG-UI (https://docs.ag-ui.com), ``?protocol=ag-ui``: what agent UIs
built on CopilotKit, Agent Framework, ADK and Strands front-ends speak.

A connection is one AG-UI run of the conversation (the thread): ``RUN_STARTED``, then a
``MESSAGES_SNAPSHOT`` of the visible view (unless it resumes), then each committed
message as it lands: ``TEXT_MESSAGE_START`` / ``_CONTENT`` / ``_END``, its tool calls as
``TOOL_CALL_START`` / ``_ARGS`` / ``_END``, a tool result as ``TOOL_CALL_RESULT``. An edit
(a retract, a compaction, a redaction...) is a ``CUSTOM`` event named ``msglog.edit``
and a new ``MESSAGES_SNAPSHOT`` of the view after it. The run never finishes: the log
goes on.

AG-UI reserves a "resumable" capability and defines no mechanism (its events carry no
position). Here the SSE ``id`` of the last event of each entry is its seq: a client
reconnecting with ``Last-Event-ID`` gets the entries after it exactly once, whole (the
events of one entry carry no id before its last one, so a cut inside an entry resends
it from its start). Message ids are ``msglog-<seq>``: unique, and the same on every
connection. Validated in the tests against the ``ag-ui-protocol`` models and the
``@ag-ui/client`` runtime under Node."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson

from ..edits import EditEntry, Entry
from ..models import StoredMessage

PROTOCOL = "ag-ui"


def message_id(row: StoredMessage) -> str:
    return f"msglog-{row.seq}"


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


def sse(events: list[dict[str, Any]], resume: int | None) -> bytes:
    """The SSE bytes of ``events``: one ``data`` line each (the type is inside, as AG-UI's
    own encoder writes it), the last one carrying ``id: <resume>`` when given."""
    out = []
    for n, event in enumerate(events):
        head = b"id: %d\n" % resume if resume is not None and n == len(events) - 1 else b""
        out.append(head + b"data: " + orjson.dumps(event) + b"\n\n")
    return b"".join(out)


def entry_events(row: Entry) -> list[dict[str, Any]] | None:
    """A message's events; ``None`` for an edit (its snapshot needs a read)."""
    if isinstance(row, EditEntry):
        return None
    return row_events(row)
