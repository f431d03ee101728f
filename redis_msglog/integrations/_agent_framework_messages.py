"""Agent Framework ``Message`` objects as log rows, and back.

Each framework message is one row: a neutral message (role, text, tool calls, tool call
id, message id, author name) that every other reader of the log understands
(``msglog show``, the exporters, ``follow()``), carrying the message's own serialized
form (``Message.to_dict()``) in ``extras["agent_framework"]``, which only this module
reads. A row carrying it comes back as ``Message.from_dict`` of it, so every field
``to_dict`` keeps comes back exactly (``raw_representation``, which ``to_dict``
excludes, does not). A row another writer appended (no such extra) is built from its
neutral fields.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from contextvars import ContextVar
from typing import Any

import orjson
from agent_framework import Content, Message

from ..errors import InvalidMessageError
from ..formats._common import usage_of
from ..models import AgentMessage, StoredMessage

FORMAT = "agent_framework"
"""The key of a row's ``extras`` holding the framework's serialized message."""

_ROLES = frozenset({"system", "user", "assistant", "tool"})


def serialized(message: Message) -> dict[str, Any]:
    """``message.to_dict()``, its failures typed (nothing has been written)."""
    if not isinstance(message, Message):
        raise InvalidMessageError(
            f"save_messages takes agent_framework Message objects, got {type(message).__name__}"
        )
    try:
        data = message.to_dict()
    except Exception as exc:  # the framework's serializer refused the message
        raise InvalidMessageError(f"Message.to_dict() failed: {exc}") from exc
    return dict(data)


RUN_USAGE: ContextVar[Any] = ContextVar("agent_framework_run_usage", default=None)
"""The usage of the run whose messages are being saved (its ``UsageDetails``), set by
the provider's ``after_run`` around the framework's save."""


def with_run_usage(rows: list[dict[str, Any]], details: Any) -> list[dict[str, Any]]:
    """``rows`` with the run's usage on the last assistant row (the framework counts usage
    per run: its connectors report ``input_token_count`` as their provider does)."""
    if not isinstance(details, dict):
        return rows
    usage = usage_of(
        details.get("input_token_count"),
        details.get("output_token_count"),
        details.get("cache_read_input_token_count"),
        details.get("reasoning_output_token_count"),
    )
    carriers = [i for i, row in enumerate(rows) if row["role"] == "assistant"]
    if usage is not None and carriers:
        rows[carriers[-1]] = {**rows[carriers[-1]], "usage": usage}
    return rows


def to_row(message: Message) -> dict[str, Any]:
    """The row of one framework message: its neutral projection plus its own form."""
    data = serialized(message)
    row: dict[str, Any] = {
        "role": _neutral_role(message.role),
        "content": _text(message),
        "extras": {FORMAT: data},
    }
    calls = [_call(c) for c in message.contents if c.type == "function_call" and c.call_id]
    if calls and row["role"] == "assistant":
        row["tool_calls"] = calls
    if row["role"] == "tool":
        ids = [c.call_id for c in message.contents if c.type == "function_result" and c.call_id]
        row["tool_call_id"] = ids[0] if ids else ""
    if isinstance(message.message_id, str):
        row["id"] = message.message_id
    if isinstance(message.author_name, str):
        row["name"] = message.author_name
    return row


def _neutral_role(role: Any) -> str:
    """The framework's role as a neutral one: its four known roles as they are,
    ``developer`` as ``system``, any other (custom) role as ``assistant`` (the exact
    role stays in the serialized form)."""
    text = str(role)
    if text in _ROLES:
        return text
    return "system" if text == "developer" else "assistant"


def _text(message: Message) -> str:
    """What a neutral reader shows: the text contents, or a tool result's text."""
    parts: list[str] = []
    for content in message.contents:
        if content.type == "text" and isinstance(content.text, str):
            parts.append(content.text)
        elif content.type == "function_result":
            result = content.result
            parts.append(result if isinstance(result, str) else _json_text(result))
    return "\n".join(parts)


def _json_text(value: Any) -> str:
    try:
        return orjson.dumps(value).decode()
    except TypeError:
        return str(value)


def _call(content: Content) -> dict[str, Any]:
    call: dict[str, Any] = {"id": content.call_id, "name": content.name or ""}
    arguments = content.arguments
    if isinstance(arguments, str):
        call["arguments"] = arguments
    elif isinstance(arguments, Mapping):
        call["args"] = dict(arguments)
    return call


def from_row(row: AgentMessage) -> Message:
    """The framework message of a row: from its serialized form when it carries one,
    else built from the neutral fields (a message another writer appended)."""
    data = (row.extras or {}).get(FORMAT)
    if isinstance(data, dict):
        try:
            return Message.from_dict(data)
        except Exception:  # a foreign or damaged patch: fall back to the neutral fields
            pass
    return _from_neutral(row)


def _from_neutral(row: AgentMessage) -> Message:
    contents: list[Content] = []
    if row.role == "tool":
        contents.append(
            Content.from_function_result(call_id=row.tool_call_id or "", result=row.text)
        )
    elif row.text:
        contents.append(Content.from_text(row.text))
    for call in row.tool_calls or []:
        arguments: Any = call.arguments if call.arguments is not None else call.args
        contents.append(
            Content.from_function_call(call_id=call.id, name=call.name, arguments=arguments)
        )
    return Message(row.role, contents, author_name=row.name, message_id=row.id)


def from_rows(rows: Sequence[StoredMessage]) -> list[Message]:
    return [from_row(row) for row in rows]


def batch_key(source_id: str, messages: Sequence[Message]) -> str | None:
    """An idempotency key for a batch whose every message has a ``message_id`` (the
    framework's stable ids): the same messages saved again (a retry, a re-save) are
    written once. ``None`` when any message has none: content alone cannot tell a retry
    from a legitimately repeated turn."""
    ids = [m.message_id for m in messages]
    if not ids or any(not isinstance(i, str) or not i for i in ids):
        return None
    digest = hashlib.sha256(orjson.dumps([source_id, ids])).hexdigest()[:32]
    return f"maf:{digest}"
