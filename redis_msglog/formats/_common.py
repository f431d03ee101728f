"""What every format shares: tool-call pairing, valid ids, argument normalisation, the
``extras`` merge patches that make a round trip within one format exact, and the errors
importers raise.

The patch rule, in one place: an importer renders the neutral message it built with the
same function the exporter uses, and keeps what differs from the input as a JSON merge
patch (RFC 7386: objects merge key by key, ``null`` removes a key, anything else
replaces) in ``extras[<format>]``. The exporter renders and applies it. So everything the
neutral model does not hold (``status``, ``cache_control``, a ``developer`` role, a
string where the default is a list...) comes back exactly, and only in its own format.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pydantic import BaseModel, TypeAdapter, ValidationError

from .._core.args import is_int
from .._core.write.depth import MAX_JSON_DEPTH, too_deep_field
from ..errors import InvalidArgumentError, InvalidMessageError
from ..models import (
    MAX_USAGE_COST,
    MAX_USAGE_TOKENS,
    AgentMessage,
    describe_errors,
    parse_arguments,
)
from ..parts import ContentPart, decode_base64, encode_base64

MISSING_RESULT = "error: no result was recorded for this tool call"
"""The content of the result synthesized for a tool call that has none."""

_VALID_ID = re.compile(r"^[a-zA-Z0-9_-]{1,40}$")
_INVALID_NAME_CHARS = re.compile(r"[^a-zA-Z0-9_-]")
_DATA_URL = re.compile(r"^data:([^;,]+);base64,(.*)$", re.DOTALL)

M = TypeVar("M", bound=BaseModel)


def normalize_args(args: Any) -> dict[str, Any]:
    """Tool-call arguments as the JSON object both providers require."""
    if isinstance(args, dict):
        return args
    if args is None:
        return {}
    if isinstance(args, str):
        parsed = parse_arguments(args)  # the text itself when not JSON or too deep
        if isinstance(parsed, dict):
            return parsed
    return {"value": args}


def tool_call_id(raw: str) -> str:
    """A call id valid for both providers; the same raw id always maps to the same one."""
    if _VALID_ID.match(raw):
        return raw
    return "call_" + hashlib.sha256(raw.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def openai_name(name: str | None) -> str | None:
    """``name`` as OpenAI accepts it: ``[a-zA-Z0-9_-]``, at most 64 characters."""
    if not name:
        return None
    cleaned = _INVALID_NAME_CHARS.sub("_", name)[:64]
    return cleaned or None


# -- pairing ----------------------------------------------------------------------------


@dataclass
class Turn:
    """A message, and for an assistant turn with tool calls, its results in call order:
    ``(raw call id, the tool message or None when none was logged)``."""

    message: AgentMessage
    results: list[tuple[str, AgentMessage | None]] = field(default_factory=list)


def require_messages(messages: Sequence[AgentMessage]) -> None:
    """What every exporter takes: a sequence (a list, a tuple, ``log.all()``...) of
    :class:`AgentMessage`; InvalidArgumentError otherwise, naming the first other thing."""
    if isinstance(messages, (str, bytes, Mapping)) or not isinstance(messages, Sequence):
        raise InvalidArgumentError(
            f"expected a sequence of AgentMessage, got {type(messages).__name__}"
        )
    for index, msg in enumerate(messages):
        if not isinstance(msg, AgentMessage):
            raise InvalidArgumentError(
                f"message {index}: expected an AgentMessage, got {type(msg).__name__} "
                "(AgentMessage.model_validate makes one of a dict)"
            )


def require_inline(messages: Sequence[AgentMessage]) -> None:
    """Exporters send bytes: a part read as a reference (``blobs="refs"``) has none. And
    they encode every JSON value: one nested deeper than the limit (a message built
    directly, never one the log accepted) is refused here, not by the JSON encoder."""
    require_messages(messages)
    for index, msg in enumerate(messages):
        too_deep = too_deep_field(msg)
        if too_deep is not None:
            raise InvalidMessageError(
                f"message {index}: {too_deep} nests deeper than {MAX_JSON_DEPTH} levels of "
                "objects and arrays, the limit for every JSON value of a message",
                index=index,
            )
        if isinstance(msg.content, str):
            continue
        for path, part in enumerate(msg.content):
            if getattr(part, "blob", None) is not None:
                raise InvalidMessageError(
                    f"message {index}: content.{path} is a reference to a stored blob; "
                    "read the history with blobs='hydrate' (the default) to export it",
                    index=index,
                )


def paired(messages: Sequence[AgentMessage]) -> list[Turn]:
    """Pair tool results with the calls of the assistant turn before them, placed right
    after it in call order; messages logged in between follow the results; a call with no
    result gets ``None`` (rendered as :data:`MISSING_RESULT`); a result with no call, or a
    second result for one call, is dropped."""
    require_inline(messages)
    turns: list[Turn] = []
    open_turn: Turn | None = None  # the assistant turn whose calls await results
    received: dict[str, AgentMessage] = {}
    deferred: list[Turn] = []

    def close() -> None:
        nonlocal open_turn
        if open_turn is not None:
            for call in open_turn.message.tool_calls or []:
                open_turn.results.append((call.id, received.get(call.id)))
            turns.extend(deferred)
        open_turn = None
        received.clear()
        deferred.clear()

    for msg in messages:
        if msg.role == "tool":
            expected = {c.id for c in open_turn.message.tool_calls or []} if open_turn else set()
            if msg.tool_call_id in expected and msg.tool_call_id not in received:
                received[msg.tool_call_id] = msg
                if len(received) == len(expected):
                    close()
            continue  # orphan or duplicate result: dropped
        if msg.role == "assistant" and msg.tool_calls:
            close()
            open_turn = Turn(msg)
            turns.append(open_turn)
        elif open_turn is not None:
            deferred.append(Turn(msg))
        else:
            turns.append(Turn(msg))
    close()
    return turns


# -- merge patches ----------------------------------------------------------------------

_SAME = object()


def same_json(a: Any, b: Any) -> bool:
    """Equal as JSON: ``1``, ``1.0`` and ``True`` differ; a null field equals a missing one."""
    if isinstance(a, dict) and isinstance(b, dict):
        keys = {k for k, v in a.items() if v is not None} | {
            k for k, v in b.items() if v is not None
        }
        return all(same_json(a.get(k), b.get(k)) for k in keys)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(map(same_json, a, b))
    return type(a) is type(b) and bool(a == b)


def make_patch(rendered: Any, given: Any) -> Any:
    """The merge patch turning ``rendered`` into ``given`` (``None`` when they are equal
    as JSON, null fields counting as missing)."""
    patch = _diff(rendered, given)
    return None if patch is _SAME else patch


def _diff(rendered: Any, given: Any) -> Any:
    if isinstance(rendered, dict) and isinstance(given, dict):
        patch: dict[str, Any] = {}
        for key, value in given.items():
            if value is None:
                continue
            sub = _diff(rendered.get(key), value) if key in rendered else value
            if sub is not _SAME:
                patch[key] = sub
        for key, value in rendered.items():
            if value is not None and given.get(key) is None:
                patch[key] = None
        return patch or _SAME
    return _SAME if same_json(rendered, given) else given


def apply_patch(rendered: Any, patch: Any) -> Any:
    """``rendered`` with the merge patch applied (RFC 7386); ``rendered`` is not changed."""
    if not isinstance(patch, dict):
        return patch
    out = dict(rendered) if isinstance(rendered, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = apply_patch(out.get(key), value)
    return out


def with_extras(rendered: Any, extras: Mapping[str, Any] | None, fmt: str) -> Any:
    """``rendered`` with the ``fmt`` patch of ``extras`` applied, if there is one."""
    if extras is None or fmt not in extras:
        return rendered
    return apply_patch(rendered, extras[fmt])


def message_extras(msg: AgentMessage, fmt: str, key: str = "content") -> dict[str, Any] | None:
    """``msg.extras`` for rendering ``msg`` in ``fmt``, with the message's own text winning
    over a text its patch holds: a string there only says "send a string" (and ``null``,
    "no content" for an empty one), so an edited copy of a message never sends the text it
    had when it was imported."""
    patch = (msg.extras or {}).get(fmt)
    if not isinstance(patch, dict) or key not in patch or not isinstance(msg.content, str):
        return msg.extras
    if isinstance(patch[key], str):
        patch = {**patch, key: msg.content}
    elif patch[key] is None and msg.content:
        patch = {k: v for k, v in patch.items() if k != key}
    return {fmt: patch}


def extras_for(fmt: str, rendered: Any, given: Any) -> dict[str, Any] | None:
    """``{fmt: patch}`` when the input differs from its rendering, else ``None``."""
    patch = make_patch(rendered, given)
    return None if patch is None else {fmt: patch}


# -- errors and validation --------------------------------------------------------------


def invalid(index: int, path: str, problem: str) -> InvalidMessageError:
    """The error for bad input: the message's index and the path inside it."""
    where = f"message {index}" + (f": {path}" if path else "")
    return InvalidMessageError(f"{where}: {problem}", index=index)


