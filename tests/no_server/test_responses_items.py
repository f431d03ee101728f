"""Responses items one message per item (the Agents SDK session's storage): each item
comes back exactly, null fields and unknown item types included, through the stored
form; the exporters join a turn's items into one message, so parallel calls pair."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from redis_msglog import AgentMessage, StoredMessage, to_anthropic, to_openai, to_responses
from redis_msglog._tools.render import format_row
from redis_msglog.adapters import from_responses, to_langchain_messages
from redis_msglog.formats.responses import item_messages, join_items, message_items

from ..support.sdk_check import ANTHROPIC, OPENAI, RESPONSES, strict_validate
from .test_formats import stored

TURN: list[dict[str, Any]] = [
    {"role": "user", "content": "weather in Paris and Rome?"},
    {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "e"},
    {"type": "function_call", "call_id": "c1", "name": "w", "arguments": '{"city":"Paris"}'},
    {"type": "function_call", "call_id": "c2", "name": "w", "arguments": '{"city":"Rome"}'},
    {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
    {"type": "function_call_output", "call_id": "c2", "output": "rain"},
    {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {"type": "search"}},
    {
        "type": "message",
        "role": "assistant",
        "id": "msg_1",
        "status": "completed",
        "phase": None,
        "content": [{"type": "output_text", "text": "Sunny, then rain.", "annotations": []}],
    },
]


def fp(items: list[Any]) -> list[str]:
    return [json.dumps(item, sort_keys=True) for item in items]


def test_each_item_comes_back_exactly() -> None:
    messages = stored(item_messages(TURN))
    assert len(messages) == len(TURN)
    assert fp([i for m in messages for i in message_items(m)]) == fp(TURN)


def test_exporters_join_a_turn() -> None:
    messages = stored(item_messages(TURN))
    expected = from_responses([i for i in TURN if i.get("type") != "web_search_call"])
    assert to_openai(messages) == to_openai(expected)
    assert to_anthropic(messages) == to_anthropic(expected)
    assert [m.model_dump() for m in to_langchain_messages(messages)] == [
        m.model_dump() for m in to_langchain_messages(expected)
    ]
    strict_validate(OPENAI, to_openai(messages))
    strict_validate(ANTHROPIC, to_anthropic(messages))
    responses = to_responses(messages)
    strict_validate(RESPONSES, [i for i in responses if i.get("type") != "web_search_call"])
    assert responses[6] == TURN[6]  # the hosted item, verbatim and in place
    assert len(to_openai(messages)[1]["tool_calls"]) == 2


def test_other_messages_pass_unchanged() -> None:
    plain = [AgentMessage(role="user", content="hi"), AgentMessage(role="assistant", content="yo")]
    assert join_items(plain) == plain
    mixed = [plain[0], *item_messages(TURN[:1]), plain[1]]
    assert [m.text for m in join_items(mixed)] == ["hi", TURN[0]["content"], "yo"]
    # A message another writer logged renders as its items.
    call = AgentMessage.model_validate(
        {"role": "assistant", "content": "", "toolCalls": [{"id": "c", "name": "f", "args": {}}]}
    )
    assert [i["type"] for i in message_items(call)] == ["function_call"]


# -- any item, exactly -------------------------------------------------------------------

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
TEMPLATES: list[dict[str, Any]] = [
    *TURN,
    {"role": "user", "content": [{"type": "input_text", "text": "x"}]},
    {"type": "message", "role": "system", "content": "s"},
    {
        "type": "function_call_output",
        "call_id": "c",
        "output": [{"type": "input_text", "text": "t"}],
    },
    {"type": "reasoning", "id": "rs", "summary": [{"type": "summary_text", "text": "s"}]},
]


@st.composite
def items(draw: st.DrawFn) -> dict[str, Any]:
    """A template with fields added, replaced or nulled, or a random object."""
    if draw(st.booleans()):
        return draw(st.dictionaries(st.sampled_from(["type", "role", "content", "id", "x"]), JSON))
    item = dict(draw(st.sampled_from(TEMPLATES)))
    for key in draw(st.lists(st.sampled_from([*item, "status", "phase", "extra"]), max_size=2)):
        item[key] = draw(st.none() | JSON)
    return item


@settings(max_examples=300, deadline=None)
@given(st.lists(items(), min_size=1, max_size=4))
def test_any_item_comes_back_exactly(given_items: list[dict[str, Any]]) -> None:
    messages = stored(item_messages(given_items))
    assert fp([i for m in messages for i in message_items(m)]) == fp(given_items)
    for export in (to_openai, to_anthropic, to_responses, to_langchain_messages):
        export(messages)  # never raises


def test_msglog_show_names_items_no_message_holds() -> None:
    row = StoredMessage.model_validate(
        {**stored(item_messages(TURN))[6].model_dump(), "seq": 7, "at": datetime.now(timezone.utc)}
    )
    assert "[web_search_call ws_1]" in format_row(row).plain
