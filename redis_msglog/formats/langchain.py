"""LangChain messages (``BaseMessage`` objects): ``from_langchain`` / ``to_langchain_messages``.

Lossless and in order, one message for one message: ``HumanMessage`` / ``AIMessage`` /
``SystemMessage`` / ``ToolMessage`` map to user / assistant / system / tool; ``id``,
``name``, ``tool_calls`` (``args`` objects) and ``tool_call_id`` to the neutral fields;
content blocks to parts. The rest (``additional_kwargs``, ``response_metadata``,
``usage_metadata``, ``invalid_tool_calls``, ``status``, ``artifact``, block ``id`` s and
``extras``...) rides in ``extras["langchain"]``. An ``AIMessage`` that repeats its tool
calls as content blocks (``tool_use`` from ChatAnthropic, ``function_call``,
``tool_call``) keeps its whole content in that patch, so they come back in place.
LangChain's chat models convert for their provider themselves, so this keeps every part
(thinking and reasoning included).

langchain-core is imported only when these functions run.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from .._core.args import missing_extra
from ..models import AgentMessage, ToolCall, Usage
from ..parts import (
    AudioPart,
    ContentPart,
    FilePart,
    ImagePart,
    ReasoningPart,
    RedactedThinkingPart,
    RefusalPart,
    TextPart,
    ThinkingPart,
    encode_base64,
)
from ._common import (
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
    parse_data_url,
    require_inline,
    sequence,
    usage_of,
    with_extras,
)
from .responses import join_items

if TYPE_CHECKING:
    from langchain_core.messages import BaseMessage

FORMAT = "langchain"
_TYPES = {"human": "user", "ai": "assistant", "system": "system", "tool": "tool"}
_ROLES = {role: kind for kind, role in _TYPES.items()}


# -- rendering --------------------------------------------------------------------------


def _shape(part: ContentPart) -> Any:
    patch = (part.extras or {}).get(FORMAT)
    return patch.get("type") if isinstance(patch, dict) else None


def _render_part(part: ContentPart) -> Any:
    """A part as LangChain content: a bare string, or its block with the part's patch."""
    if isinstance(part, TextPart) and isinstance((part.extras or {}).get(FORMAT), str):
        return part.text  # it came as a bare string: the patch says so, the part's text wins
    return with_extras(_BLOCKS[part.type](part), part.extras, FORMAT)


def _text_block(part: TextPart) -> dict[str, Any]:
    return {"type": "text", "text": part.text}


def _image_block(part: ImagePart) -> dict[str, Any]:
    """An image that came as an ``image_url`` block (its patch records the shape) goes
    back as one, unless it is a file id, which that block cannot hold."""
    if _shape(part) != "image_url" or part.file_id is not None:
        return _data_block(part.type, part)
    # OpenAI's block, which LangChain users write and ChatOpenAI takes as it is.
    url = part.url if part.data is None else data_url(part.media_type, part.data)
    out: dict[str, Any] = {"type": "image_url", "image_url": {"url": url}}
    if part.detail is not None:
        out["image_url"]["detail"] = part.detail
    return out


def _audio_block(part: AudioPart) -> dict[str, Any]:
    return _data_block(part.type, part)


def _file_block(part: FilePart) -> dict[str, Any]:
    """Plain text that decodes as UTF-8 goes as LangChain's text-plain block, the text
    itself; any other file as a data block."""
    if part.media_type == "text/plain" and part.data is not None:
        try:
            text = part.data.decode("utf-8")
        except UnicodeDecodeError:
            return _data_block("file", part)
        return {"type": "text-plain", "mime_type": "text/plain", "text": text}
    return _data_block(part.type, part)


def _refusal_block(part: RefusalPart) -> dict[str, Any]:
    return {"type": "refusal", "refusal": part.refusal}


def _thinking_block(part: ThinkingPart) -> dict[str, Any]:
    if part.provider != "anthropic":
        return {"type": "reasoning", "reasoning": part.thinking}  # the standard block
    # ChatAnthropic's own block.
    out: dict[str, Any] = {"type": "thinking", "thinking": part.thinking}
    if part.signature is not None:
        out["signature"] = part.signature
    return out


def _redacted_thinking_block(part: RedactedThinkingPart) -> dict[str, Any]:
    return {"type": "redacted_thinking", "data": part.data}


def _reasoning_block(part: ReasoningPart) -> dict[str, Any]:
    """ChatOpenAI's own block (Responses reasoning)."""
    out: dict[str, Any] = {
        "type": "reasoning",
        "summary": [{"type": "summary_text", "text": text} for text in part.summary],
    }
    for key in ("id", "encrypted_content"):
        if getattr(part, key) is not None:
            out[key] = getattr(part, key)
    if part.content is not None:
        out["content"] = [{"type": "reasoning_text", "text": text} for text in part.content]
    return out


# The block of each part type (``part.type``), before the part's patch is applied.
_BLOCKS: dict[str, Callable[[Any], dict[str, Any]]] = {
    "text": _text_block,
    "image": _image_block,
    "audio": _audio_block,
    "file": _file_block,
    "refusal": _refusal_block,
    "thinking": _thinking_block,
    "redacted_thinking": _redacted_thinking_block,
    "reasoning": _reasoning_block,
}


