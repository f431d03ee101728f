"""The nesting limit of the JSON values a message carries, checked before a write.

Every free-form JSON value of a message (a tool call's ``args`` and its ``arguments``
string, ``metadata``, and the ``extras`` of the message, its calls and its parts) may
nest at most :data:`MAX_JSON_DEPTH` levels of objects and arrays. The readers are the
reason: orjson writes at most 254 levels and pydantic serialises at most 255, the
exporters and the providers' request bodies wrap a value in up to ~8 more, and every
recursive Python walk of it (equality, JSON merge patches, ``json.dumps`` in the SDKs)
spends a frame a level out of the interpreter's 1,000. 64 keeps every reader a factor
of four inside the tightest of those, and is far beyond any real tool call (OpenAI's
structured outputs allow 10 levels of schema nesting).

Depth: a scalar is 0, ``{}`` and ``[]`` are 1, ``{"a": [1]}`` is 2. An ``arguments``
string is measured as the text nests (brackets outside string literals), valid JSON or
not: a model's broken or truncated JSON is kept when shallow.
"""

from __future__ import annotations

import re
from itertools import accumulate
from operator import sub
from typing import Any

from .models import AgentMessage

MAX_JSON_DEPTH = 64
"""The deepest nesting of objects and arrays a message's JSON values may have."""

_CONTAINERS = (dict, list, tuple)
# A JSON string literal (or a truncated one running to the end), then the brackets.
_STRING = re.compile(r'"(?:[^"\\]|\\.)*(?:"|\Z)', re.S)
_BRACKET = re.compile(r"[\[\]{}]")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


def value_too_deep(value: Any, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether ``value`` nests objects and arrays deeper than ``limit``. Iterative and
    stops at the first level past it, so no value (a cycle included) recurses or runs
    long; a level's shared containers are walked once."""
    level = [value] if isinstance(value, _CONTAINERS) else []
    depth = 0
    while level:
        depth += 1
        if depth > limit:
            return True
        below: dict[int, Any] = {}
        for container in level:
            for child in container.values() if isinstance(container, dict) else container:
                if isinstance(child, _CONTAINERS):
                    below[id(child)] = child
        level = list(below.values())
    return False


def text_too_deep(text: str, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether a JSON text (valid or not) nests brackets deeper than ``limit`` outside
    its string literals. Most texts hold fewer opening brackets than ``limit``: two
    ``str.count`` calls tell; the others are scanned with regular expressions, no
    Python loop per character."""
    if text.count("[") + text.count("{") <= limit:
        return False
    steps = map(_STEP.__getitem__, _BRACKET.findall(_STRING.sub("", text)))
    # The nesting after each bracket, a stray closer never taking it below 0: the running
    # sum minus the lowest it has been (0 included).
    sums = list(accumulate(steps))
    lows = accumulate(sums, min, initial=0)
    next(lows)
    return max(map(sub, sums, lows), default=0) > limit


def too_deep_field(msg: AgentMessage) -> str | None:
    """The first of ``msg``'s JSON values that nests deeper than :data:`MAX_JSON_DEPTH`
    (its path, as :class:`~redis_msglog.InvalidMessageError` names it), or ``None``."""
    fields = msg.__dict__
    for name in ("metadata", "extras"):
        if fields[name] is not None and value_too_deep(fields[name]):
            return name
    for index, call in enumerate(fields["tool_calls"] or ()):
        if call.arguments is not None and call.args == call.arguments:
            deep = text_too_deep(call.arguments)  # not JSON: kept as the text itself
        else:  # args is what arguments parses to, if given: the same depth
            deep = value_too_deep(call.args)
        if deep:
            what = "arguments" if call.arguments is not None else "args"
            return f"tool_calls.{index}.{what}"
        if call.extras is not None and value_too_deep(call.extras):
            return f"tool_calls.{index}.extras"
    if type(fields["content"]) is not str:
        for index, part in enumerate(fields["content"]):
            if part.extras is not None and value_too_deep(part.extras):
                return f"content.{index}.extras"
    return None
