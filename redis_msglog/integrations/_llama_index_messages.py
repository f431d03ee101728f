"""LlamaIndex ``ChatMessage`` <-> :class:`~redis_msglog.AgentMessage`: what both LlamaIndex
chat stores store (``llama_index.py`` re-exports the public names)."""

from __future__ import annotations

from typing import Any

from llama_index.core.base.llms.types import ChatMessage
from pydantic import ValidationError

from .._core.args import check_type
from ..formats._common import apply_patch, make_patch
from ..models import AgentMessage
from ..parts import decode_base64, encode_base64
from ._llama_index_taken import _blocks_llama_index_takes

__all__ = ["FORMAT", "from_llama_index", "to_llama_index"]

FORMAT = "llama_index"
"""The key of this format's merge patches in ``extras``."""

_ROLES = {
    "system": "system",
    "developer": "system",
    "user": "user",
    "assistant": "assistant",
    "chatbot": "assistant",
    "model": "assistant",
    "tool": "tool",
    "function": "tool",
}
_WHOLE = "$json"  # in a patch: the message's whole JSON, used as it is


def from_llama_index(message: ChatMessage) -> AgentMessage:
    """The :class:`~redis_msglog.AgentMessage` of a LlamaIndex ``ChatMessage``: the
    neutral fields filled where they have a place, and a merge patch in
    ``extras["llama_index"]`` for the rest, so :func:`to_llama_index` gives back an equal
    ``ChatMessage`` (its ``model_dump(mode="json")`` is the same)."""
    check_type("message", message, ChatMessage, "a LlamaIndex ChatMessage")
    native: dict[str, Any] = message.model_dump(mode="json")
    role = str(native.get("role", "user"))
    neutral: dict[str, Any] = {"role": _ROLES.get(role, "user")}
    parts: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    for block in native.get("blocks") or []:
        if block.get("block_type") == "tool_call":
            call = _tool_call(block)
            if call is not None:
                calls.append(call)
        elif (part := _part(block)) is not None:
            parts.append(part)
    if len(parts) == 1 and parts[0]["type"] == "text":
        neutral["content"] = parts[0]["text"]
    else:
        neutral["content"] = parts if parts else ""
    if calls and neutral["role"] == "assistant":
        neutral["tool_calls"] = calls
    kwargs = native.get("additional_kwargs") or {}
    if neutral["role"] == "tool" and isinstance(kwargs.get("tool_call_id"), str):
        neutral["tool_call_id"] = kwargs["tool_call_id"]
    msg = AgentMessage.model_validate(neutral)
    rendered = _render(msg)
    patch = make_patch(rendered, native)
    if patch is not None and _dump(apply_patch(rendered, patch)) != native:
        # A merge patch cannot say "null" inside an object (``additional_kwargs`` such as
        # ``{"k": None}``): such a message keeps its whole JSON instead.
        patch = {_WHOLE: native}
    return msg if patch is None else msg.model_copy(update={"extras": {FORMAT: patch}})


def to_llama_index(message: AgentMessage) -> ChatMessage:
    """The LlamaIndex ``ChatMessage`` of a message: the one :func:`from_llama_index` took,
    for a message it made; for any other (a message another worker appended, imported from
    OpenAI, Anthropic...) its text, images, audio, files, tool calls (``ToolCallBlock``)
    and tool results (``additional_kwargs["tool_call_id"]``). Thinking and reasoning of
    other origins are left out (they go back only to the provider that produced them)."""
    check_type("message", message, AgentMessage, "an AgentMessage")
    rendered = _render(message)
    patch = (message.extras or {}).get(FORMAT)
    if isinstance(patch, dict) and _WHOLE in patch:
        candidates = [patch[_WHOLE], rendered]
    else:
        candidates = [rendered if patch is None else apply_patch(rendered, patch), rendered]
    for data in candidates:
        try:
            return ChatMessage.model_validate(data)
        except ValidationError:
            continue  # a patch, or a value, LlamaIndex refuses (written by another worker)
    return ChatMessage.model_validate(_blocks_llama_index_takes(rendered))


def _dump(data: dict[str, Any]) -> dict[str, Any]:
    dumped: dict[str, Any] = ChatMessage.model_validate(data).model_dump(mode="json")
    return dumped


