"""Reading OpenAI Responses items into neutral messages (``from_responses``): a run of
assistant items (reasoning, ``function_call`` s, one output message) becomes one
assistant message; what the rendering would not give back rides in the patch."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..models import AgentMessage, ToolCall
from ..parts import (
    ContentPart,
    ReasoningPart,
    TextPart,
)
from ._common import (
    base64_bytes,
    build,
    build_part,
    by_type,
    extras_for,
    invalid,
    mapping,
    parse_data_url,
    refusal_part,
    sequence,
    text_part,
)
from ._responses_render import (
    AFTER_CALLS,
    FORMAT,
    PROVIDER,
    render_call,
    render_input_message,
    render_input_part,
    render_output,
    render_output_message,
    render_output_part,
    render_reasoning,
)


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
    render = render_output_part if output else render_input_part
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
    patch = extras_for(FORMAT, render_reasoning(part), item) or {}
    if calls_before is not None:
        patch = {FORMAT: {**patch.get(FORMAT, {}), AFTER_CALLS: calls_before}}
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
    (see the docstring of :mod:`.responses`). ``to_responses(from_responses(x))`` gives
    ``x`` back. Other item kinds, and bad input, raise :class:`InvalidMessageError`
    naming the item's index and the path inside it."""
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
    extras = extras_for(FORMAT, render_call(call), item)
    return call.model_copy(update={"extras": extras}) if extras else call


def _import_assistant(group: _Group, item: dict[str, Any], i: int) -> None:
    group.has_message = True
    content = item.get("content")
    item_id = item.get("id")
    probe = build(AgentMessage, i, "", {"role": "assistant", "content": "", "id": item_id})
    if isinstance(content, str) and item_id is None:
        group.content.append(TextPart(text=content))
        group.short_text = len(group.content) == 1
        rendered = render_output_message(probe, [TextPart(text=content)])
        group.extras = extras_for(FORMAT, rendered, item)
        return
    output = item_id is not None
    parts = _import_parts(content, i, "content", output=output)
    group.content.extend(parts)
    group.id = item_id
    rendered = render_output_message(probe, parts) or {}
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
    rendered = {k: v for k, v in render_input_message(msg).items() if k not in skip}
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
        k: v for k, v in render_output(msg.tool_call_id or "", msg).items() if k not in skip
    }
    extras = extras_for(FORMAT, rendered, {k: v for k, v in item.items() if k not in skip})
    return msg.model_copy(update={"extras": extras}) if extras else msg
