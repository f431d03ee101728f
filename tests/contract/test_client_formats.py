"""The clients' format methods on every backend, sync and asyncio: a history imported with
``append_openai`` / ``append_responses`` / ``append_anthropic`` / ``append_langchain``
(one atomic ``append_many`` each) and read back through the log exports equal to the
input, as JSON with null fields dropped (LangChain: equal ``model_dump()`` s)."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

from redis_msglog import InvalidMessageError, StoredMessage

from ..conftest import Env
from ..no_server.test_formats import as_json
from ..support.sdk_check import ANTHROPIC, ANTHROPIC_SYSTEM, OPENAI, RESPONSES, strict_validate

IMAGE = base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(range(40))).decode()
AUDIO = base64.b64encode(b"RIFF\x00\x00\x00\x00WAVEfmt ").decode()
PDF = base64.b64encode(b"%PDF-1.4 tiny").decode()

OPENAI_HISTORY: list[dict[str, Any]] = [
    {"role": "developer", "content": "Be terse."},
    {
        "role": "user",
        "content": [
            {"type": "text", "text": "What is in the picture, the clip and the file?"},
            {
                "type": "image_url",
                "image_url": {"url": f"data:image/png;base64,{IMAGE}", "detail": "low"},
            },
            {"type": "input_audio", "input_audio": {"data": AUDIO, "format": "wav"}},
            {
                "type": "file",
                "file": {"file_data": f"data:application/pdf;base64,{PDF}", "filename": "r.pdf"},
            },
        ],
    },
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "look", "arguments": '{"what": "image"}'},
            },
            {
                "id": "call_2",
                "type": "function",
                "function": {"name": "listen", "arguments": "{broken json"},
            },
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "a square"},
    {"role": "tool", "tool_call_id": "call_2", "content": [{"type": "text", "text": "a beep"}]},
    {"role": "assistant", "content": None, "refusal": "I will not read the file."},
    {"role": "user", "content": "fine", "name": "alice"},
]

RESPONSES_HISTORY: list[dict[str, Any]] = [
    {"role": "system", "content": "Be terse."},
    {
        "role": "user",
        "content": [
            {"type": "input_text", "text": "Weather in Paris?"},
            {
                "type": "input_image",
                "image_url": f"data:image/png;base64,{IMAGE}",
                "detail": "auto",
            },
        ],
    },
    {
        "type": "reasoning",
        "id": "rs_abc",
        "summary": [{"type": "summary_text", "text": "one lookup"}],
        "encrypted_content": "ZW5jcnlwdGVk",
    },
    {
        "type": "function_call",
        "id": "fc_1",
        "call_id": "call_1",
        "name": "weather",
        "arguments": '{"city":"Paris"}',
        "status": "completed",
    },
    {"type": "function_call_output", "call_id": "call_1", "output": "18C"},
    {
        "type": "message",
        "role": "assistant",
        "id": "msg_1",
        "status": "completed",
        "content": [{"type": "output_text", "text": "18C in Paris.", "annotations": []}],
    },
]

ANTHROPIC_SYSTEM_BLOCKS: list[dict[str, Any]] = [
    {"type": "text", "text": "Be terse.", "cache_control": {"type": "ephemeral"}}
]
ANTHROPIC_HISTORY: list[dict[str, Any]] = [
    {
        "role": "user",
        "content": [
            {
                "type": "image",
                "source": {"type": "base64", "media_type": "image/png", "data": IMAGE},
            },
            {"type": "text", "text": "Weather where this was taken, and in Rome?"},
        ],
    },
    {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "two lookups", "signature": "c2lnMQ=="},
            {"type": "redacted_thinking", "data": "ZW5j"},
            {"type": "text", "text": "Checking both."},
            {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Paris"}},
            {"type": "tool_use", "id": "toolu_2", "name": "weather", "input": {"city": "Rome"}},
        ],
    },
    {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "18C"},
            {"type": "tool_result", "tool_use_id": "toolu_2", "content": "24C", "is_error": False},
        ],
    },
    {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "compare", "signature": "c2lnMg=="},
            {"type": "text", "text": "Rome is warmer."},
        ],
    },
]


def langchain_history() -> list[Any]:
    return [
        SystemMessage(content="Be terse."),
        HumanMessage(
            content=[
                {"type": "text", "text": "What is this?"},
                {"type": "image", "base64": IMAGE, "mime_type": "image/png"},
            ],
            id="h1",
        ),
        AIMessage(
            content=[
                {"type": "thinking", "thinking": "look it up", "signature": "c2ln"},
                {"type": "text", "text": "Looking."},
            ],
            tool_calls=[{"name": "look", "args": {"q": "png"}, "id": "c1"}],
            id="a1",
            response_metadata={"model_name": "claude"},
        ),
        ToolMessage(content="a square", tool_call_id="c1", id="t1"),
        AIMessage(content="A square.", id="a2"),
    ]


def imported(env: Env, method: str, history: list[Any], **kwargs: Any) -> tuple[Any, list[Any]]:
    """A fresh log holding ``history`` imported by ``method``; the hook's calls."""
    calls: list[list[StoredMessage]] = []
    log = env.log(on_append=calls.append)
    seq = getattr(log, method)(history, **kwargs)
    assert seq == log.count() == len(log.all()) > 0
    assert len(calls) == 1 and calls[0][-1].seq == seq  # one append_many: one commit
    return log, calls