def _b64(value: Any) -> bytes | None:
    if not isinstance(value, str):
        return None
    try:
        return decode_base64(value)
    except ValueError:
        return None  # not canonical base64: kept by the patch only


def _media(block: dict[str, Any], field: str, kind: str) -> dict[str, Any] | None:
    data = _b64(block.get(field))
    if data is not None:
        return {"type": kind, "data": data}
    if isinstance(block.get("url"), str) and block.get(field) is None:
        return {"type": kind, "url": block["url"]}
    return None  # a local path, or nothing: kept by the patch only


def _part(block: dict[str, Any]) -> dict[str, Any] | None:
    kind = block.get("block_type")
    if kind == "text":
        return {"type": "text", "text": block.get("text", "")}
    if kind == "image" and (part := _media(block, "image", "image")) is not None:
        return {**part, "media_type": block.get("image_mimetype"), "detail": block.get("detail")}
    if kind == "audio" and (part := _media(block, "audio", "audio")) is not None:
        fmt = block.get("format")
        return {**part, "media_type": f"audio/{fmt}" if isinstance(fmt, str) else None}
    if kind == "document" and (part := _media(block, "data", "file")) is not None:
        title = block.get("title")
        return {**part, "media_type": block.get("document_mimetype"), "filename": title}
    if kind == "thinking":
        info = block.get("additional_information") or {}
        signature = info.get("signature")
        return {
            "type": "thinking",
            "thinking": block.get("content") or "",
            "signature": signature if isinstance(signature, str) else None,
        }
    return None  # video, cache, citable, citation: kept by the patch only


def _tool_call(block: dict[str, Any]) -> dict[str, Any] | None:
    if not isinstance(block.get("tool_call_id"), str):
        return None
    kwargs = block.get("tool_kwargs")
    call: dict[str, Any] = {"id": block["tool_call_id"], "name": block.get("tool_name", "")}
    if isinstance(kwargs, str):
        call["arguments"] = kwargs
    else:
        call["args"] = kwargs
    return call


def _render(msg: AgentMessage) -> dict[str, Any]:
    """The ``ChatMessage`` JSON of a neutral message (before its patch)."""
    blocks: list[dict[str, Any]] = []
    if isinstance(msg.content, str):
        blocks.append({"block_type": "text", "text": msg.content})
    else:
        for part in msg.content:
            if (block := _block(part.model_dump())) is not None:
                blocks.append(block)
    for call in msg.tool_calls or []:
        kwargs = call.args if isinstance(call.args, dict) else call.arguments or {}
        blocks.append(
            {
                "block_type": "tool_call",
                "tool_call_id": call.id,
                "tool_name": call.name,
                "tool_kwargs": kwargs,
            }
        )
    kwargs_out: dict[str, Any] = {}
    if msg.role == "tool" and msg.tool_call_id is not None:
        kwargs_out["tool_call_id"] = msg.tool_call_id
    return {"role": msg.role, "additional_kwargs": kwargs_out, "blocks": blocks}


def _block(part: dict[str, Any]) -> dict[str, Any] | None:
    kind = part["type"]
    # Binary parts' data are bytes; a redacted thinking part's is a string (not sent).
    data = encode_base64(part["data"]) if isinstance(part.get("data"), bytes) else None
    if kind == "text":
        return {"block_type": "text", "text": part["text"]}
    if kind == "refusal":
        return {"block_type": "text", "text": part["refusal"]}
    if kind == "image":
        return {
            "block_type": "image",
            "image": data,
            "url": part["url"],
            "image_mimetype": part["media_type"],
            "detail": part["detail"],
        }
    if kind == "audio":
        media_type = part["media_type"] or ""
        fmt = media_type.removeprefix("audio/") if media_type.startswith("audio/") else None
        return {"block_type": "audio", "audio": data, "url": part["url"], "format": fmt}
    if kind == "file":
        return {
            "block_type": "document",
            "data": data,
            "url": part["url"],
            "title": part["filename"],
            "document_mimetype": part["media_type"],
        }
    # thinking, redacted thinking, reasoning: only their own format's patch restores them
    # (a ThinkingBlock reaches whatever LLM the memory feeds; never another provider's).
    return None
