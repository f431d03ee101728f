"""Pydantic AI entries as log messages (:func:`entry_rows`) and back (:func:`row_entry`):
a message's parts as neutral rows, the last carrying the entry in Pydantic AI's own JSON.
Reached only through :mod:`redis_msglog.integrations.pydantic_ai`, which checks that the
extra is installed first."""

from __future__ import annotations

from typing import Any

import orjson
from pydantic_ai.conversation_store import ConversationEntry
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter

from .._core.args import check_type
from ..formats._common import usage_of
from ..models import AgentMessage
from ..parts import decode_base64

FORMAT = "pydantic_ai"
"""The key of the stored entry in a row's ``extras``."""


def entry_rows(entry: ConversationEntry) -> list[AgentMessage]:
    """The log messages of an entry (at least one): its message's parts as neutral
    messages, the last carrying the entry (``extras["pydantic_ai"]``: ``parent_id``,
    ``kind`` and ``message``, the ``ModelMessagesTypeAdapter`` JSON)."""
    check_type("entry", entry, ConversationEntry, "a ConversationEntry")
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
    check_type("row", row, AgentMessage, "an AgentMessage")
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
    usage = _usage(native.get("usage"))
    if usage:
        row["usage"] = usage
    return row


def _usage(found: Any) -> dict[str, Any] | None:
    """A response's ``RequestUsage`` (its JSON) as a message's usage: Pydantic AI's
    ``input_tokens`` include cache reads and writes and its ``output_tokens`` reasoning,
    as ours do; its ``cost`` (a decimal text, when genai-prices knows the model) is in
    US dollars."""
    if not isinstance(found, dict):
        return None
    return usage_of(
        found.get("input_tokens"),
        found.get("output_tokens"),
        found.get("cache_read_tokens"),
        found.get("output_reasoning_tokens"),
        found.get("cost"),
        "USD",
    )
