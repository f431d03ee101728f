"""OpenAI Chat Completions messages: ``from_openai`` / ``to_openai``.

Kept as the neutral model: roles (``developer`` as ``system``, restored by the patch),
text, ``name``, tool calls (``arguments`` string verbatim) and results, content parts
(``text``, ``image_url``, ``input_audio``, ``file``, ``refusal``). Everything else the
input had (``refusal``/``audio`` on an assistant message, ``prompt_cache_breakpoint``,
``detail``...) rides in ``extras["openai"]`` and comes back only here. Parts Chat cannot
hold are left out by the rules in docs/adapters.md (thinking and reasoning never go to Chat).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from ..models import AgentMessage, ToolCall
from ..parts import (
    AudioPart,
    ContentPart,
    FilePart,
    ImagePart,
    RefusalPart,
    TextPart,
    encode_base64,
)
from ._common import (
    MISSING_RESULT,
    base64_bytes,
    build,
    build_part,
    by_type,
    data_url,
    extras_for,
    invalid,
    mapping,
    message_extras,
    normalize_args,
    openai_name,
    paired,
    parse_data_url,
    refusal_part,
    sequence,
    text_part,
    tool_call_id,
    with_extras,
)
from .responses import join_items

FORMAT = "openai"
_AUDIO_FORMATS = {"audio/wav": "wav", "audio/mpeg": "mp3"}
_AUDIO_TYPES = {"wav": "audio/wav", "mp3": "audio/mpeg"}


# -- rendering (to_openai, and the reference importers diff against) --------------------


def _render_part(part: ContentPart, role: str) -> dict[str, Any] | None:
    """The Chat form of a part in a ``role`` message; ``None`` when Chat cannot hold it
    there (only user messages take media; only assistant messages take refusals)."""
    if isinstance(part, TextPart):
        out: dict[str, Any] = {"type": "text", "text": part.text}
    elif isinstance(part, RefusalPart) and role == "assistant":
        out = {"type": "refusal", "refusal": part.refusal}
    elif isinstance(part, ImagePart) and role == "user" and part.file_id is None:
        url = part.url if part.data is None else data_url(part.media_type, part.data)
        out = {"type": "image_url", "image_url": {"url": url}}
        if part.detail is not None:
            out["image_url"]["detail"] = part.detail
    elif (
        isinstance(part, AudioPart)
        and role == "user"
        and part.data is not None
        and part.media_type in _AUDIO_FORMATS
    ):
        audio = {"data": encode_base64(part.data), "format": _AUDIO_FORMATS[part.media_type]}
        out = {"type": "input_audio", "input_audio": audio}
    elif isinstance(part, FilePart) and role == "user" and part.url is None:
        file: dict[str, Any] = {}
        if part.data is not None:
            file["file_data"] = (
                encode_base64(part.data)
                if part.media_type is None
                else data_url(part.media_type, part.data)
            )
        if part.file_id is not None:
            file["file_id"] = part.file_id
        if part.filename is not None:
            file["filename"] = part.filename
        out = {"type": "file", "file": file}
    else:
        return None
    result: dict[str, Any] = with_extras(out, part.extras, FORMAT)
    return result


def _render_content(msg: AgentMessage, role: str) -> Any:
    if isinstance(msg.content, str):
        return msg.content
    parts = [p for p in (_render_part(part, role) for part in msg.content) if p is not None]
    return parts if parts or not msg.content else ""


def _render_call(call: ToolCall) -> dict[str, Any]:
    arguments = call.arguments
    if arguments is None:
        arguments = orjson.dumps(normalize_args(call.args)).decode()
    out = {
        "id": tool_call_id(call.id),
        "type": "function",
        "function": {"name": call.name, "arguments": arguments},
    }
    result: dict[str, Any] = with_extras(out, call.extras, FORMAT)
    return result


def _render_message(msg: AgentMessage) -> dict[str, Any]:
    item: dict[str, Any] = {"role": msg.role, "content": _render_content(msg, msg.role)}
    name = openai_name(msg.name)
    if name:
        item["name"] = name
    if msg.tool_calls:
        item["tool_calls"] = [_render_call(call) for call in msg.tool_calls]
        if not item["content"]:
            item["content"] = None
    result: dict[str, Any] = with_extras(item, message_extras(msg, FORMAT), FORMAT)
    return result


def _render_result(call_id: str, msg: AgentMessage | None) -> dict[str, Any]:
    if msg is None:
        return {"role": "tool", "tool_call_id": tool_call_id(call_id), "content": MISSING_RESULT}
    item = {
        "role": "tool",
        "tool_call_id": tool_call_id(call_id),
        "content": _render_content(msg, "tool"),
    }
    result: dict[str, Any] = with_extras(item, message_extras(msg, FORMAT), FORMAT)
    return result


def to_openai(messages: Sequence[AgentMessage]) -> list[dict[str, Any]]:
    """OpenAI Chat Completions messages: all roles, ``tool_calls``/``tool_call_id``, content
    parts Chat can hold; see docs/adapters.md for every rule."""
    out: list[dict[str, Any]] = []
    for turn in paired(join_items(messages)):
        out.append(_render_message(turn.message))
        out.extend(_render_result(call_id, result) for call_id, result in turn.results)
    return out


# -- importing --------------------------------------------------------------------------


def _image(p: dict[str, Any], i: int, path: str) -> dict[str, Any]:
    image = mapping(p.get("image_url"), i, f"{path}.image_url")
    url = image.get("url")
    if not isinstance(url, str):
        raise invalid(i, f"{path}.image_url.url", "a string is required")
    part: dict[str, Any] = {"type": "image", "detail": image.get("detail")}
    decoded = parse_data_url(url, i, f"{path}.image_url.url")
    if decoded is None:
        part["url"] = url
    else:
        part["media_type"], part["data"] = decoded
    return part


def _audio(p: dict[str, Any], i: int, path: str) -> dict[str, Any]:
    audio = mapping(p.get("input_audio"), i, f"{path}.input_audio")
    fmt = audio.get("format")
    if fmt not in _AUDIO_TYPES:
        raise invalid(i, f"{path}.input_audio.format", f"unsupported audio format {fmt!r}")
    data = base64_bytes(audio.get("data"), i, f"{path}.input_audio.data")
    return {"type": "audio", "data": data, "media_type": _AUDIO_TYPES[fmt]}


def _file(p: dict[str, Any], i: int, path: str) -> dict[str, Any]:
    file = mapping(p.get("file"), i, f"{path}.file")
    part: dict[str, Any] = {
        "type": "file",
        "file_id": file.get("file_id"),
        "filename": file.get("filename"),
    }
    if "file_data" in file:
        raw = file["file_data"]
        where = f"{path}.file.file_data"
        decoded = parse_data_url(raw, i, where) if isinstance(raw, str) else None
        if decoded is None:
            part["data"] = base64_bytes(raw, i, where)
        else:
            part["media_type"], part["data"] = decoded
    return part


_PARTS = {
    "text": text_part,
    "refusal": refusal_part,
    "image_url": _image,
    "input_audio": _audio,
    "file": _file,
}


def _import_content(content: Any, role: str, i: int) -> tuple[Any, bool]:
    """The neutral content, and whether it was a list (parts carry their own patches)."""
    if content is None or isinstance(content, str):
        return content or "", False
    parts: list[ContentPart] = []
    for n, raw in enumerate(sequence(content, i, "content")):
        path = f"content.{n}"
        given = mapping(raw, i, path)
        fields = by_type(_PARTS, given.get("type"), i, path)(given, i, path)
        part = build_part(i, path, fields)
        rendered = _render_part(part, role)
        if rendered is None:
            raise invalid(i, path, f"a {given['type']} part is not accepted in a {role} message")
        extras = extras_for(FORMAT, rendered, dict(given))
        parts.append(part.model_copy(update={"extras": extras}) if extras else part)
    return parts, True


def _import_call(raw: Any, i: int, path: str) -> ToolCall:
    given = mapping(raw, i, path)
    fn = given.get("custom") if given.get("type") == "custom" else given.get("function")
    fn = mapping(fn, i, f"{path}.function")
    fields: dict[str, Any] = {"id": given.get("id"), "name": fn.get("name")}
    if given.get("type") == "custom":
        fields["args"] = fn.get("input")
    elif isinstance(fn.get("arguments"), str):
        fields["arguments"] = fn["arguments"]
    else:
        raise invalid(i, f"{path}.function.arguments", "a JSON string is required")
    call = build(ToolCall, i, path, fields)
    extras = extras_for(FORMAT, _render_call(call), dict(given))
    return call.model_copy(update={"extras": extras}) if extras else call


def from_openai(messages: Sequence[Any]) -> list[AgentMessage]:
    """:class:`AgentMessage` objects from OpenAI Chat Completions messages (dicts, as the
    SDK's ``ChatCompletionMessageParam``). ``to_openai(from_openai(x))`` gives ``x`` back
    (as JSON, null fields aside). Bad input raises :class:`InvalidMessageError` naming the
    message's index and the path inside it."""
    out: list[AgentMessage] = []
    for i, raw in enumerate(sequence(messages, 0, "")):
        given = dict(mapping(raw, i, ""))
        role = given.get("role")
        neutral_role = "system" if role == "developer" else role
        if neutral_role not in ("system", "user", "assistant", "tool"):
            raise invalid(i, "role", f"unsupported role {role!r}")
        content, listed = _import_content(given.get("content"), neutral_role, i)
        calls = given.get("tool_calls")
        fields: dict[str, Any] = {"role": neutral_role, "content": content}
        if given.get("name") is not None and role != "tool":
            fields["name"] = given["name"]
        if role == "tool":
            if not isinstance(given.get("tool_call_id"), str):
                raise invalid(i, "tool_call_id", "a string is required")
            fields["tool_call_id"] = given["tool_call_id"]
        elif calls:
            fields["tool_calls"] = [
                _import_call(c, i, f"tool_calls.{n}")
                for n, c in enumerate(sequence(calls, i, "tool_calls"))
            ]
        msg = build(AgentMessage, i, "", fields)
        # Parts and calls carry their own patches: the message's covers the rest.
        skip = {"content"} if listed else set()
        if calls:
            skip.add("tool_calls")
        if role == "tool":
            rendered = _render_result(msg.tool_call_id or "", msg)
        else:
            rendered = _render_message(msg)
        left = {k: v for k, v in given.items() if k not in skip}
        extras = extras_for(FORMAT, {k: v for k, v in rendered.items() if k not in skip}, left)
        out.append(msg.model_copy(update={"extras": extras}) if extras else msg)
    return out