def build(model: type[M], index: int, path: str, data: Mapping[str, Any]) -> M:
    """``model.model_validate(data)``, a validation error named by index and path."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        prefix = f"{path}: " if path else ""
        raise invalid(index, "", prefix + describe_errors(exc, data)) from exc


def usage_of(
    input_tokens: Any = 0,
    output_tokens: Any = 0,
    cached_tokens: Any = 0,
    reasoning_tokens: Any = 0,
    cost: Any = None,
    currency: str | None = None,
) -> dict[str, Any] | None:
    """A framework's usage record as a message's ``usage`` (a dict for
    :class:`~redis_msglog.Usage`), or ``None`` when it records nothing. Lenient on
    purpose: the framework's own record is kept whole in the message's extras, so a count
    that is no count (negative, a text, past what totals hold) is left out here rather
    than refusing the message; so is a cost that is not a finite number >= 0."""
    usage = {
        name: value
        for name, value in (
            ("input_tokens", input_tokens),
            ("output_tokens", output_tokens),
            ("cached_tokens", cached_tokens),
            ("reasoning_tokens", reasoning_tokens),
        )
        if is_int(value) and 0 < value <= MAX_USAGE_TOKENS
    }
    try:
        price = None if cost is None or isinstance(cost, bool) else float(cost)
    except (TypeError, ValueError):
        price = None
    if price is not None and 0 <= price <= MAX_USAGE_COST and currency:
        usage["cost"], usage["currency"] = price, currency
    return usage or None


_PART: TypeAdapter[ContentPart] = TypeAdapter(ContentPart)


def build_part(index: int, path: str, data: Mapping[str, Any]) -> ContentPart:
    """A validated content part, a validation error named by index and path."""
    try:
        return _PART.validate_python(data)
    except ValidationError as exc:
        # The first location is the union's tag: the part's own ``type``.
        problems = "; ".join(
            f"{'.'.join([path, *map(str, e['loc'][1:])])}: {e['msg']}" for e in exc.errors()
        )
        raise invalid(index, "", problems) from exc


def mapping(value: Any, index: int, path: str) -> Mapping[str, Any]:
    """``value`` if it is a mapping, an SDK response object (a pydantic model, such as an
    Anthropic ``ThinkingBlock`` or a Responses output item, which users pass back as
    input) as its JSON dict without null fields, else the error naming where."""
    if isinstance(value, BaseModel):
        dumped: dict[str, Any] = value.model_dump(mode="json", exclude_none=True)
        return dumped
    if not isinstance(value, Mapping):
        raise invalid(index, path, f"expected an object, got {type(value).__name__}")
    return value


def sequence(value: Any, index: int, path: str) -> list[Any]:
    """``value`` as a list if it is a non-string sequence (SDKs accept iterables)."""
    if isinstance(value, (str, bytes, Mapping)) or not hasattr(value, "__iter__"):
        raise invalid(index, path, f"expected a list, got {type(value).__name__}")
    return list(value)


def base64_bytes(value: Any, index: int, path: str) -> bytes:
    """The bytes of a provider's base64 string; bad base64 is the error naming where."""
    if not isinstance(value, str):
        raise invalid(index, path, f"expected a base64 string, got {type(value).__name__}")
    try:
        return decode_base64(value)
    except ValueError as exc:
        raise invalid(index, path, str(exc)) from None


