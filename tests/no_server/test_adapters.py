"""Adapters: output that the official SDK types accept AND that obeys the rules the types
do not enforce (pairing, ids, names, empty blocks...); a deliberately naive adapter must
fail the same validators. The clients' format methods on every backend:
``tests/contract/test_adapters_on_a_server.py``."""

from __future__ import annotations

import re
from typing import Any

import orjson
import pytest
from anthropic.types import MessageParam
from langchain_core.messages import convert_to_messages
from openai.types.chat import ChatCompletionMessageParam
from pydantic import TypeAdapter

from redis_msglog import AgentMessage, to_anthropic, to_langchain, to_openai
from redis_msglog.adapters import MISSING_RESULT, tool_call_id

OPENAI_TYPES = TypeAdapter(list[ChatCompletionMessageParam])
ANTHROPIC_TYPES = TypeAdapter(list[MessageParam])
NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
ANTHROPIC_ID = re.compile(r"^[a-zA-Z0-9_-]+$")


def check_openai(messages: list[dict[str, Any]]) -> None:
    OPENAI_TYPES.validate_python(messages)
    awaiting: set[str] = set()
    for msg in messages:
        if msg["role"] == "tool":
            assert "name" not in msg
            assert msg["tool_call_id"] in awaiting, f"unpaired result {msg}"
            awaiting.discard(msg["tool_call_id"])
            continue
        assert not awaiting, f"calls {awaiting} have no result before {msg}"
        if "name" in msg:
            assert NAME.match(msg["name"]), msg["name"]
        if msg["content"] is None:
            assert msg["role"] == "assistant" and msg.get("tool_calls")
        if "tool_calls" in msg:
            assert msg["tool_calls"], "empty tool_calls list"
            for call in msg["tool_calls"]:
                assert len(call["id"]) <= 40 and ANTHROPIC_ID.match(call["id"])
                assert isinstance(orjson.loads(call["function"]["arguments"]), dict)
                awaiting.add(call["id"])
    assert not awaiting, f"calls {awaiting} have no result"


def check_anthropic(turns: list[dict[str, Any]]) -> None:
    ANTHROPIC_TYPES.validate_python(turns)
    if not turns:
        return
    assert turns[0]["role"] == "user"
    previous_uses: set[str] = set()
    for index, turn in enumerate(turns):
        assert turn["role"] in ("user", "assistant")
        if index:
            assert turn["role"] != turns[index - 1]["role"], "roles must alternate"
        blocks = turn["content"]
        assert blocks, "empty turn"
        uses = set()
        results_done = False
        for block in blocks:
            if block["type"] == "text":
                assert block["text"].strip(), "empty or whitespace-only text block"
                results_done = True
            elif block["type"] == "tool_use":
                assert turn["role"] == "assistant" and ANTHROPIC_ID.match(block["id"])
                assert isinstance(block["input"], dict)
                uses.add(block["id"])
            elif block["type"] == "tool_result":
                assert turn["role"] == "user" and not results_done, "results come first"
                assert block["tool_use_id"] in previous_uses, "orphan tool_result"
                previous_uses.discard(block["tool_use_id"])
        assert not previous_uses, f"tool_use {previous_uses} has no result in the next turn"
        previous_uses = uses
    assert not previous_uses, "the history ends with unanswered tool_use"
    last = turns[-1]
    if last["role"] == "assistant" and last["content"][-1]["type"] == "text":
        assert last["content"][-1]["text"] == last["content"][-1]["text"].rstrip()


def check_langchain(messages: list[dict[str, Any]]) -> None:
    converted = convert_to_messages(messages)
    assert len(converted) == len(messages)
    for msg in messages:
        assert set(msg) == {"role", "content"} and msg["role"] in ("user", "assistant", "system")
        assert msg["content"].strip(), "a blank turn: Anthropic's API would reject it"


def call(call_id: str, args: Any = None, name: str = "lookup") -> dict[str, Any]:
    return {"id": call_id, "name": name, "args": args}


def asks(*calls: dict[str, Any], content: str = "") -> dict[str, Any]:
    return {"role": "assistant", "content": content, "toolCalls": list(calls)}


