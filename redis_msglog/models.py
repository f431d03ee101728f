"""The message models of the reference API, as pydantic v2 models.

Input accepts the reference API's camelCase keys (``toolCalls``, ``toolCallId``) as well
as snake_case; attributes are snake_case. Models are frozen: a stored row is a fact.
Unknown keys are rejected, so a typo (``tool_call``) fails loudly instead of being lost.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Annotated, Any, Literal

import orjson
from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    StrictFloat,
    StrictInt,
    StrictStr,
    ValidationError,
    model_validator,
)

from ._core.write.depth import MAX_JSON_DEPTH, text_too_deep
from .errors import UsageCurrencyError
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


MAX_USAGE_TOKENS = 2**53 - 1
"""The most tokens of one kind a :class:`Usage` holds: a conversation's totals are exact
sums up to it (what the append script's numbers hold exactly)."""
MAX_USAGE_COST = 9_000_000
"""The largest ``cost`` a :class:`Usage` holds, in its currency's units: totals are kept
in billionths of a unit (exact integer sums), which stay exact up to it."""

Tokens = Annotated[StrictInt, Field(ge=0, le=MAX_USAGE_TOKENS)]


class Usage(BaseModel):
    """What producing a message cost (docs/usage.md): tokens and, optionally, money.

    The token fields follow OpenAI's and the OpenTelemetry GenAI conventions:
    ``input_tokens`` counts every input token, the ones read from the provider's cache
    included (``cached_tokens`` is that part of it); ``output_tokens`` counts every output
    token, reasoning included (``reasoning_tokens`` is that part). ``cost`` is in
    ``currency`` (an ISO 4217 code such as ``"USD"``); one is given with the other.
    Input accepts camelCase keys (``inputTokens``) as the stored form spells them."""

    model_config = _CONFIG

    input_tokens: Tokens = Field(default=0, alias="inputTokens")
    """Input (prompt) tokens, cached ones included."""
    output_tokens: Tokens = Field(default=0, alias="outputTokens")
    """Output (completion) tokens, reasoning included."""
    cached_tokens: Tokens = Field(default=0, alias="cachedTokens")
    """The part of ``input_tokens`` read from the provider's prompt cache."""
    reasoning_tokens: Tokens = Field(default=0, alias="reasoningTokens")
    """The part of ``output_tokens`` spent on reasoning."""
    cost: Annotated[StrictFloat | StrictInt, Field(ge=0, le=MAX_USAGE_COST)] | None = None
    """What it cost, in ``currency``; kept to a billionth of a unit in totals."""
    currency: Annotated[StrictStr, Field(pattern=r"^[A-Z]{3}$")] | None = None
    """The ISO 4217 code of ``cost``'s currency (``"USD"``)."""

    @model_validator(mode="after")
    def _cost_with_currency(self) -> Usage:
        if (self.cost is None) != (self.currency is None):
            raise ValueError("cost and currency go together: give both or neither")
        if self.cost is not None and not math.isfinite(self.cost):
            raise ValueError("cost must be a finite number")
        return self

    def __add__(self, other: Usage) -> Usage:
        """The sum of two usages (:meth:`total`)."""
        if not isinstance(other, Usage):
            return NotImplemented
        return Usage.total((self, other))

    @staticmethod
    def total(usages: Iterable[Usage]) -> Usage:
        """The sum of ``usages``: tokens of each kind, and costs, exact to a billionth of
        their one currency's unit (costs in two currencies raise
        :class:`~redis_msglog.UsageCurrencyError`). A sum may pass what one message's
        usage may hold (a scope's totals), so it is built unchecked."""
        sums = [0, 0, 0, 0, 0]
        currency: str | None = None
        for usage in usages:
            sums[0] += usage.input_tokens
            sums[1] += usage.output_tokens
            sums[2] += usage.cached_tokens
            sums[3] += usage.reasoning_tokens
            if usage.cost is not None:
                if currency is not None and usage.currency != currency:
                    raise UsageCurrencyError(
                        f"costs in {currency} and {usage.currency} do not add: convert them "
                        "to one currency first",
                        currencies=(currency, str(usage.currency)),
                    )
                currency = usage.currency
                sums[4] += cost_nanos(usage.cost)
        return Usage.model_construct(
            input_tokens=sums[0],
            output_tokens=sums[1],
            cached_tokens=sums[2],
            reasoning_tokens=sums[3],
            cost=None if currency is None else sums[4] / NANOS,
            currency=currency,
        )


NANOS = 10**9
"""Billionths of a unit: the resolution of a total's cost."""


def cost_nanos(cost: float) -> int:
    """``cost`` in billionths of its unit, rounded to the nearest."""
    return cost * NANOS if isinstance(cost, int) else round(cost * NANOS)


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
    usage: Usage | None = None
    """What producing this message cost (tokens, money): a plain append adds it to the
    conversation's totals in the same atomic call (:meth:`MessageLog.usage`,
    docs/usage.md)."""

    @property
    def text(self) -> str:
        """The text of the message: ``content`` itself, or its text parts joined."""
        if isinstance(self.content, str):
            return self.content
        return "".join(p.text for p in self.content if isinstance(p, TextPart))


_STORED_ONLY = frozenset(("seq", "at", "redacted", "draft", "interrupted"))


class StoredMessage(AgentMessage):
    """An :class:`AgentMessage` as persisted: with its ``seq`` and commit time."""

    seq: StrictInt
    """Monotonic, gap-free sequence number assigned by the server: the log's order."""
    at: AwareDatetime
    """Commit time from the server's clock (UTC); informational, ordering is by ``seq``."""
    redacted: bool = False
    """Whether this row replaces a message removed by ``redact()`` (docs/lifecycle.md):
    the original is gone from Redis; this is its replacement, or the marker."""
    draft: StrictStr | None = None
    """The id of the draft this message was written as (docs/drafts.md): the same id the
    draft's events carried while it was being written, so a UI replaces the draft by it."""
    interrupted: bool = False
    """Whether the message is what a draft held when its writer stopped renewing it (a
    crashed worker, a lost connection): written by whoever noticed, and possibly cut off
    mid-sentence (docs/drafts.md)."""

    def as_message(self) -> AgentMessage:
        """This row without ``seq``, ``at``, ``redacted``, ``draft`` and ``interrupted``,
        e.g. to append it to another log. Read it hydrated (the default) for that: a row
        read with ``blobs="refs"`` holds only the digests of its large binaries, which
        another conversation refuses."""
        return AgentMessage.model_validate(
            self.model_dump(
                exclude={"seq", "at", "redacted", "draft", "interrupted"}, exclude_none=True
            )
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