def _data_block(kind: str, part: ImagePart | AudioPart | FilePart) -> dict[str, Any]:
    out: dict[str, Any] = {"type": kind}
    if part.data is not None:
        out["base64"] = encode_base64(part.data)
    elif part.url is not None:
        out["url"] = part.url
    else:
        out["file_id"] = part.file_id
    if part.media_type is not None:
        out["mime_type"] = part.media_type
    return out


def _render(msg: AgentMessage) -> dict[str, Any]:
    content: Any = msg.content
    if not isinstance(content, str):
        content = [_render_part(p) for p in content]
    data: dict[str, Any] = {"type": _ROLES[msg.role], "content": content}
    if msg.id is not None:
        data["id"] = msg.id
    if msg.name is not None:
        data["name"] = msg.name
    if msg.role == "assistant" and msg.tool_calls:
        data["tool_calls"] = [_render_call(call) for call in msg.tool_calls]
    if msg.role == "tool":
        data["tool_call_id"] = msg.tool_call_id or ""
    return data


def _render_call(call: ToolCall) -> dict[str, Any]:
    out = {"type": "tool_call", "id": call.id, "name": call.name, "args": normalize_args(call.args)}
    result: dict[str, Any] = with_extras(out, call.extras, FORMAT)
    return result


def _construct(data: dict[str, Any]) -> BaseMessage:
    try:
        from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
    except ModuleNotFoundError as exc:
        raise missing_extra("langchain", exc) from exc

    classes: dict[str, Any] = {
        "human": HumanMessage,
        "ai": AIMessage,
        "system": SystemMessage,
        "tool": ToolMessage,
    }
    message: BaseMessage = classes[data["type"]].model_validate(data)
    return message


def to_langchain_messages(messages: Sequence[AgentMessage]) -> list[BaseMessage]:
    """LangChain ``BaseMessage`` objects, one per message, in order, nothing left out:
    tool calls, tool messages, ids, content blocks (see docs/adapters.md). Needs
    langchain-core. For the seed's plain dicts, see :func:`redis_msglog.to_langchain`."""
    require_inline(messages)
    out = []
    for msg in join_items(messages):
        data = _render(msg)
        # The patch (and so any message-level field) applies over the whole message;
        # content and calls carry their own.
        patch = (message_extras(msg, FORMAT) or {}).get(FORMAT)
        out.append(_construct(with_extras(data, {FORMAT: patch}, FORMAT) if patch else data))
    return out


# -- importing --------------------------------------------------------------------------


def _media(block: dict[str, Any], i: int, path: str) -> dict[str, Any]:
    kind = block.get("type")
    fields: dict[str, Any] = {
        "type": kind,
        "url": block.get("url"),
        "file_id": block.get("file_id"),
        "media_type": block.get("mime_type"),
    }
    if block.get("base64") is not None:
        fields["data"] = base64_bytes(block["base64"], i, f"{path}.base64")
    return fields


def _image_url(block: dict[str, Any], i: int, path: str) -> dict[str, Any]:
    image = block.get("image_url")
    url = image.get("url") if isinstance(image, dict) else image
    if not isinstance(url, str):
        raise invalid(i, f"{path}.image_url.url", "a string is required")
    fields: dict[str, Any] = {"type": "image"}
    if isinstance(image, dict):
        fields["detail"] = image.get("detail")
    decoded = parse_data_url(url, i, f"{path}.image_url.url")
    if decoded is None:
        fields["url"] = url
    else:
        fields["media_type"], fields["data"] = decoded
    return fields


def _reasoning(block: dict[str, Any], i: int, path: str) -> dict[str, Any]:
    if "summary" not in block:  # the standard block: who produced it is not recorded
        return {"type": "thinking", "thinking": block.get("reasoning")}

    def texts(key: str) -> list[Any] | None:
        if block.get(key) is None:
            return None
        entries = sequence(block[key], i, f"{path}.{key}")
        return [mapping(e, i, f"{path}.{key}.{n}").get("text") for n, e in enumerate(entries)]

    return {
        "type": "reasoning",
        "id": block.get("id"),
        "summary": texts("summary") or [],
        "content": texts("content"),
        "encrypted_content": block.get("encrypted_content"),
        "provider": "openai",
    }


_PARTS = {
    "text": lambda b, i, p: {"type": "text", "text": b.get("text")},
    "image": _media,
    "audio": _media,
    "file": _media,
    "text-plain": lambda b, i, p: {
        "type": "file",
        "data": b["text"].encode("utf-8") if isinstance(b.get("text"), str) else None,
        "media_type": "text/plain",
    },
    "image_url": _image_url,
    "refusal": lambda b, i, p: {"type": "refusal", "refusal": b.get("refusal")},
    "thinking": lambda b, i, p: {
        "type": "thinking",
        "thinking": b.get("thinking"),
        "signature": b.get("signature"),
        "provider": "anthropic",
    },
    "redacted_thinking": lambda b, i, p: {
        "type": "redacted_thinking",
        "data": b.get("data"),
        "provider": "anthropic",
    },
    "reasoning": _reasoning,
}