def result(call_id: str, content: str = "ok") -> dict[str, Any]:
    return {"role": "tool", "content": content, "toolCallId": call_id, "name": "lookup"}


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def assistant(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


SYSTEM = {"role": "system", "content": "Be terse."}

VECTORS: dict[str, list[dict[str, Any]]] = {
    "plain chat": [SYSTEM, user("hi"), assistant("hello")],
    "tool call with empty content": [user("q"), asks(call("c1", {"q": 1})), result("c1")],
    "empty tool_calls list": [user("q"), {"role": "assistant", "content": "x", "toolCalls": []}],
    "parallel calls then a user turn": [
        user("q"),
        asks(call("a"), call("b"), content="checking"),
        result("a", "A"),
        result("b", "B"),
        user("and?"),
        assistant("done"),
    ],
    "results out of order": [user("q"), asks(call("a"), call("b")), result("b"), result("a")],
    "user turn logged between call and result": [
        user("q"),
        asks(call("a")),
        user("(another worker) hurry"),
        result("a"),
    ],
    "non-object args": [
        user("q"),
        asks(
            call("s", "text"),
            call("j", '{"k": 1}'),
            call("l", [1, 2]),
            call("n", 3),
            call("z", None),
        ),
        *[result(i) for i in "sjlnz"],
    ],
    "invalid names": [
        {"role": "user", "content": "q", "name": "Jane Doe!"},
        {"role": "assistant", "content": "a", "name": "x" * 80},
        {"role": "user", "content": "q", "name": "日本"},
    ],
    "long and odd tool-call ids": [
        user("q"),
        asks(call("toolu_" + "x" * 60), call("call:1/2 ü")),
        result("toolu_" + "x" * 60),
        result("call:1/2 ü"),
    ],
    "dangling tool call": [user("q"), asks(call("gone"))],
    "orphan tool result": [user("q"), result("nobody"), assistant("ok")],
    "system in the middle": [user("a"), SYSTEM, assistant("b")],
    "assistant first": [assistant("Welcome back."), user("hi")],
    "final assistant with trailing whitespace": [user("q"), assistant("answer  \n")],
    "whitespace-only messages": [user("q"), assistant("   "), user(" "), assistant("a")],
    "unicode and JSON-looking content": [user('{"role": "system"} 日本 🧪'), assistant("[1, 2]")],
    "consecutive user turns": [user("a"), user("b"), assistant("c")],
    "empty tool result": [user("q"), asks(call("c")), result("c", "")],
}


def _models(history: list[dict[str, Any]]) -> list[AgentMessage]:
    return [AgentMessage.model_validate(m) for m in history]


@pytest.mark.parametrize("case", sorted(VECTORS))
def test_every_vector_passes_the_validators(case: str) -> None:
    history = _models(VECTORS[case])
    check_openai(to_openai(history))
    check_anthropic(to_anthropic(history))
    check_langchain(to_langchain(history))


def test_parallel_calls_exact_output() -> None:
    history = _models(VECTORS["parallel calls then a user turn"])
    assert to_openai(history) == [
        {"role": "user", "content": "q"},
        {
            "role": "assistant",
            "content": "checking",
            "tool_calls": [
                {"id": "a", "type": "function", "function": {"name": "lookup", "arguments": "{}"}},
                {"id": "b", "type": "function", "function": {"name": "lookup", "arguments": "{}"}},
            ],
        },
        {"role": "tool", "tool_call_id": "a", "content": "A"},
        {"role": "tool", "tool_call_id": "b", "content": "B"},
        {"role": "user", "content": "and?"},
        {"role": "assistant", "content": "done"},
    ]
    assert to_anthropic(history) == [
        {"role": "user", "content": [{"type": "text", "text": "q"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "checking"},
                {"type": "tool_use", "id": "a", "name": "lookup", "input": {}},
                {"type": "tool_use", "id": "b", "name": "lookup", "input": {}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "a", "content": "A"},
                {"type": "tool_result", "tool_use_id": "b", "content": "B"},
                {"type": "text", "text": "and?"},
            ],
        },
        {"role": "assistant", "content": [{"type": "text", "text": "done"}]},
    ]
    assert to_langchain(history) == [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "checking"},
        {"role": "user", "content": "and?"},
        {"role": "assistant", "content": "done"},
    ]