def parse_data_url(url: str, index: int, path: str) -> tuple[str, bytes] | None:
    """``(media_type, bytes)`` of a ``data:<type>;base64,`` URL, ``None`` for any other URL."""
    match = _DATA_URL.match(url)
    if match is None:
        return None
    return match.group(1), base64_bytes(match.group(2), index, path)


def data_url(media_type: str | None, data: bytes) -> str:
    """A ``data:`` URL (``application/octet-stream`` when the type is unknown)."""
    return f"data:{media_type or 'application/octet-stream'};base64,{encode_base64(data)}"


def by_type(
    handlers: Mapping[str, Callable[..., Any]], kind: Any, index: int, path: str
) -> Callable[..., Any]:
    """The handler for a part's ``type``; an unknown type is the error naming where."""
    handler = handlers.get(kind) if isinstance(kind, str) else None
    if handler is None:
        raise invalid(index, f"{path}.type", f"unsupported part type {kind!r}")
    return handler


def text_part(p: dict[str, Any], i: int, path: str) -> dict[str, Any]:
    """The neutral text part of an imported text part (Chat ``text``, Responses
    ``input_text``/``output_text``): the same field in every format."""
    return {"type": "text", "text": p.get("text")}


def refusal_part(p: dict[str, Any], i: int, path: str) -> dict[str, Any]:
    """The neutral refusal part of an imported OpenAI ``refusal`` (Chat and Responses)."""
    return {"type": "refusal", "refusal": p.get("refusal")}
