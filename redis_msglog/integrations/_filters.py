"""A log's write filter (``before_append``) over the framework copies an integration
stores: every string a row's ``extras`` hold (the framework's own serialized event or
message, and the formats' merge patches, on the message, its parts and its tool calls)
goes through the filter too, so what the filter removes from the text is in no stored
byte and in nothing the framework reads back.

The filter runs twice per write: once over the messages (as for any log), then once over
one message per string of their copies: the row's message (its role, name, ids...) with
that string as its ``content`` and no tool calls or extras. The string becomes the
content the filter returns. Object keys, numbers and the neutral fields are not
re-filtered (the first run saw the neutral fields). A copy a filter has made unreadable
to its framework (a rewritten type name, say) reads back from the neutral fields, as
another writer's message does.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Sequence
from typing import Any

from .._core.write.encode import BeforeAppend, _filtered
from ..errors import InvalidMessageError
from ..models import AgentMessage, ToolCall
from ..parts import ContentPart

_COVERING = "_msglog_covers_copies"  # marks a filter made here: never wrapped twice
_Slot = tuple[Any, Any]  # (the dict or list holding a string, its key or index)


def covering_copies(before_append: BeforeAppend) -> BeforeAppend:
    """``before_append``, run over the messages and then over their copies' strings
    (``before_append`` itself when it is such a filter already)."""
    if getattr(before_append, _COVERING, False):
        return before_append

    def run(messages: list[AgentMessage]) -> list[AgentMessage]:
        filtered = [_copied(m) for m in _filtered(before_append, tuple(messages))]
        slots: list[_Slot] = []
        asked: list[AgentMessage] = []
        for message in filtered:
            bare = message.model_copy(update={"tool_calls": None, "extras": None})
            for holder, key in _strings(message):
                slots.append((holder, key))
                asked.append(bare.model_copy(update={"content": holder[key]}))
        if not asked:
            return filtered
        answers = _filtered(before_append, tuple(asked))
        for (holder, key), answer in zip(slots, answers, strict=True):
            if not isinstance(answer.content, str):
                raise InvalidMessageError(
                    "before_append turned a string of a framework copy into content parts "
                    "(as before_append returned it). Nothing was written."
                )
            holder[key] = answer.content
        return filtered

    setattr(run, _COVERING, True)
    return run


def _copied(message: AgentMessage) -> AgentMessage:
    """``message`` with extras of its own (the filter's result may share them with its
    input, which is the caller's), on itself, its parts and its tool calls."""
    update: dict[str, Any] = {}
    if message.extras:
        update["extras"] = copy.deepcopy(message.extras)
    if isinstance(message.content, list) and any(p.extras for p in message.content):
        update["content"] = [_own(p) for p in message.content]
    if message.tool_calls and any(c.extras for c in message.tool_calls):
        update["tool_calls"] = [_own(c) for c in message.tool_calls]
    return message.model_copy(update=update) if update else message


def _own(item: ContentPart | ToolCall) -> Any:
    extras = item.extras
    return item.model_copy(update={"extras": copy.deepcopy(extras)}) if extras else item


def _strings(message: AgentMessage) -> Iterator[_Slot]:
    """Where the strings of the message's extras are: on it, its parts, its calls."""
    holders: list[Any] = [message.extras]
    if isinstance(message.content, list):
        holders += [p.extras for p in message.content]
    holders += [c.extras for c in message.tool_calls or []]
    for extras in holders:
        if extras:
            yield from _walk(extras)


def _walk(value: Any) -> Iterator[_Slot]:
    items: Sequence[tuple[Any, Any]]
    if isinstance(value, dict):
        items = list(value.items())
    elif isinstance(value, list):
        items = list(enumerate(value))
    else:
        return
    for key, item in items:
        if isinstance(item, str):
            yield value, key
        else:
            yield from _walk(item)
