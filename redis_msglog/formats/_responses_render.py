"""Rendering neutral messages as OpenAI Responses items: a message's parts, an
assistant turn (its content in order, then its calls with any reasoning recorded
between them), a tool result. :mod:`.responses` builds ``to_responses`` and
``message_items`` on these, and the importer renders what it read to keep only the
fields the rendering does not give back (the patch)."""

from __future__ import annotations

from typing import Any

import orjson

from ..models import AgentMessage, ToolCall
from ..parts import (
    ContentPart,
    FilePart,
    ImagePart,
    ReasoningPart,
    RefusalPart,
    TextPart,
    encode_base64,
)
from ._common import (
    MISSING_RESULT,
    apply_patch,
    data_url,
    message_extras,
    normalize_args,
    with_extras,
)

FORMAT = "responses"
PROVIDER = "openai"
AFTER_CALLS = "$after_calls"


def render_input_part(part: ContentPart) -> dict[str, Any] | None:
    """A part of a user, system or tool-output content list (``input_*``)."""
    out: dict[str, Any]
    if isinstance(part, TextPart):
        out = {"type": "input_text", "text": part.text}
    elif isinstance(part, ImagePart):
        out = {"type": "input_image", "detail": part.detail or "auto"}
        if part.file_id is not None:
            out["file_id"] = part.file_id
        else:
            url = part.url if part.data is None else data_url(part.media_type, part.data)
            out["image_url"] = url
    elif isinstance(part, FilePart):
        out = {"type": "input_file"}
        if part.data is not None:
            out["file_data"] = (
                encode_base64(part.data)
                if part.media_type is None
                else data_url(part.media_type, part.data)
            )
        elif part.url is not None:
            out["file_url"] = part.url
        else:
            out["file_id"] = part.file_id
        if part.filename is not None:
            out["filename"] = part.filename
    else:  # audio (the input item types take none), refusals, thinking, reasoning
        return None
    return _patched(out, part)


def render_output_part(part: ContentPart) -> dict[str, Any] | None:
    """A part of an assistant output message (``output_text``, ``refusal``)."""
    if isinstance(part, TextPart):
        return _patched({"type": "output_text", "text": part.text, "annotations": []}, part)
    if isinstance(part, RefusalPart):
        return _patched({"type": "refusal", "refusal": part.refusal}, part)
    return None


def render_reasoning(part: ReasoningPart) -> dict[str, Any] | None:
    if part.provider != PROVIDER or part.id is None:
        return None
    out: dict[str, Any] = {
        "type": "reasoning",
        "id": part.id,
        "summary": [{"type": "summary_text", "text": text} for text in part.summary],
    }
    if part.content is not None:
        out["content"] = [{"type": "reasoning_text", "text": text} for text in part.content]
    if part.encrypted_content is not None:
        out["encrypted_content"] = part.encrypted_content
    return _patched(out, part)


def _patched(out: dict[str, Any], part: ContentPart) -> dict[str, Any]:
    patch = (part.extras or {}).get(FORMAT)
    if isinstance(patch, dict) and AFTER_CALLS in patch:
        patch = {k: v for k, v in patch.items() if k != AFTER_CALLS}
    result: dict[str, Any] = apply_patch(out, patch) if patch is not None else out
    return result


def _after_calls(part: ContentPart) -> int | None:
    patch = (part.extras or {}).get(FORMAT)
    return patch.get(AFTER_CALLS) if isinstance(patch, dict) else None


def render_call(call: ToolCall) -> dict[str, Any]:
    arguments = call.arguments
    if arguments is None:
        arguments = orjson.dumps(normalize_args(call.args)).decode()
    out = {"type": "function_call", "call_id": call.id, "name": call.name, "arguments": arguments}
    result: dict[str, Any] = with_extras(out, call.extras, FORMAT)
    return result