def _import_part(raw: Any, i: int, path: str) -> ContentPart:
    if isinstance(raw, str):  # a bare string in a content list: text, kept a string
        return TextPart(text=raw, extras={FORMAT: raw})
    block = dict(mapping(raw, i, path))
    part = build_part(i, path, by_type(_PARTS, block.get("type"), i, path)(block, i, path))
    if block["type"] == "image_url":  # the shape to render back: see _render_part
        part = part.model_copy(update={"extras": {FORMAT: {"type": "image_url"}}})
    extras = extras_for(FORMAT, _render_part(part), block)
    if block["type"] == "image_url":
        extras = {FORMAT: {**(extras or {}).get(FORMAT, {}), "type": "image_url"}}
    return part.model_copy(update={"extras": extras})


def from_langchain(messages: Sequence[Any]) -> list[AgentMessage]:
    """:class:`AgentMessage` objects from LangChain ``BaseMessage`` objects (human, ai,
    system, tool). ``to_langchain_messages(from_langchain(x))`` gives ``x`` back (equal
    ``model_dump()`` s). Other message kinds, content blocks other than text, image,
    audio, file, text-plain, image_url, refusal, thinking, redacted_thinking and
    reasoning, a tool call without an id, and bad input raise
    :class:`InvalidMessageError` naming the message's index and the path inside it."""
    try:
        from langchain_core.messages import BaseMessage
    except ModuleNotFoundError as exc:
        raise missing_extra("langchain", exc) from exc

    out: list[AgentMessage] = []
    for i, message in enumerate(sequence(messages, 0, "")):
        if not isinstance(message, BaseMessage):
            raise invalid(i, "", f"expected a LangChain BaseMessage, got {type(message).__name__}")
        out.append(_import_message(message.model_dump(), i))
    return out


def _import_message(given: dict[str, Any], i: int) -> AgentMessage:
    """One message, from its ``model_dump()``."""
    role = _TYPES.get(given.get("type", ""))
    if role is None:
        raise invalid(i, "type", f"unsupported message type {given.get('type')!r}")
    content = given["content"]
    listed = not isinstance(content, str)
    carries_calls = False
    if listed:
        blocks = list(enumerate(sequence(content, i, "content")))
        # ChatAnthropic (and ChatOpenAI's Responses output) repeat the tool calls as
        # content blocks. They are the message's tool_calls already: not parts; the
        # message's patch keeps the content exactly as it was, blocks in place.
        kept = [(n, b) for n, b in blocks if not _is_call_block(b, role)]
        carries_calls = len(kept) < len(blocks)
        content = [_import_part(raw, i, f"content.{n}") for n, raw in kept]
    fields: dict[str, Any] = {"role": role, "content": content}
    for key in ("id", "name", "tool_call_id"):
        if given.get(key) is not None:
            fields[key] = given[key]
    calls = given.get("tool_calls") or []
    if calls:
        fields["tool_calls"] = [_import_call(c, i, f"tool_calls.{n}") for n, c in enumerate(calls)]
    msg = build(AgentMessage, i, "", fields)
    rendered = _construct(_render(msg)).model_dump()
    skip = {"content"} if listed and not carries_calls else set()
    if calls:
        skip.add("tool_calls")
    extras = extras_for(
        FORMAT,
        {k: v for k, v in rendered.items() if k not in skip},
        {k: v for k, v in given.items() if k not in skip},
    )
    # The usage the model reported, also kept as it was in the patch (it renders none).
    usage = _usage(given.get("usage_metadata"))
    if extras or usage:
        msg = msg.model_copy(update={"extras": extras, "usage": usage and Usage(**usage)})
    return msg


def _usage(metadata: Any) -> dict[str, Any] | None:
    """An AIMessage's ``usage_metadata`` as a message's usage (LangChain's
    ``input_tokens`` sums every input kind, cache reads included, as ours does;
    ``output_tokens`` includes reasoning)."""
    if not isinstance(metadata, dict):
        return None
    read = metadata.get("input_token_details")
    written = metadata.get("output_token_details")
    return usage_of(
        metadata.get("input_tokens"),
        metadata.get("output_tokens"),
        read.get("cache_read") if isinstance(read, dict) else 0,
        written.get("reasoning") if isinstance(written, dict) else 0,
    )


_CALL_BLOCKS = frozenset({"tool_use", "function_call", "tool_call"})


def _is_call_block(block: Any, role: str) -> bool:
    return role == "assistant" and isinstance(block, dict) and block.get("type") in _CALL_BLOCKS


def _import_call(raw: Any, i: int, path: str) -> ToolCall:
    given = dict(mapping(raw, i, path))
    if not isinstance(given.get("id"), str):
        raise invalid(i, f"{path}.id", "a tool call needs an id to pair with its result")
    call = build(
        ToolCall, i, path, {"id": given["id"], "name": given.get("name"), "args": given.get("args")}
    )
    extras = extras_for(FORMAT, _render_call(call), given)
    return call.model_copy(update={"extras": extras}) if extras else call
