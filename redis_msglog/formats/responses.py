"""OpenAI Responses API input items: ``from_responses`` / ``to_responses``.

A Responses history splits one assistant turn into several items (``reasoning``, an
output ``message``, ``function_call`` s). :func:`from_responses` groups a run of them into
one assistant message: reasoning items and the output message's parts become its content
in order, the calls its tool calls, so the Chat and Anthropic exporters still pair
parallel calls with their results. :func:`to_responses` splits it back in the same order.
Reasoning items are sent only to Responses, and only when OpenAI produced them.

Item fields the neutral model has no place for (``status``, ``phase``, item ``id`` s of
calls, ``annotations``...) ride in ``extras["responses"]``. One layout hint is not a
field: a reasoning item that came between two ``function_call`` s of one turn records
``"$after_calls": n`` (how many of the turn's calls precede it) in its patch.

Item by item (the OpenAI Agents SDK's session, which must give back every item exactly,
and pop them one at a time): :func:`item_messages` makes one message per item, marked by
``"$item"`` in its patch (``true``, or the item itself when the neutral model cannot
hold it exactly: a hosted-tool or unknown item type, a null field), and
:func:`message_items` gives the item back. Every exporter first joins each run of
marked messages into the messages :func:`from_responses` makes of their items
(:func:`join_items`), so parallel calls logged one per message still pair.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson
from pydantic import BaseModel

from ..errors import InvalidMessageError
from ..models import AgentMessage, ToolCall, json_equal
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
    paired,
    parse_data_url,
    refusal_part,
    require_messages,
    sequence,
    text_part,
    with_extras,
)

FORMAT = "responses"
PROVIDER = "openai"
_AFTER_CALLS = "$after_calls"
_ITEM = "$item"


# -- rendering --------------------------------------------------------------------------


def _render_input_part(part: ContentPart) -> dict[str, Any] | None:
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


def _render_output_part(part: ContentPart) -> dict[str, Any] | None:
    """A part of an assistant output message (``output_text``, ``refusal``)."""
    if isinstance(part, TextPart):
        return _patched({"type": "output_text", "text": part.text, "annotations": []}, part)
    if isinstance(part, RefusalPart):
        return _patched({"type": "refusal", "refusal": part.refusal}, part)
    return None


def _render_reasoning(part: ReasoningPart) -> dict[str, Any] | None:
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
    if isinstance(patch, dict) and _AFTER_CALLS in patch:
        patch = {k: v for k, v in patch.items() if k != _AFTER_CALLS}
    result: dict[str, Any] = apply_patch(out, patch) if patch is not None else out
    return result


def _after_calls(part: ContentPart) -> int | None:
    patch = (part.extras or {}).get(FORMAT)
    return patch.get(_AFTER_CALLS) if isinstance(patch, dict) else None


def _render_call(call: ToolCall) -> dict[str, Any]:
    arguments = call.arguments
    if arguments is None:
        arguments = orjson.dumps(normalize_args(call.args)).decode()
    out = {"type": "function_call", "call_id": call.id, "name": call.name, "arguments": arguments}
    result: dict[str, Any] = with_extras(out, call.extras, FORMAT)
    return result


def _render_output_message(msg: AgentMessage, parts: list[ContentPart]) -> dict[str, Any] | None:
    if msg.id is not None and msg.id.startswith("msg"):
        # The output form needs the item id, and the API takes only its own ("msg_...").
        content = [p for p in map(_render_output_part, parts) if p is not None]
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


def _render_assistant(msg: AgentMessage) -> list[dict[str, Any]]:
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
            item = _render_output_message(msg if first else _anonymous(msg), segment)
            if first:
                item = with_extras(item, message_extras(msg, FORMAT), FORMAT)
                first = False
            if item is not None:
                items.append(item)
            continue
        rendered = _render_reasoning(segment)
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
        items.append(_render_call(call))
        items.extend(later.pop(n, []))
    for rest in later.values():  # a hint past the last call: keep the item at the end
        items.extend(rest)
    return items


def _anonymous(msg: AgentMessage) -> AgentMessage:
    return msg.model_copy(update={"id": None, "extras": None})


def _render_input_message(msg: AgentMessage) -> dict[str, Any]:
    content: Any = msg.content
    if not isinstance(content, str):
        content = [p for p in map(_render_input_part, content) if p is not None]
    result: dict[str, Any] = with_extras(
        {"role": msg.role, "content": content}, message_extras(msg, FORMAT), FORMAT
    )
    return result


def _render_output(call_id: str, msg: AgentMessage | None) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "function_call_output", "call_id": call_id}
    if msg is None:
        out["output"] = MISSING_RESULT
        return out
    if isinstance(msg.content, str):
        out["output"] = msg.content
    else:
        out["output"] = [p for p in map(_render_input_part, msg.content) if p is not None]
    result: dict[str, Any] = with_extras(out, message_extras(msg, FORMAT, "output"), FORMAT)
    return result


def to_responses(messages: Sequence[AgentMessage]) -> list[dict[str, Any]]:
    """Responses API input items: messages (the short ``{"role", "content"}`` form unless
    the message came from Responses in another), ``reasoning`` items (OpenAI's only),
    ``function_call`` / ``function_call_output`` pairs, results right after their calls;
    see docs/adapters.md for every rule."""
    out: list[dict[str, Any]] = []
    for turn in paired(join_items(messages, keep_native=True)):
        msg = turn.message
        native = _native(msg)
        if native is not None:
            out.append(native)
        elif msg.role == "assistant":
            out.extend(_render_assistant(msg))
        else:
            out.append(_render_input_message(msg))
        out.extend(_render_output(call_id, result) for call_id, result in turn.results)
    return out


# -- importing --------------------------------------------------------------------------


def _input_image(p: dict[str, Any], i: int, path: str) -> dict[str, Any]:
    part: dict[str, Any] = {"type": "image", "detail": p.get("detail"), "file_id": p.get("file_id")}
    url = p.get("image_url")
    if isinstance(url, str):
        decoded = parse_data_url(url, i, f"{path}.image_url")
        if decoded is None:
            part["url"] = url
        else:
            part["media_type"], part["data"] = decoded
    return part


def _input_file(p: dict[str, Any], i: int, path: str) -> dict[str, Any]:
    part: dict[str, Any] = {
        "type": "file",
        "file_id": p.get("file_id"),
        "url": p.get("file_url"),
        "filename": p.get("filename"),
    }
    raw = p.get("file_data")
    if raw is not None:
        where = f"{path}.file_data"
        decoded = parse_data_url(raw, i, where) if isinstance(raw, str) else None
        if decoded is None:
            part["data"] = base64_bytes(raw, i, where)
        else:
            part["media_type"], part["data"] = decoded
    return part


_INPUT_PARTS = {
    "input_text": text_part,
    "input_image": _input_image,
    "input_file": _input_file,
}
_OUTPUT_PARTS = {"output_text": text_part, "refusal": refusal_part}


def _import_parts(content: Any, i: int, path: str, output: bool) -> list[ContentPart]:
    handlers = _OUTPUT_PARTS if output else _INPUT_PARTS
    render = _render_output_part if output else _render_input_part
    parts: list[ContentPart] = []
    for n, raw in enumerate(sequence(content, i, path)):
        where = f"{path}.{n}"
        given = dict(mapping(raw, i, where))
        part = build_part(i, where, by_type(handlers, given.get("type"), i, where)(given, i, where))
        extras = extras_for(FORMAT, render(part), given)
        parts.append(part.model_copy(update={"extras": extras}) if extras else part)
    return parts


def _import_reasoning(item: dict[str, Any], i: int, calls_before: int | None) -> ContentPart:
    def texts(key: str) -> list[Any] | None:
        if item.get(key) is None:
            return None
        return [
            mapping(s, i, f"{key}.{n}").get("text")
            for n, s in enumerate(sequence(item[key], i, key))
        ]

    fields = {
        "type": "reasoning",
        "id": item.get("id"),
        "summary": texts("summary") or [],
        "content": texts("content"),
        "encrypted_content": item.get("encrypted_content"),
        "provider": PROVIDER,
    }
    part = build_part(i, "", fields)
    assert isinstance(part, ReasoningPart)
    patch = extras_for(FORMAT, _render_reasoning(part), item) or {}
    if calls_before is not None:
        patch = {FORMAT: {**patch.get(FORMAT, {}), _AFTER_CALLS: calls_before}}
    return part.model_copy(update={"extras": patch}) if patch else part


class _Group:
    """The assistant message being built from a run of items."""

    def __init__(self) -> None:
        self.content: list[ContentPart] = []
        self.calls: list[ToolCall] = []
        self.id: str | None = None
        self.extras: dict[str, Any] | None = None
        self.has_message = False
        self.short_text = False  # a short-form message with string content, alone

    def message(self, i: int) -> AgentMessage:
        content: Any = self.content
        if self.short_text and len(content) == 1 and isinstance(content[0], TextPart):
            content = content[0].text  # the string it was
        fields: dict[str, Any] = {"role": "assistant", "content": content}
        if self.calls:
            fields["tool_calls"] = self.calls
        for key in ("id", "extras"):
            if getattr(self, key) is not None:
                fields[key] = getattr(self, key)
        return build(AgentMessage, i, "", fields)


def from_responses(items: Sequence[Any]) -> list[AgentMessage]:
    """:class:`AgentMessage` objects from Responses API input items (dicts, as the SDK's
    ``ResponseInputItemParam``): messages, ``reasoning``, ``function_call`` and
    ``function_call_output``. A run of assistant items becomes one assistant message
    (see the module docstring). ``to_responses(from_responses(x))`` gives ``x`` back.
    Other item kinds, and bad input, raise :class:`InvalidMessageError` naming the item's
    index and the path inside it."""
    reader = _Reader()
    for i, raw in enumerate(sequence(items, 0, "")):
        reader.read(dict(mapping(raw, i, "")), i)
    return reader.finish()


class _Reader:
    """Messages from items read in order: each run of assistant items (reasoning,
    ``function_call`` s, one output message) is grouped into one assistant message,
    built when an item that cannot join the run comes, or at the end."""

    def __init__(self) -> None:
        self.out: list[AgentMessage] = []
        self.group: _Group | None = None
        self.last = 0  # the index of the item being read: errors building a group name it

    def read(self, item: dict[str, Any], i: int) -> None:
        self.last = i
        kind = item.get("type", "message")
        role = item.get("role")
        if kind == "reasoning":
            group = self._open()
            calls_before = len(group.calls) if group.calls else None
            group.content.append(_import_reasoning(item, i, calls_before))
        elif kind == "function_call":
            call = _import_call(item, i)
            self._open().calls.append(call)
        elif kind == "message" and role == "assistant":
            if self.group is not None and (self.group.calls or self.group.has_message):
                self._close()  # one output message per group, and none after its calls
            _import_assistant(self._open(), item, i)
        elif kind == "message" and role in ("user", "system", "developer"):
            self._close()
            self.out.append(_import_input_message(item, i))
        elif kind == "function_call_output":
            self._close()
            self.out.append(_import_output(item, i))
        else:
            raise invalid(i, "type", f"unsupported item {kind!r} (role {role!r})")

    def finish(self) -> list[AgentMessage]:
        self._close()
        return self.out

    def _open(self) -> _Group:
        """The group being built, or a new one."""
        if self.group is None:
            self.group = _Group()
        return self.group

    def _close(self) -> None:
        if self.group is not None:
            self.out.append(self.group.message(self.last))
        self.group = None


def _import_call(item: dict[str, Any], i: int) -> ToolCall:
    if not isinstance(item.get("arguments"), str):
        raise invalid(i, "arguments", "a JSON string is required")
    fields = {"id": item.get("call_id"), "name": item.get("name"), "arguments": item["arguments"]}
    call = build(ToolCall, i, "", fields)
    extras = extras_for(FORMAT, _render_call(call), item)
    return call.model_copy(update={"extras": extras}) if extras else call


def _import_assistant(group: _Group, item: dict[str, Any], i: int) -> None:
    group.has_message = True
    content = item.get("content")
    item_id = item.get("id")
    probe = build(AgentMessage, i, "", {"role": "assistant", "content": "", "id": item_id})
    if isinstance(content, str) and item_id is None:
        group.content.append(TextPart(text=content))
        group.short_text = len(group.content) == 1
        rendered = _render_output_message(probe, [TextPart(text=content)])
        group.extras = extras_for(FORMAT, rendered, item)
        return
    output = item_id is not None
    parts = _import_parts(content, i, "content", output=output)
    group.content.extend(parts)
    group.id = item_id
    rendered = _render_output_message(probe, parts) or {}
    # Parts carry their own patches only where the output form renders them.
    skip = {"content"} if rendered.get("type") == "message" else set()
    given = {k: v for k, v in item.items() if k not in skip}
    group.extras = extras_for(FORMAT, {k: v for k, v in rendered.items() if k not in skip}, given)


def _import_input_message(item: dict[str, Any], i: int) -> AgentMessage:
    role = "system" if item["role"] == "developer" else item["role"]
    content = item.get("content")
    listed = not isinstance(content, str)
    if listed:
        content = _import_parts(content, i, "content", output=False)
    msg = build(AgentMessage, i, "", {"role": role, "content": content})
    skip = {"content"} if listed else set()
    rendered = {k: v for k, v in _render_input_message(msg).items() if k not in skip}
    extras = extras_for(FORMAT, rendered, {k: v for k, v in item.items() if k not in skip})
    return msg.model_copy(update={"extras": extras}) if extras else msg


def _import_output(item: dict[str, Any], i: int) -> AgentMessage:
    output = item.get("output")
    listed = not isinstance(output, str)
    content: Any = _import_parts(output, i, "output", output=False) if listed else output
    fields = {"role": "tool", "content": content, "tool_call_id": item.get("call_id")}
    msg = build(AgentMessage, i, "", fields)
    skip = {"output"} if listed else set()
    rendered = {
        k: v for k, v in _render_output(msg.tool_call_id or "", msg).items() if k not in skip
    }
    extras = extras_for(FORMAT, rendered, {k: v for k, v in item.items() if k not in skip})
    return msg.model_copy(update={"extras": extras}) if extras else msg


# -- item by item: one message per item -------------------------------------------------


def item_messages(items: Sequence[Any]) -> list[AgentMessage]:
    """One :class:`AgentMessage` per Responses item, for a log that stores items one by
    one: ``message_items(m) == [item]`` exactly (as JSON, null fields included), for every
    item type. An item :func:`from_responses` converts becomes that message, marked
    ``"$item": true`` in its ``extras["responses"]`` (or carrying the item itself when
    the conversion is not exact); any other item (hosted tools, unknown types) is kept
    verbatim in an empty message of its role (``assistant`` for non-messages) that no
    other format renders. Readers of other formats see the messages
    :func:`from_responses` makes of the items (:func:`join_items`). Items that are
    pydantic models are taken as their JSON without unset fields; anything else that is
    not a JSON object raises :class:`InvalidMessageError`."""
    out: list[AgentMessage] = []
    for i, raw in enumerate(sequence(items, 0, "")):
        if isinstance(raw, BaseModel):
            raw = raw.model_dump(mode="json", exclude_unset=True)
        out.append(_item_message(dict(mapping(raw, i, "")), i))
    return out


def _item_message(item: dict[str, Any], i: int) -> AgentMessage:
    try:
        converted = from_responses([item])
    except InvalidMessageError:
        converted = []
    if len(converted) == 1:
        msg = converted[0]
        rendered = message_items(msg)
        exact = len(rendered) == 1 and json_equal(rendered[0], item)
        patch = (msg.extras or {}).get(FORMAT, {})
        if isinstance(patch, dict):
            marked = {**patch, _ITEM: True if exact else item}
            return msg.model_copy(update={"extras": {**(msg.extras or {}), FORMAT: marked}})
    role = item.get("role")
    role = "system" if role == "developer" else role
    fields: dict[str, Any] = {
        "role": role if role in ("user", "system", "assistant") else "assistant",
        "content": [],
        "extras": {FORMAT: {_ITEM: item}},
    }
    return build(AgentMessage, i, "", fields)


def _marker(msg: AgentMessage) -> Any:
    patch = (msg.extras or {}).get(FORMAT) if msg.extras else None
    return patch.get(_ITEM) if isinstance(patch, dict) else None


def _native(msg: AgentMessage) -> dict[str, Any] | None:
    """The item a message carries verbatim (``"$item"``), if it does."""
    marker = _marker(msg)
    return marker if isinstance(marker, dict) else None


def _projection(msg: AgentMessage) -> AgentMessage:
    """``msg`` without its ``"$item"`` marker."""
    patch = dict((msg.extras or {}).get(FORMAT) or {})
    patch.pop(_ITEM, None)
    extras = {k: v for k, v in (msg.extras or {}).items() if k != FORMAT}
    if patch:
        extras[FORMAT] = patch
    return msg.model_copy(update={"extras": extras or None})


def message_items(msg: AgentMessage) -> list[dict[str, Any]]:
    """The Responses items of one message rendered alone (no pairing with other
    messages): for a message of :func:`item_messages`, exactly its item; for any other
    message, what :func:`to_responses` renders for it (an assistant turn's content and
    calls, a tool result as a ``function_call_output``, a message item)."""
    native = _native(msg)
    if native is not None:
        return [native]
    if _marker(msg) is not None:
        msg = _projection(msg)
    if msg.role == "assistant":
        return _render_assistant(msg)
    if msg.role == "tool":
        return [_render_output(msg.tool_call_id or "", msg)]
    return [_render_input_message(msg)]


def join_items(
    messages: Sequence[AgentMessage], *, keep_native: bool = False
) -> list[AgentMessage]:
    """``messages`` with each run of :func:`item_messages` messages replaced by the
    messages :func:`from_responses` makes of their items (a turn's reasoning, output
    message and calls as one assistant message). Messages carrying an item verbatim that
    no neutral message holds are dropped, or with ``keep_native`` kept in place (ending
    the run). Any other message passes unchanged."""
    require_messages(messages)
    if not any(_marker(m) is not None for m in messages):
        return list(messages)
    out: list[AgentMessage] = []
    run: list[AgentMessage] = []

    def flush() -> None:
        if run:
            out.extend(_joined(run))
            run.clear()

    for msg in messages:
        marker = _marker(msg)
        if marker is None:
            flush()
            out.append(msg)
        elif _native(msg) is not None and _projectable(msg):
            run.append(msg)
        elif _native(msg) is not None:
            if keep_native:
                flush()
                out.append(msg)
        else:
            run.append(msg)
    flush()
    return out


def _projectable(msg: AgentMessage) -> bool:
    """A verbatim item the neutral model holds too (a converted item with null fields)."""
    return bool(msg.content) or bool(msg.tool_calls) or msg.role == "tool"


def _joined(run: list[AgentMessage]) -> list[AgentMessage]:
    items = [item for msg in run for item in message_items(msg)]
    try:
        return from_responses(items)
    except InvalidMessageError:  # a run that does not convert as a whole: each alone
        return [_projection(msg) for msg in run]
