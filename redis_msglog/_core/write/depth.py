"""The nesting limit of the JSON values a message carries, checked before a write.

Every free-form JSON value of a message (a tool call's ``args`` and its ``arguments``
string, ``metadata``, and the ``extras`` of the message, its calls and its parts) may
nest at most :data:`MAX_JSON_DEPTH` levels of objects and arrays. The readers are the
reason: orjson writes at most 254 levels and pydantic serialises at most 255, the
exporters and the providers' request bodies wrap a value in up to ~8 more, and every
recursive Python walk of it (equality, JSON merge patches, ``json.dumps`` in the SDKs)
spends a frame a level out of the interpreter's 1,000. 64 keeps every reader a factor
of four inside the tightest of those, and is far beyond any real tool call (OpenAI's
structured outputs capped schema nesting at 5 levels at launch).

Depth: a scalar is 0, ``{}`` and ``[]`` are 1, ``{"a": [1]}`` is 2. An ``arguments``
string is measured as the text nests (brackets outside string literals), valid JSON or
not: a model's broken or truncated JSON is kept when shallow.
"""

from __future__ import annotations

from itertools import accumulate
from operator import sub
from typing import Any

import orjson

MAX_JSON_DEPTH = 64
"""The deepest nesting of objects and arrays a message's JSON values may have."""

_CONTAINERS = (dict, list, tuple)
_WALK_BUDGET = 256  # containers walked in Python before orjson measures the rest
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_STEP = {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}


def _orjson_depth() -> int | None:
    """The deepest value this orjson writes (254 since orjson 3.0), or ``None`` if it is
    not that: then the Python walk measures every value."""

    def nest(depth: int) -> Any:
        value: Any = 0
        for _ in range(depth):
            value = [value]
        return value

    try:
        orjson.dumps(nest(254))
        orjson.dumps(nest(255))
    except orjson.JSONEncodeError:
        return 254  # the first write went through, the second did not
    return None


_ORJSON_DEPTH = _orjson_depth()


def value_too_deep(value: Any, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether ``value`` nests objects and arrays deeper than ``limit``. Walked level by
    level (no recursion; a level's shared containers once; stops at the first level past
    ``limit``, so a cycle ends too); a large value is measured by orjson, in C, wrapped in
    as many arrays as orjson's own limit leaves for ``limit``."""
    level = [value] if isinstance(value, _CONTAINERS) else []
    depth, walked = 0, 0
    while level:
        depth += 1
        if depth > limit:
            return True
        walked += len(level)
        if walked > _WALK_BUDGET and _ORJSON_DEPTH is not None:
            verdict = _orjson_too_deep(value, _ORJSON_DEPTH - limit)
            if verdict is not None:
                return verdict
        below: dict[int, Any] = {}
        for container in level:
            for child in container.values() if isinstance(container, dict) else container:
                if isinstance(child, _CONTAINERS):
                    below[id(child)] = child
        level = list(below.values())
    return False


def _orjson_too_deep(value: Any, wrap: int) -> bool | None:
    """Whether orjson refuses ``value`` inside ``wrap`` arrays for its depth; ``None`` if
    it refuses it for something else (not JSON: the walk goes on)."""
    if wrap < 0:
        return None
    for _ in range(wrap):
        value = [value]
    try:
        orjson.dumps(value)
    except orjson.JSONEncodeError as exc:
        return True if "Recursion limit" in str(exc) else None
    return False


def text_too_deep(text: str, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether a JSON text, valid or not, nests brackets deeper than ``limit`` outside
    its string literals (a backslash escapes a following backslash or quote). Most texts
    hold fewer opening brackets than ``limit``: two ``str.count`` calls tell. The others
    are measured with C-speed string operations, no Python loop per character."""
    if text.count("[") + text.count("{") <= limit:
        return False
    unescaped = text.replace("\\\\", "").replace('\\"', "")
    outside = "".join(unescaped.split('"')[::2])  # every other piece is inside a string
    brackets = outside.encode("utf-8", "surrogatepass").translate(None, _NOT_BRACKETS)
    sums = list(accumulate(map(_STEP.__getitem__, brackets)))  # the nesting after each
    if not sums:
        return False
    if min(sums) >= 0:
        return max(sums) > limit
    # A stray closer never takes the nesting below 0: the sum minus its lowest so far.
    lows = accumulate(sums, min, initial=0)
    next(lows)
    return bool(max(map(sub, sums, lows)) > limit)


def too_deep_field(msg: object) -> str | None:
    """The first of ``msg``'s (an :class:`~redis_msglog.AgentMessage`) JSON values that
    nests deeper than :data:`MAX_JSON_DEPTH` (its path, as
    :class:`~redis_msglog.InvalidMessageError` names it), or ``None``."""
    fields = msg.__dict__  # typed object: this module sits below models, which uses it
    for name in ("metadata", "extras"):
        if fields[name] is not None and value_too_deep(fields[name]):
            return name
    if fields["tool_calls"] is not None:
        for index, call in enumerate(fields["tool_calls"]):
            if _arguments_too_deep(call.args, call.arguments):
                return f"tool_calls.{index}.{'args' if call.arguments is None else 'arguments'}"
            if call.extras is not None and value_too_deep(call.extras):
                return f"tool_calls.{index}.extras"
    if type(fields["content"]) is not str:
        for index, part in enumerate(fields["content"]):
            if part.extras is not None and value_too_deep(part.extras):
                return f"content.{index}.extras"
    return None


def _arguments_too_deep(args: Any, arguments: str | None) -> bool:
    if arguments is None:
        return value_too_deep(args)
    if arguments.count("[") + arguments.count("{") <= MAX_JSON_DEPTH:
        return False  # most calls: fewer opening brackets than the limit
    if isinstance(args, str) and args == arguments:
        return text_too_deep(arguments)  # not JSON: kept as the text itself
    return value_too_deep(args)  # what the text parses to: the same depth, measured in C