def render_output_message(msg: AgentMessage, parts: list[ContentPart]) -> dict[str, Any] | None:
    if msg.id is not None and msg.id.startswith("msg"):
        # The output form needs the item id, and the API takes only its own ("msg_...").
        content = [p for p in map(render_output_part, parts) if p is not None]
        item: dict[str, Any] = {
            "type": "message",
            "role": "assistant",
            "id": msg.id,
            "status": "completed",
            "content": content,
        }
    else:  # the short form takes no output parts: the text, as a string
        text = "".join(p.text for p in parts if isinstance(p, TextPart))
        if not text:
            return None
        item = {"role": "assistant", "content": text}
    return item


def render_assistant(msg: AgentMessage) -> list[dict[str, Any]]:
    """An assistant message as items: its content in order (reasoning items, and each run
    of other parts as one message item; the message's id and patch go to the first), then
    its calls (with any reasoning recorded between them)."""
    later: dict[int, list[dict[str, Any]]] = {}  # reasoning to place after call n
    if isinstance(msg.content, str):
        items = _render_short_assistant(msg)
    else:
        items = _render_assistant_parts(msg, msg.content, later)
    return items + _render_calls(msg.tool_calls or [], later)


def _render_short_assistant(msg: AgentMessage) -> list[dict[str, Any]]:
    """String content: the short form, or no item for an empty string (unless the patch
    says otherwise)."""
    item = {"role": "assistant", "content": msg.content} if msg.content else None
    item = with_extras(item, message_extras(msg, FORMAT), FORMAT)
    return [] if item is None else [item]


def _render_assistant_parts(
    msg: AgentMessage, parts: list[ContentPart], later: dict[int, list[dict[str, Any]]]
) -> list[dict[str, Any]]:
    """The items of a content list, in order. A reasoning item recorded between the
    turn's calls goes to ``later`` (by how many calls precede it) instead."""
    items: list[dict[str, Any]] = []
    first = True  # the first message item carries the message's id and patch
    for segment in _segments(parts):
        if not isinstance(segment, ReasoningPart):
            item = render_output_message(msg if first else _anonymous(msg), segment)
            if first:
                item = with_extras(item, message_extras(msg, FORMAT), FORMAT)
                first = False
            if item is not None:
                items.append(item)
            continue
        rendered = render_reasoning(segment)
        after = _after_calls(segment)
        if rendered is None:
            continue  # not OpenAI's, or without an id: Responses cannot take it
        if after is None:
            items.append(rendered)
        else:
            later.setdefault(after, []).append(rendered)
    return items


def _segments(parts: list[ContentPart]) -> list[ReasoningPart | list[ContentPart]]:
    """The parts in order, grouped as items: each reasoning part alone, each run of other
    parts (never empty) together."""
    segments: list[ReasoningPart | list[ContentPart]] = []
    for part in parts:
        if isinstance(part, ReasoningPart):
            segments.append(part)
        elif segments and isinstance(segments[-1], list):
            segments[-1].append(part)
        else:
            segments.append([part])
    return segments


def _render_calls(
    calls: list[ToolCall], later: dict[int, list[dict[str, Any]]]
) -> list[dict[str, Any]]:
    """The calls in order, each followed by the reasoning recorded after it."""
    items: list[dict[str, Any]] = []
    for n, call in enumerate(calls, start=1):
        items.append(render_call(call))
        items.extend(later.pop(n, []))
    for rest in later.values():  # a hint past the last call: keep the item at the end
        items.extend(rest)
    return items


def _anonymous(msg: AgentMessage) -> AgentMessage:
    return msg.model_copy(update={"id": None, "extras": None})


def render_input_message(msg: AgentMessage) -> dict[str, Any]:
    content: Any = msg.content
    if not isinstance(content, str):
        content = [p for p in map(render_input_part, content) if p is not None]
    result: dict[str, Any] = with_extras(
        {"role": msg.role, "content": content}, message_extras(msg, FORMAT), FORMAT
    )
    return result


def render_output(call_id: str, msg: AgentMessage | None) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "function_call_output", "call_id": call_id}
    if msg is None:
        out["output"] = MISSING_RESULT
        return out
    if isinstance(msg.content, str):
        out["output"] = msg.content
    else:
        out["output"] = [p for p in map(render_input_part, msg.content) if p is not None]
    result: dict[str, Any] = with_extras(out, message_extras(msg, FORMAT, "output"), FORMAT)
    return result
