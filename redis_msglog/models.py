"""The message models of the reference API, as pydantic v2 models.

Input accepts the reference API's camelCase keys (``toolCalls``, ``toolCallId``) as well
as snake_case; attributes are snake_case. Models are frozen: a stored row is a fact.
Unknown keys are rejected, so a typo (``tool_call``) fails loudly instead of being lost.
"""

from __future__ import annotations

from typing import Any, Literal

import orjson
from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    StrictStr,
    ValidationError,
    model_validator,
)

from ._core.write.depth import MAX_JSON_DEPTH, text_too_deep
from .parts import ContentPart, Extras, TextPart

Role = Literal["system", "user", "assistant", "tool"]
"""Who authored a message."""

_CONFIG = ConfigDict(
    frozen=True,
    extra="forbid",
    validate_by_name=True,
    validate_by_alias=True,
)


class ToolCall(BaseModel):
    """A tool-call request emitted by the model on an assistant turn."""

    model_config = _CONFIG

    id: StrictStr
    """Model-assigned call id; a later ``tool`` message echoes it as ``tool_call_id``."""
    name: StrictStr
    """Name of the tool the model wants invoked."""
    args: Any = None
    """Arguments for the tool, as the model produced them: any exact-JSON value."""
    arguments: StrictStr | None = None
    """The arguments exactly as a provider sent them, as a JSON string (OpenAI). When set,
    formats that take a string send it character for character, and ``args`` is what it
    parses to (the string itself when it is not JSON): given alone, ``args`` is filled
    in; given both, they must agree."""
    extras: Extras | None = None
    """Per format, the fields of the call only that format knows (a JSON merge patch over
    its rendering of the call; see :mod:`redis_msglog.parts`)."""

    @model_validator(mode="before")
    @classmethod
    def _args_from_arguments(cls, data: Any) -> Any:
        if not isinstance(data, dict) or not isinstance(data.get("arguments"), str):
            return data
        parsed = parse_arguments(data["arguments"])
        if data.get("args") is None:
            return {**data, "args": parsed}
        if not json_equal(data["args"], parsed):
            raise ValueError("args and arguments disagree: args must be what arguments parses to")
        return data


class AgentMessage(BaseModel):
    """A framework-neutral chat message; the adapters map it to provider formats."""

    model_config = _CONFIG

    role: Role
    """Who authored the message."""
    content: StrictStr | list[ContentPart]
    """The message text (a ``str``), or a list of content parts (text, images, audio,
    files, refusals, thinking, reasoning: :mod:`redis_msglog.parts`). Other types are
    rejected, never coerced."""
    name: StrictStr | None = None
    """Optional author label (tool name for ``tool``, speaker for others)."""
    tool_calls: list[ToolCall] | None = Field(default=None, alias="toolCalls")
    """Present on assistant turns that request tools."""
    tool_call_id: StrictStr | None = Field(default=None, alias="toolCallId")
    """Present on ``tool`` turns, linking a result back to a :attr:`ToolCall.id`."""
    id: StrictStr | None = None
    """The provider's or framework's id of this message, if it has one."""
    metadata: dict[str, Any] | None = None
    """Your own data about the message (a JSON object); no adapter sends it anywhere."""
    extras: Extras | None = None
    """Per format, the message's fields only that format knows (``status``, ``phase``,
    ``developer`` as a role...): a JSON merge patch over its rendering of the message,
    applied only by that format's exporter. See :mod:`redis_msglog.parts`."""

    @property
    def text(self) -> str:
        """The text of the message: ``content`` itself, or its text parts joined."""
        if isinstance(self.content, str):
            return self.content
        return "".join(p.text for p in self.content if isinstance(p, TextPart))


class StoredMessage(AgentMessage):
    """An :class:`AgentMessage` as persisted: with its ``seq`` and commit time."""

    seq: StrictInt
    """Monotonic, gap-free sequence number assigned by the server: the log's order."""
    at: AwareDatetime
    """Commit time from the server's clock (UTC); informational, ordering is by ``seq``."""
    redacted: bool = False
    """Whether this row replaces a message removed by ``redact()`` (docs/lifecycle.md):
    the original is gone from Redis; this is its replacement, or the marker."""

    def as_message(self) -> AgentMessage:
        """This row without ``seq``, ``at`` and ``redacted``, e.g. to append it to another
        log. Read it hydrated (the default) for that: a row read with ``blobs="refs"``
        holds only the digests of its large binaries, which another conversation refuses."""
        return AgentMessage.model_validate(
            self.model_dump(exclude={"seq", "at", "redacted"}, exclude_none=True)
        )


def parse_arguments(arguments: str) -> Any:
    """What a tool-call ``arguments`` string means: its JSON value, or the string itself
    when it is not JSON (models do produce broken JSON) or is JSON nested deeper than
    ``MAX_JSON_DEPTH``: an older version stored such strings, and every reader and
    exporter gets the text, which it can always handle, instead of a value that no JSON
    encoder or recursive walk can (docs/adapters.md)."""
    if arguments.count("[") + arguments.count("{") > _FEW_BRACKETS and text_too_deep(arguments):
        return arguments
    try:
        return orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return arguments


# No text with this few opening brackets nests deeper than the limit.
_FEW_BRACKETS = MAX_JSON_DEPTH


def json_equal(a: Any, b: Any) -> bool:
    """Equal as JSON values: ``1``, ``1.0`` and ``True`` differ; a tuple is not a list."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(map(json_equal, a, b))
    return type(a) is type(b) and bool(a == b)


_PART_TAGS = frozenset(
    {"text", "image", "audio", "file", "refusal", "thinking", "redacted_thinking", "reasoning"}
)


def describe_errors(exc: ValidationError, given: Any = None) -> str:
    """A pydantic error as ``path: problem; ...`` with paths as the input spells them
    (``content.2.data``): the internal union branch names are left out, and so are the
    errors of the branch the input did not take (a list content is not a bad string)."""
    listed = isinstance(given, dict) and isinstance(given.get("content"), list)
    problems = []
    for error in exc.errors():
        loc = list(error["loc"])
        if loc[:1] == ["content"] and len(loc) > 1 and isinstance(loc[1], str):
            branch = loc.pop(1)
            if (branch == "str") == listed:
                continue  # the union member the input did not take
        path = [
            str(item)
            for n, item in enumerate(loc)
            if not (item in _PART_TAGS and n and isinstance(loc[n - 1], int))
            and not (isinstance(item, str) and item.startswith("function-"))
        ]
        problems.append(f"{'.'.join(path) or 'message'}: {error['msg']}")
    return "; ".join(problems)