def test_openai_chat_history_round_trips_through_the_log(env: Env) -> None:
    strict_validate(OPENAI, OPENAI_HISTORY)
    log, _ = imported(env, "append_openai", OPENAI_HISTORY)
    assert as_json(log.to_openai()) == as_json(OPENAI_HISTORY)


def test_responses_history_round_trips_through_the_log(env: Env) -> None:
    strict_validate(RESPONSES, RESPONSES_HISTORY)
    log, _ = imported(env, "append_responses", RESPONSES_HISTORY)
    assert as_json(log.to_responses()) == as_json(RESPONSES_HISTORY)
    # The reasoning item went nowhere else.
    assert "rs_abc" not in str(log.to_openai()) + str(log.to_anthropic())


def test_anthropic_history_and_system_round_trip_through_the_log(env: Env) -> None:
    strict_validate(ANTHROPIC, ANTHROPIC_HISTORY)
    strict_validate(ANTHROPIC_SYSTEM, ANTHROPIC_SYSTEM_BLOCKS)
    log, _ = imported(env, "append_anthropic", ANTHROPIC_HISTORY, system=ANTHROPIC_SYSTEM_BLOCKS)
    assert as_json(log.to_anthropic()) == as_json(ANTHROPIC_HISTORY)
    assert as_json(log.anthropic_system()) == as_json(ANTHROPIC_SYSTEM_BLOCKS)
    assert "c2lnMQ==" not in str(log.to_openai()) + str(log.to_responses())
    # A string system prompt comes back as the string.
    plain, _ = imported(env, "append_anthropic", ANTHROPIC_HISTORY[:1], system="Be terse.")
    assert plain.anthropic_system() == "Be terse."
    assert env.log().anthropic_system() is None


def test_langchain_history_round_trips_through_the_log(env: Env) -> None:
    history = langchain_history()
    log, _ = imported(env, "append_langchain", history)
    assert [m.model_dump() for m in log.to_langchain_messages()] == [
        m.model_dump() for m in history
    ]


def test_an_import_is_one_idempotent_batch_and_bad_input_writes_nothing(env: Env) -> None:
    log = env.log()
    first = log.append_openai(OPENAI_HISTORY, idempotency_key="import-1")
    again = log.append_openai(OPENAI_HISTORY, idempotency_key="import-1")
    assert first == again == log.count() == len(OPENAI_HISTORY)
    bad = [{"role": "user", "content": "ok"}, {"role": "user", "content": [{"type": "video"}]}]
    with pytest.raises(InvalidMessageError, match=r"message 1: content\.0\.type"):
        log.append_openai(bad)
    assert log.count() == first
    assert log.append_anthropic([]) == first  # nothing to write