def test_langchain_drops_blank_and_whitespace_only_turns() -> None:
    history = _models(
        [
            {"role": "system", "content": " \n"},
            user("q"),
            assistant("   "),
            user(""),
            asks(call("c"), content="\t"),
            result("c"),
            assistant(" a "),
        ]
    )
    assert to_langchain(history) == [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": " a "},  # kept as written: only blank turns go
    ]


def test_documented_choices() -> None:
    args = to_anthropic(_models(VECTORS["non-object args"]))[1]["content"]
    assert [b["input"] for b in args] == [
        {"value": "text"},
        {"k": 1},
        {"value": [1, 2]},
        {"value": 3},
        {},
    ]
    openai_args = [
        c["function"]["arguments"]
        for c in to_openai(_models(VECTORS["non-object args"]))[1]["tool_calls"]
    ]
    assert [orjson.loads(a) for a in openai_args] == [b["input"] for b in args]

    ids = to_openai(_models(VECTORS["long and odd tool-call ids"]))
    rewritten = [c["id"] for c in ids[1]["tool_calls"]]
    assert rewritten == [tool_call_id("toolu_" + "x" * 60), tool_call_id("call:1/2 ü")]
    assert [m["tool_call_id"] for m in ids[2:]] == rewritten
    assert all(i.startswith("call_") and len(i) == 37 for i in rewritten)

    dangling = to_openai(_models(VECTORS["dangling tool call"]))
    assert dangling[-1] == {"role": "tool", "tool_call_id": "gone", "content": MISSING_RESULT}
    assert to_anthropic(_models(VECTORS["dangling tool call"]))[-1]["content"][0]["is_error"]

    assert [m["role"] for m in to_openai(_models(VECTORS["orphan tool result"]))] == [
        "user",
        "assistant",
    ]
    names = [m.get("name") for m in to_openai(_models(VECTORS["invalid names"]))]
    assert names == ["Jane_Doe_", "x" * 64, "__"]
    middle = _models(VECTORS["system in the middle"])
    assert [m["role"] for m in to_openai(middle)] == ["user", "system", "assistant"]
    assert [t["role"] for t in to_anthropic(middle)] == ["user", "assistant"]
    final = to_anthropic(_models(VECTORS["final assistant with trailing whitespace"]))
    assert final[-1]["content"] == [{"type": "text", "text": "answer"}]
    assert to_anthropic(_models(VECTORS["assistant first"]))[0]["role"] == "user"
    waiting = to_openai(_models(VECTORS["user turn logged between call and result"]))
    assert [m["role"] for m in waiting] == ["user", "assistant", "tool", "user"]


def naive_openai(history: list[AgentMessage]) -> list[dict[str, Any]]:
    out = []
    for m in history:
        item: dict[str, Any] = {"role": m.role, "content": m.content, "name": m.name or "x"}
        if m.tool_calls is not None:
            item["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": orjson.dumps(c.args).decode()},
                }
                for c in m.tool_calls
            ]
        if m.tool_call_id:
            item["tool_call_id"] = m.tool_call_id
        out.append(item)
    return out


def naive_anthropic(history: list[AgentMessage]) -> list[dict[str, Any]]:
    out = []
    for m in history:
        if m.role == "system":
            continue
        blocks: list[dict[str, Any]] = [{"type": "text", "text": m.content}]
        if m.role == "tool":
            blocks = [{"type": "tool_result", "tool_use_id": m.tool_call_id, "content": m.content}]
        blocks += [
            {"type": "tool_use", "id": c.id, "name": c.name, "input": c.args}
            for c in m.tool_calls or []
        ]
        out.append({"role": "assistant" if m.role == "assistant" else "user", "content": blocks})
    return out


@pytest.mark.parametrize(
    "naive, check", [(naive_openai, check_openai), (naive_anthropic, check_anthropic)]
)
def test_a_naive_adapter_fails_the_validators(naive: Any, check: Any) -> None:
    failures = 0
    for history in VECTORS.values():
        try:
            check(naive(_models(history)))
        except (AssertionError, ValueError):
            failures += 1
    assert failures >= len(VECTORS) // 2
