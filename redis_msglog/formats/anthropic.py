"""Anthropic Messages API turns: ``from_anthropic`` / ``to_anthropic`` / ``anthropic_system``.

Thinking and redacted thinking are kept verbatim (signature included) and sent back only
when Anthropic produced them (``provider == "anthropic"``), in their original place: the
parts of an assistant turn in order, then its ``tool_use`` blocks. Fields the neutral
model has no place for (``cache_control``, ``citations``, ``is_error``, a string content)
ride in ``extras["anthropic"]`` and come back only here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..models import AgentMessage, ToolCall
from ..parts import (
    ContentPart,
    FilePart,
    ImagePart,
    RedactedThinkingPart,
    TextPart,
    ThinkingPart,
    encode_base64,
)
from ._common import (
    MISSING_RESULT,
    base64_bytes,
    build,
    build_part,
    by_type,
    extras_for,
    invalid,
    mapping,
    message_extras,
    normalize_args,
    paired,
    sequence,
    tool_call_id,
    with_extras,
)
from .responses import join_items

FORMAT = "anthropic"
PROVIDER = "anthropic"
_WEB = ("https://", "http://")
_IMAGE_TYPES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})


# -- rendering --------------------------------------------------------------------------


def _source(part: ImagePart | FilePart) -> dict[str, Any] | None:
    if part.url is not None:
        # The API fetches web URLs only (a non-base64 data: URL stays a URL in the model).
        return {"type": "url", "url": part.url} if part.url.startswith(_WEB) else None
    if part.file_id is not None:
        return {"type": "file", "file_id": part.file_id}
    assert part.data is not None  # one source is required
    if isinstance(part, FilePart) and part.media_type == "text/plain":
        try:
            text = part.data.decode("utf-8")
        except UnicodeDecodeError:
            return None
        return {"type": "text", "media_type": "text/plain", "data": text}
    allowed = _IMAGE_TYPES if isinstance(part, ImagePart) else {"application/pdf"}
    if part.media_type not in allowed:
        return None
    return {"type": "base64", "media_type": part.media_type, "data": encode_base64(part.data)}


def _render_part(part: ContentPart) -> dict[str, Any] | None:
    """The Anthropic block of a part, or ``None`` when Anthropic cannot take it: blank
    text, audio, refusals, OpenAI reasoning, thinking another provider produced, media of
    a type the API does not accept."""
    out: dict[str, Any] | None = None
    if isinstance(part, TextPart):
        if part.text.strip():
            out = {"type": "text", "text": part.text}
    elif isinstance(part, ThinkingPart):
        if part.provider == PROVIDER and part.signature is not None:
            out = {"type": "thinking", "thinking": part.thinking, "signature": part.signature}
    elif isinstance(part, RedactedThinkingPart):
        if part.provider == PROVIDER:
            out = {"type": "redacted_thinking", "data": part.data}
    elif isinstance(part, (ImagePart, FilePart)):
        source = _source(part)
        if source is not None:
            out = {"type": "image" if isinstance(part, ImagePart) else "document", "source": source}
    if out is None:
        return None
    result: dict[str, Any] = with_extras(out, part.extras, FORMAT)
    return result


def _render_blocks(msg: AgentMessage) -> list[dict[str, Any]]:
    if isinstance(msg.content, str):
        blocks = [{"type": "text", "text": msg.content}] if msg.content.strip() else []
    else:
        blocks = [b for b in map(_render_part, msg.content) if b is not None]
    blocks.extend(_render_call(call) for call in msg.tool_calls or [])
    return blocks


def _render_call(call: ToolCall) -> dict[str, Any]:
    out = {
        "type": "tool_use",
        "id": tool_call_id(call.id),
        "name": call.name,
        "input": normalize_args(call.args),
    }
    result: dict[str, Any] = with_extras(out, call.extras, FORMAT)
    return result


def _render_result(call_id: str, msg: AgentMessage | None) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "tool_result", "tool_use_id": tool_call_id(call_id)}
    if msg is None:
        out["content"] = MISSING_RESULT
        out["is_error"] = True
        return out
    if isinstance(msg.content, str):
        if msg.content:
            out["content"] = msg.content
    else:
        blocks = [b for b in map(_render_part, msg.content) if b is not None]
        if blocks:
            out["content"] = blocks
    result: dict[str, Any] = with_extras(out, message_extras(msg, FORMAT), FORMAT)
    return result


def _in_turns(msg: AgentMessage) -> bool:
    """A system message that came from Anthropic's messages list (a ``system`` turn in
    place, as the API takes it), not from the ``system`` parameter."""
    patch = _turn_patch(msg)
    return isinstance(patch, dict) and patch.get("role") == "system"


def _turn_patch(msg: AgentMessage) -> Any:
    return (message_extras(msg, FORMAT) or {}).get(FORMAT)


def to_anthropic(messages: Sequence[AgentMessage]) -> list[dict[str, Any]]:
    """Anthropic Messages turns: ``system`` dropped (pass :func:`anthropic_system` as the
    top-level ``system`` parameter), tool calls as ``tool_use`` blocks after the turn's
    parts, results as ``tool_result`` blocks in ONE user turn, consecutive same-role turns
    merged, alternating user/assistant; see docs/adapters.md for every rule."""
    turns: list[dict[str, Any]] = []

    def add(role: str, blocks: list[dict[str, Any]], patch: Any = None) -> None:
        if patch is not None:  # a turn with its own fields (a string content) stands alone
            turns.append(with_extras({"role": role, "content": blocks}, {FORMAT: patch}, FORMAT))
        elif not blocks:
            return
        elif turns and turns[-1]["role"] == role and isinstance(turns[-1]["content"], list):
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})

    for turn in paired(join_items(messages)):
        msg = turn.message
        if msg.role == "system" and not _in_turns(msg):
            continue  # the system prompt: anthropic_system()
        role = "assistant" if msg.role == "assistant" else "user"
        add(role, _render_blocks(msg), _turn_patch(msg))
        add("user", [_render_result(call_id, result) for call_id, result in turn.results])
    if turns and turns[0]["role"] == "assistant":
        # The API wants a user turn first; say nothing more than that one exists.
        turns.insert(0, {"role": "user", "content": [{"type": "text", "text": "(continued)"}]})
    if turns and turns[-1]["role"] == "assistant" and isinstance(turns[-1]["content"], list):
        last = turns[-1]["content"][-1]
        if last["type"] == "text":  # a final assistant turn must not end in whitespace
            last["text"] = last["text"].rstrip()
    return turns


def anthropic_system(messages: Sequence[AgentMessage]) -> str | list[dict[str, Any]] | None:
    """The ``system`` parameter for :func:`to_anthropic`'s turns: the history's system
    messages (``None`` if there are none). One system message with ``str`` content gives
    that string (as :func:`from_anthropic` got it); otherwise a list of text blocks, in
    order, with their ``extras["anthropic"]`` (``cache_control``...)."""
    system = [m for m in join_items(messages) if m.role == "system" and not _in_turns(m)]
    if not system:
        return None
    if len(system) == 1 and isinstance(system[0].content, str):
        return system[0].content
    blocks: list[dict[str, Any]] = []
    for msg in system:
        content = [TextPart(text=msg.content)] if isinstance(msg.content, str) else msg.content
        blocks.extend(b for b in map(_render_part, content) if b and b["type"] == "text")
    return blocks


# -- importing --------------------------------------------------------------------------


def _import_source(block: dict[str, Any], i: int, path: str) -> dict[str, Any]:
    source = mapping(block.get("source"), i, f"{path}.source")
    kind = source.get("type")
    if kind == "url":
        return {"url": source.get("url")}
    if kind == "file":
        return {"file_id": source.get("file_id")}
    if kind == "base64":
        data = base64_bytes(source.get("data"), i, f"{path}.source.data")
        return {"data": data, "media_type": source.get("media_type")}
    if kind == "text" and block.get("type") == "document":
        text = source.get("data")
        if not isinstance(text, str):
            raise invalid(i, f"{path}.source.data", "a string is required")
        return {"data": text.encode("utf-8"), "media_type": source.get("media_type")}
    raise invalid(i, f"{path}.source.type", f"unsupported source type {kind!r}")


def _part_fields(block: dict[str, Any], i: int, path: str) -> dict[str, Any]:
    kind = block.get("type")
    if kind == "text":
        return {"type": "text", "text": block.get("text")}
    if kind == "thinking":
        return {
            "type": "thinking",
            "thinking": block.get("thinking"),
            "signature": block.get("signature"),
            "provider": PROVIDER,
        }
    if kind == "redacted_thinking":
        return {"type": "redacted_thinking", "data": block.get("data"), "provider": PROVIDER}
    return {"type": "image" if kind == "image" else "file", **_import_source(block, i, path)}


_PARTS = dict.fromkeys(("text", "thinking", "redacted_thinking", "image", "document"), _part_fields)


def _import_part(raw: Any, i: int, path: str) -> ContentPart:
    block = dict(mapping(raw, i, path))
    part = build_part(i, path, by_type(_PARTS, block.get("type"), i, path)(block, i, path))
    rendered = _render_part(part)
    if rendered is None:
        raise invalid(i, path, "this block cannot be sent back to Anthropic (blank text?)")
    extras = extras_for(FORMAT, rendered, block)
    return part.model_copy(update={"extras": extras}) if extras else part


def _import_result(block: dict[str, Any], i: int, path: str) -> dict[str, Any]:
    content = block.get("content")
    if content is None:
        content = ""
    elif not isinstance(content, str):
        content = [
            _import_part(b, i, f"{path}.content.{n}")
            for n, b in enumerate(sequence(content, i, f"{path}.content"))
        ]
    fields = {"role": "tool", "content": content, "tool_call_id": block.get("tool_use_id")}
    msg = build(AgentMessage, i, path, fields)
    skip = {"content"} if isinstance(content, list) else set()
    rendered = _render_result(msg.tool_call_id or "", msg)
    given = {k: v for k, v in block.items() if k not in skip}
    extras = extras_for(FORMAT, {k: v for k, v in rendered.items() if k not in skip}, given)
    return {**fields, "extras": extras}


def _import_turn(turn: dict[str, Any], i: int) -> list[AgentMessage]:
    role = turn.get("role")
    if role not in ("user", "assistant", "system"):
        raise invalid(i, "role", f"unsupported role {role!r}")
    content = turn.get("content")
    if role == "system" or isinstance(content, str):
        return [_import_whole_turn(turn, role, content, i)]
    return _import_blocks(role, content, i)


def _import_whole_turn(turn: dict[str, Any], role: str, content: Any, i: int) -> AgentMessage:
    """A turn that is one message: string content, or a system turn. A system turn
    renders as a user turn its patch makes "system" again (to_anthropic keeps it in place;
    anthropic_system() leaves it out)."""
    shown = "assistant" if role == "assistant" else "user"
    if isinstance(content, str):
        msg = build(AgentMessage, i, "", {"role": role, "content": content})
        rendered: dict[str, Any] = {"role": shown, "content": _render_blocks(msg)}
        extras = extras_for(FORMAT, rendered, turn)
    else:  # a system turn's text blocks: the parts carry their own patches
        text = [
            _import_part(b, i, f"content.{n}")
            for n, b in enumerate(sequence(content, i, "content"))
        ]
        msg = build(AgentMessage, i, "", {"role": role, "content": text})
        extras = extras_for(FORMAT, {"role": shown}, {"role": role})
    return msg.model_copy(update={"extras": extras}) if extras else msg


def _import_blocks(role: str, content: Any, i: int) -> list[AgentMessage]:
    """A user or assistant turn's blocks: a user turn's ``tool_result`` blocks (first)
    become tool messages and its other blocks one user message after them; an assistant
    turn is one message, its ``tool_use`` blocks (last) the tool calls."""
    results: list[dict[str, Any]] = []
    parts: list[ContentPart] = []
    calls: list[ToolCall] = []
    for n, raw in enumerate(sequence(content, i, "content")):
        path = f"content.{n}"
        block = dict(mapping(raw, i, path))
        kind = block.get("type")
        if kind == "tool_result" and role == "user":
            if parts:
                raise invalid(i, path, "tool_result blocks must come before other blocks")
            results.append(_import_result(block, i, path))
        elif kind == "tool_use" and role == "assistant":
            calls.append(_import_call(block, i, path))
        elif calls:
            raise invalid(i, path, "a block after tool_use in one turn is not supported")
        else:
            parts.append(_import_part(block, i, path))
    out = [build(AgentMessage, i, "", r) for r in results]
    if parts or calls or not results:
        fields: dict[str, Any] = {"role": role, "content": parts}
        if calls:
            fields["tool_calls"] = calls
        out.append(build(AgentMessage, i, "", fields))
    return out


def _import_call(block: dict[str, Any], i: int, path: str) -> ToolCall:
    fields = {"id": block.get("id"), "name": block.get("name"), "args": block.get("input")}
    call = build(ToolCall, i, path, fields)
    extras = extras_for(FORMAT, _render_call(call), block)
    return call.model_copy(update={"extras": extras}) if extras else call


def from_anthropic(
    messages: Sequence[Any], *, system: str | Sequence[Any] | None = None
) -> list[AgentMessage]:
    """:class:`AgentMessage` objects from Anthropic Messages turns (dicts, as the SDK's
    ``MessageParam``), with ``system`` (the top-level parameter, a string or text blocks)
    as a leading system message. A user turn's ``tool_result`` blocks become ``tool``
    messages, its other blocks one user message after them; an assistant turn is one
    message, its ``tool_use`` blocks the tool calls; a ``system`` turn is a system message
    that :func:`to_anthropic` keeps in place. ``to_anthropic(from_anthropic(x))``
    gives ``x`` back and :func:`anthropic_system` the ``system``. Bad input raises
    :class:`InvalidMessageError` naming the turn's index and the path inside it
    (``system`` is index 0 with path ``system``)."""
    out: list[AgentMessage] = []
    if system is not None:
        if isinstance(system, str):
            out.append(build(AgentMessage, 0, "system", {"role": "system", "content": system}))
        else:
            parts = [
                _import_part(b, 0, f"system.{n}")
                for n, b in enumerate(sequence(system, 0, "system"))
            ]
            out.append(build(AgentMessage, 0, "system", {"role": "system", "content": parts}))
    for i, raw in enumerate(sequence(messages, 0, "")):
        out.extend(_import_turn(dict(mapping(raw, i, "")), i))
    return out
