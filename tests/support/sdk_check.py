"""Validation against the official SDK types, made strict.

pydantic validates an SDK ``Iterable[...]`` field lazily (a ``ValidatorIterator``) and
ignores keys a ``TypedDict`` does not declare. ``strict_validate`` consumes every iterator
(so nested parts are checked) and fails on any key the types do not know, so a field the
provider would reject is caught here, not by the provider."""

from __future__ import annotations

from typing import Any

from anthropic.types import MessageParam, TextBlockParam
from openai.types.chat import ChatCompletionMessageParam
from openai.types.responses import ResponseInputItemParam
from pydantic import TypeAdapter

OPENAI = TypeAdapter(list[ChatCompletionMessageParam])
RESPONSES = TypeAdapter(list[ResponseInputItemParam])
ANTHROPIC = TypeAdapter(list[MessageParam])
ANTHROPIC_SYSTEM = TypeAdapter(str | list[TextBlockParam])


def strict_validate(adapter: TypeAdapter[Any], value: Any) -> None:
    """Validate ``value`` fully; raise ``AssertionError`` for a key the types drop."""
    _compare(value, _consume(adapter.validate_python(value)), "$")


def _consume(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _consume(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_consume(v) for v in value]
    if hasattr(value, "__next__"):  # pydantic's ValidatorIterator: validates as it goes
        return [_consume(v) for v in value]
    return value


def _compare(given: Any, validated: Any, path: str) -> None:
    if isinstance(given, dict):
        assert isinstance(validated, dict), path
        unknown = set(given) - set(validated)
        assert not unknown, f"{path}: keys the SDK types do not declare: {unknown}"
        for key in given:
            _compare(given[key], validated[key], f"{path}.{key}")
    elif isinstance(given, list):
        assert isinstance(validated, list) and len(given) == len(validated), path
        for n, (a, b) in enumerate(zip(given, validated, strict=True)):
            _compare(a, b, f"{path}[{n}]")
