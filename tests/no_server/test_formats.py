"""Lossless conversions: for every format, hypothesis histories built from the SDK types'
fields (each generated input is itself checked against those types) round-trip exactly,
``to_X(from_X(x)) == x`` as JSON after dropping null fields, also through the stored form
(encode, decode); and every output, in its own format or another, passes the SDK types,
strictly (``tests/support/sdk_check.py``), and the pairing rules
``tests/no_server/test_adapters.py`` checks."""

from __future__ import annotations

import base64
from typing import Any

import orjson
import pytest
from anthropic.types import CacheControlEphemeralParam
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from openai.types.responses.response_output_text_param import AnnotationURLCitation

from redis_msglog import (
    AgentMessage,
    InvalidMessageError,
    anthropic_system,
    from_anthropic,
    from_langchain,
    from_openai,
    from_responses,
    to_anthropic,
    to_langchain,
    to_langchain_messages,
    to_openai,
    to_responses,
)
from redis_msglog._core.stored.codec import decode_entry, encode_message

from ..support.sdk_check import ANTHROPIC, ANTHROPIC_SYSTEM, OPENAI, RESPONSES, strict_validate
from .test_adapters import check_anthropic, check_openai

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# -- helpers ----------------------------------------------------------------------------


def clean(value: Any) -> Any:
    """JSON with null fields dropped (the round-trip contract's equality)."""
    if isinstance(value, dict):
        return {k: clean(v) for k, v in value.items() if v is not None}
    if isinstance(value, (list, tuple)):
        return [clean(v) for v in value]
    return value


def as_json(value: Any) -> bytes:
    # Sorted keys; 1, 1.0 and True stay different.
    return orjson.dumps(clean(value), option=orjson.OPT_SORT_KEYS)


def stored(messages: list[AgentMessage]) -> list[AgentMessage]:
    """The messages after a trip through the stored form, as a reader gets them."""
    out = []
    for seq, msg in enumerate(messages, start=1):
        row = decode_entry(seq, b"1700000000000000", encode_message(msg))
        assert row.as_message() == msg
        out.append(row.as_message())
    return out


def anthropic_blocks(turns: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Turns as ``check_anthropic`` reads them: a string content as one text block, and
    without the system turns (the user/assistant alternation is around them)."""
    return [
        {**t, "content": [{"type": "text", "text": t["content"]}]}
        if isinstance(t["content"], str)
        else t
        for t in turns
        if t["role"] != "system"
    ]


def check_everywhere(messages: list[AgentMessage]) -> None:
    """Every exporter's output passes the SDK types and the provider's rules."""
    chat = to_openai(messages)
    strict_validate(OPENAI, chat)
    # An arguments string OpenAI produced goes back verbatim, even when it is not a JSON
    # object (models do write that); every other call gets a JSON object.
    verbatim = {c.id for m in messages for c in m.tool_calls or [] if c.arguments is not None}
    check_openai(
        [
            {
                **m,
                "tool_calls": [
                    {**c, "function": {**c["function"], "arguments": "{}"}}
                    if c["id"] in verbatim
                    else c
                    for c in m["tool_calls"]
                ],
            }
            if m.get("tool_calls")
            else m
            for m in chat
        ]
    )
    turns = to_anthropic(messages)
    strict_validate(ANTHROPIC, turns)
    check_anthropic(anthropic_blocks(turns))
    system = anthropic_system(messages)
    if system is not None:
        strict_validate(ANTHROPIC_SYSTEM, system)
    strict_validate(RESPONSES, to_responses(messages))
    to_langchain_messages(messages)  # constructing them is LangChain's validation
    for msg in to_langchain(messages):
        assert msg["content"].strip()


# -- strategies: shared -----------------------------------------------------------------

words = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=("Cs", "Cc", "Zs", "Zl", "Zp")),
    min_size=1,
    max_size=12,
)
# Non-blank, no edge whitespace: what every provider accepts as a text block.
texts = st.lists(words, min_size=1, max_size=3).map(" ".join)
binary = st.binary(min_size=1, max_size=24)
b64 = binary.map(lambda b: base64.b64encode(b).decode())
suffix = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789", min_size=4, max_size=10)
names = st.from_regex(r"[a-zA-Z0-9_-]{1,20}", fullmatch=True)
json_args = st.dictionaries(
    st.text(max_size=5),
    st.integers(-(2**53), 2**53) | st.booleans() | st.text(max_size=5),
    max_size=3,
)
# arguments strings as models write them: compact, spaced, not an object, broken
arguments = st.one_of(
    json_args.map(lambda d: orjson.dumps(d).decode()),
    json_args.map(lambda d: orjson.dumps(d, option=orjson.OPT_INDENT_2).decode()),
    st.just('{"a": 1,   "b" : [1, 2.50]}'),
    st.just("[1, 2]"),
    st.just('{"unterminated": '),
    st.just(""),
)
cache_control = st.from_type(CacheControlEphemeralParam)


def ids(prefix: str) -> st.SearchStrategy[str]:
    return suffix.map(lambda s: f"{prefix}{s}")


def maybe(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.none() | strategy


def drop_none(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


def unique_calls(draw: Any, prefix: str, n: int) -> list[str]:
    stem = draw(suffix)
    return [f"{prefix}{stem}{k}" for k in range(n)]


# -- OpenAI Chat Completions ------------------------------------------------------------

chat_image = st.builds(
    lambda url, detail: {
        "type": "image_url",
        "image_url": drop_none({"url": url, "detail": detail}),
    },
    st.one_of(
        b64.map(lambda d: f"data:image/png;base64,{d}"),
        b64.map(lambda d: f"data:image/jpeg;base64,{d}"),
        suffix.map(lambda s: f"https://example.com/{s}.png"),
    ),
    maybe(st.sampled_from(["auto", "low", "high"])),
)
chat_audio = st.builds(
    lambda data, fmt: {"type": "input_audio", "input_audio": {"data": data, "format": fmt}},
    b64,
    st.sampled_from(["wav", "mp3"]),
)
chat_file = st.builds(
    lambda source, filename: {"type": "file", "file": drop_none({**source, "filename": filename})},
    st.one_of(
        b64.map(lambda d: {"file_data": f"data:application/pdf;base64,{d}"}),
        b64.map(lambda d: {"file_data": d}),
        ids("file-").map(lambda f: {"file_id": f}),
    ),
    maybe(names.map(lambda n: n + ".pdf")),
)
chat_text = texts.map(lambda t: {"type": "text", "text": t})
chat_user_parts = st.lists(
    st.one_of(chat_text, chat_image, chat_audio, chat_file), min_size=1, max_size=4
)


@st.composite
def chat_histories(draw: Any) -> list[dict[str, Any]]:
    history: list[dict[str, Any]] = []
    if draw(st.booleans()):
        content = draw(texts | st.lists(chat_text, min_size=1, max_size=2))
        history.append(
            drop_none(
                {
                    "role": draw(st.sampled_from(["system", "developer"])),
                    "content": content,
                    "name": draw(maybe(names)),
                }
            )
        )
    for _ in range(draw(st.integers(1, 4))):
        history.append(
            drop_none(
                {
                    "role": "user",
                    "content": draw(texts | chat_user_parts),
                    "name": draw(maybe(names)),
                }
            )
        )
        kind = draw(st.sampled_from(["text", "parts", "refusal", "calls"]))
        if kind == "text":
            history.append({"role": "assistant", "content": draw(texts)})
        elif kind == "parts":
            parts = st.one_of(chat_text, texts.map(lambda t: {"type": "refusal", "refusal": t}))
            history.append(
                {"role": "assistant", "content": draw(st.lists(parts, min_size=1, max_size=3))}
            )
        elif kind == "refusal":
            history.append(
                drop_none(
                    {
                        "role": "assistant",
                        "content": draw(st.just("") | texts),
                        "refusal": draw(texts),
                        "audio": draw(maybe(ids("audio_").map(lambda i: {"id": i}))),
                    }
                )
            )
        else:
            call_ids = unique_calls(draw, "call_", draw(st.integers(1, 3)))
            history.append(
                drop_none(
                    {
                        "role": "assistant",
                        "content": draw(st.none() | st.just("") | texts),
                        "tool_calls": [
                            {
                                "id": call_id,
                                "type": "function",
                                "function": {"name": draw(names), "arguments": draw(arguments)},
                            }
                            for call_id in call_ids
                        ],
                    }
                )
            )
            for call_id in call_ids:
                history.append(
                    {
                        "role": "tool",
                        "tool_call_id": call_id,
                        "content": draw(texts | st.just("") | st.lists(chat_text, min_size=1)),
                    }
                )
    return history


@given(chat_histories())
@SETTINGS
def test_openai_chat_round_trip(history: list[dict[str, Any]]) -> None:
    strict_validate(OPENAI, history)  # the input is valid by the SDK's own types
    messages = from_openai(history)
    assert as_json(to_openai(messages)) == as_json(history)
    assert as_json(to_openai(stored(messages))) == as_json(history)
    check_everywhere(messages)


# -- Anthropic Messages -----------------------------------------------------------------

anthropic_text = st.builds(
    lambda t, cc: drop_none({"type": "text", "text": t, "cache_control": cc}),
    texts,
    maybe(cache_control),
)
anthropic_image = st.builds(
    lambda source: {"type": "image", "source": source},
    st.one_of(
        st.builds(
            lambda d, mt: {"type": "base64", "media_type": mt, "data": d},
            b64,
            st.sampled_from(["image/png", "image/jpeg", "image/gif", "image/webp"]),
        ),
        suffix.map(lambda s: {"type": "url", "url": f"https://example.com/{s}.png"}),
        ids("file_").map(lambda f: {"type": "file", "file_id": f}),
    ),
)
anthropic_document = st.builds(
    lambda source, title: drop_none({"type": "document", "source": source, "title": title}),
    st.one_of(
        b64.map(lambda d: {"type": "base64", "media_type": "application/pdf", "data": d}),
        texts.map(lambda t: {"type": "text", "media_type": "text/plain", "data": t}),
        suffix.map(lambda s: {"type": "url", "url": f"https://example.com/{s}.pdf"}),
    ),
    maybe(texts),
)
anthropic_user_blocks = st.lists(
    st.one_of(anthropic_text, anthropic_image, anthropic_document), min_size=1, max_size=3
)
thinking_blocks = st.lists(
    st.one_of(
        st.builds(lambda t, s: {"type": "thinking", "thinking": t, "signature": s}, texts, b64),
        b64.map(lambda d: {"type": "redacted_thinking", "data": d}),
    ),
    max_size=2,
)


@st.composite
def anthropic_histories(draw: Any) -> tuple[list[dict[str, Any]], Any]:
    turns: list[dict[str, Any]] = []
    results: list[dict[str, Any]] = []  # tool_result blocks the next user turn starts with
    for _ in range(draw(st.integers(1, 4))):
        if results:
            extra = draw(st.lists(anthropic_text, max_size=2))
            turns.append({"role": "user", "content": results + extra})
        else:
            turns.append({"role": "user", "content": draw(texts | anthropic_user_blocks)})
        call_ids = unique_calls(draw, "toolu_", draw(st.integers(0, 3)))
        blocks = draw(thinking_blocks) + draw(st.lists(anthropic_text, max_size=2))
        blocks += [
            drop_none(
                {
                    "type": "tool_use",
                    "id": call_id,
                    "name": draw(names),
                    "input": draw(json_args),
                    "cache_control": draw(maybe(cache_control)),
                }
            )
            for call_id in call_ids
        ]
        if not blocks:
            turns.append({"role": "assistant", "content": draw(texts)})
        else:
            turns.append({"role": "assistant", "content": blocks})
        if not call_ids and draw(st.integers(0, 3)) == 0:  # a system turn mid-history
            content = draw(texts | st.lists(anthropic_text, min_size=1, max_size=2))
            turns.append({"role": "system", "content": content})
        results = [
            drop_none(
                {
                    "type": "tool_result",
                    "tool_use_id": call_id,
                    "content": draw(
                        st.none() | texts | st.lists(anthropic_text | anthropic_image, min_size=1)
                    ),
                    "is_error": draw(maybe(st.booleans())),
                }
            )
            for call_id in call_ids
        ]
    if results:
        turns.append({"role": "user", "content": results})
    system = draw(st.none() | texts | st.lists(anthropic_text, min_size=1, max_size=2))
    return turns, system


@given(anthropic_histories())
@SETTINGS
def test_anthropic_round_trip(case: tuple[list[dict[str, Any]], Any]) -> None:
    turns, system = case
    strict_validate(ANTHROPIC, turns)
    messages = from_anthropic(turns, system=system)
    for msgs in (messages, stored(messages)):
        assert as_json(to_anthropic(msgs)) == as_json(turns)
        assert as_json(anthropic_system(msgs)) == as_json(system)
    check_everywhere(messages)


# -- OpenAI Responses -------------------------------------------------------------------

input_text = texts.map(lambda t: {"type": "input_text", "text": t})
input_image = st.builds(
    lambda url, detail: {"type": "input_image", "image_url": url, "detail": detail},
    st.one_of(
        b64.map(lambda d: f"data:image/png;base64,{d}"),
        suffix.map(lambda s: f"https://example.com/{s}.png"),
    ),
    st.sampled_from(["auto", "low", "high"]),
)
input_file = st.one_of(
    st.builds(
        lambda d, name: drop_none({"type": "input_file", "file_data": d, "filename": name}),
        b64.map(lambda d: f"data:application/pdf;base64,{d}"),
        maybe(names.map(lambda n: n + ".pdf")),
    ),
    ids("file-").map(lambda f: {"type": "input_file", "file_id": f}),
    suffix.map(lambda s: {"type": "input_file", "file_url": f"https://example.com/{s}.pdf"}),
)
input_parts = st.lists(st.one_of(input_text, input_image, input_file), min_size=1, max_size=3)
# The SDK's own annotation type, with offsets a JSON number can hold.
url_citations = st.builds(
    AnnotationURLCitation,
    type=st.just("url_citation"),
    url=suffix.map(lambda s: f"https://example.com/{s}"),
    title=texts,
    start_index=st.integers(0, 1000),
    end_index=st.integers(0, 1000),
)
output_text = st.builds(
    lambda t, annotations: {"type": "output_text", "text": t, "annotations": annotations},
    texts,
    st.lists(url_citations, max_size=2),
)
reasoning_items = st.builds(
    lambda rid, summary, enc, status: drop_none(
        {
            "type": "reasoning",
            "id": rid,
            "summary": [{"type": "summary_text", "text": t} for t in summary],
            "encrypted_content": enc,
            "status": status,
        }
    ),
    ids("rs_"),
    st.lists(texts, max_size=2),
    maybe(b64),
    maybe(st.sampled_from(["completed", "incomplete"])),
)


@st.composite
def responses_histories(draw: Any) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    if draw(st.booleans()):
        items.append(
            {"role": draw(st.sampled_from(["system", "developer"])), "content": draw(texts)}
        )
    for _ in range(draw(st.integers(1, 4))):
        if draw(st.booleans()):
            items.append({"role": "user", "content": draw(texts | input_parts)})
        else:
            items.append(
                drop_none(
                    {
                        "type": "message",
                        "role": "user",
                        "content": draw(input_parts),
                        "status": draw(maybe(st.just("completed"))),
                    }
                )
            )
        kind = draw(st.sampled_from(["easy", "output", "calls"]))
        if draw(st.booleans()):
            items.append(draw(reasoning_items))
        if kind == "easy":
            items.append({"role": "assistant", "content": draw(texts)})
        elif kind == "output":
            refusal = texts.map(lambda t: {"type": "refusal", "refusal": t})
            items.append(
                drop_none(
                    {
                        "type": "message",
                        "role": "assistant",
                        # An id the API would refuse comes back too (by the patch).
                        "id": draw(ids("msg_") | ids("item")),
                        "status": draw(st.sampled_from(["completed", "incomplete"])),
                        "phase": draw(maybe(st.sampled_from(["commentary", "final_answer"]))),
                        "content": draw(st.lists(output_text | refusal, min_size=1, max_size=2)),
                    }
                )
            )
        else:
            call_ids = unique_calls(draw, "call_", draw(st.integers(1, 3)))
            for n, call_id in enumerate(call_ids):
                if n and draw(st.integers(0, 4)) == 0:  # reasoning between parallel calls
                    items.append(draw(reasoning_items))
                items.append(
                    drop_none(
                        {
                            "type": "function_call",
                            "call_id": call_id,
                            "name": draw(names),
                            "arguments": draw(arguments),
                            "id": draw(maybe(ids("fc_"))),
                            "status": draw(maybe(st.just("completed"))),
                        }
                    )
                )
            for call_id in call_ids:
                items.append(
                    {
                        "type": "function_call_output",
                        "call_id": call_id,
                        "output": draw(texts | st.lists(input_text, min_size=1, max_size=2)),
                    }
                )
    return items


@given(responses_histories())
@SETTINGS
def test_responses_round_trip(items: list[dict[str, Any]]) -> None:
    strict_validate(RESPONSES, items)
    messages = from_responses(items)
    assert as_json(to_responses(messages)) == as_json(items)
    assert as_json(to_responses(stored(messages))) == as_json(items)
    check_everywhere(messages)


# -- LangChain --------------------------------------------------------------------------

lc_blocks = st.one_of(
    texts,  # a bare string in a content list
    texts.map(lambda t: {"type": "text", "text": t}),
    st.builds(lambda t, i: {"type": "text", "text": t, "id": i}, texts, ids("lc_")),
    st.builds(
        lambda d, mt: {"type": "image", "base64": d, "mime_type": mt},
        b64,
        st.sampled_from(["image/png", "image/jpeg"]),
    ),
    suffix.map(lambda s: {"type": "image", "url": f"https://example.com/{s}.png"}),
    b64.map(lambda d: {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{d}"}}),
    b64.map(lambda d: {"type": "file", "base64": d, "mime_type": "application/pdf"}),
    texts.map(lambda t: {"type": "text-plain", "mime_type": "text/plain", "text": t}),
)
lc_ai_blocks = st.one_of(
    texts.map(lambda t: {"type": "text", "text": t}),
    st.builds(lambda t, s: {"type": "thinking", "thinking": t, "signature": s}, texts, b64),
    texts.map(lambda t: {"type": "reasoning", "reasoning": t}),
    st.builds(
        lambda i, t: {
            "type": "reasoning",
            "id": i,
            "summary": [{"type": "summary_text", "text": t}],
        },
        ids("rs_"),
        texts,
    ),
)


@st.composite
def langchain_histories(draw: Any) -> list[Any]:
    history: list[Any] = []
    if draw(st.booleans()):
        history.append(SystemMessage(content=draw(texts), id=draw(maybe(ids("sys-")))))
    for _ in range(draw(st.integers(1, 3))):
        history.append(
            HumanMessage(
                content=draw(texts | st.lists(lc_blocks, min_size=1, max_size=3)),
                name=draw(maybe(names)),
                id=draw(maybe(ids("h-"))),
            )
        )
        call_ids = unique_calls(draw, "call_", draw(st.integers(0, 3)))
        content = draw(texts | st.just("") | st.lists(lc_ai_blocks, min_size=1, max_size=3))
        if call_ids and isinstance(content, list) and draw(st.booleans()):
            # ChatAnthropic's shape: the calls repeated as tool_use blocks in content.
            content += [{"type": "tool_use", "id": c, "name": "f", "input": {}} for c in call_ids]
        history.append(
            AIMessage(
                content=content,
                tool_calls=[
                    {"name": draw(names), "args": draw(json_args), "id": call_id}
                    for call_id in call_ids
                ],
                id=draw(maybe(ids("run-"))),
                response_metadata=draw(st.just({}) | st.just({"model_name": "m", "stop": None})),
                additional_kwargs=draw(st.just({}) | json_args.map(lambda a: {"extra": a})),
            )
        )
        for call_id in call_ids:
            history.append(
                ToolMessage(
                    content=draw(texts | st.lists(lc_blocks, min_size=1, max_size=2)),
                    tool_call_id=call_id,
                    status=draw(st.sampled_from(["success", "error"])),
                    artifact=draw(st.none() | json_args),
                )
            )
    return history


@given(langchain_histories())
@SETTINGS
def test_langchain_round_trip(history: list[Any]) -> None:
    messages = from_langchain(history)
    for msgs in (messages, stored(messages)):
        back = to_langchain_messages(msgs)
        assert [type(m) for m in back] == [type(m) for m in history]
        assert as_json([m.model_dump() for m in back]) == as_json([m.model_dump() for m in history])
    check_everywhere(messages)


# -- across formats ---------------------------------------------------------------------

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n").decode()


def test_an_openai_data_url_image_becomes_anthropic_base64_and_a_langchain_block() -> None:
    messages = from_openai(
        [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "what is this?"},
                    {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
                ],
            }
        ]
    )
    assert messages[0].content[1].data == base64.b64decode(PNG)  # type: ignore[union-attr]
    assert to_anthropic(messages) == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "what is this?"},
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/png", "data": PNG},
                },
            ],
        }
    ]
    assert to_langchain_messages(messages)[0].content[1] == {
        "type": "image",
        "base64": PNG,
        "mime_type": "image/png",
    }
    assert to_responses(messages)[0]["content"][1] == {
        "type": "input_image",
        "detail": "auto",
        "image_url": f"data:image/png;base64,{PNG}",
    }


THINKING_HISTORY: list[dict[str, Any]] = [
    {"role": "user", "content": "weather in Paris and Rome?"},
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


def test_thinking_with_tool_use_keeps_anthropics_order_and_goes_nowhere_else() -> None:
    messages = from_anthropic(THINKING_HISTORY, system="Be brief.")
    assert [m.role for m in messages] == [
        "system",
        "user",
        "assistant",
        "tool",
        "tool",
        "assistant",
    ]
    # Thinking first, unmodified, signature included; the tool_use blocks after the text.
    assert to_anthropic(messages) == THINKING_HISTORY
    assert to_anthropic(stored(messages)) == THINKING_HISTORY
    assert anthropic_system(messages) == "Be brief."
    # No thinking anywhere else: not in Chat, not in Responses.
    chat = to_openai(messages)
    assert "two lookups" not in orjson.dumps(chat).decode()
    assert [m["role"] for m in chat] == ["system", "user", "assistant", "tool", "tool", "assistant"]
    assert chat[2]["tool_calls"][1]["function"]["arguments"] == '{"city":"Rome"}'
    responses = to_responses(messages)
    assert not [i for i in responses if i.get("type") == "reasoning"]
    assert "c2lnMQ==" not in orjson.dumps(responses).decode()
    check_everywhere(messages)


def test_thinking_not_produced_by_anthropic_is_never_sent_to_it() -> None:
    messages = [
        AgentMessage.model_validate({"role": "user", "content": "q"}),
        AgentMessage.model_validate(
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "t", "signature": "s", "provider": "gemini"},
                    {"type": "thinking", "thinking": "t", "signature": "s"},  # provider unknown
                    {"type": "redacted_thinking", "data": "x"},
                    {"type": "text", "text": "a"},
                ],
            }
        ),
    ]
    assert to_anthropic(messages)[1]["content"] == [{"type": "text", "text": "a"}]


REASONING_HISTORY: list[dict[str, Any]] = [
    {"role": "user", "content": "weather in Paris and Rome?"},
    {
        "type": "reasoning",
        "id": "rs_1",
        "summary": [{"type": "summary_text", "text": "two lookups"}],
        "encrypted_content": "ZW5jcnlwdGVk",
    },
    {
        "type": "function_call",
        "id": "fc_1",
        "call_id": "call_1",
        "name": "weather",
        "arguments": '{"city": "Paris"}',
    },
    {
        "type": "function_call",
        "id": "fc_2",
        "call_id": "call_2",
        "name": "weather",
        "arguments": '{"city": "Rome"}',
    },
    {"type": "function_call_output", "call_id": "call_1", "output": "18C"},
    {"type": "function_call_output", "call_id": "call_2", "output": "24C"},
    {
        "type": "message",
        "role": "assistant",
        "id": "msg_1",
        "status": "completed",
        "phase": "final_answer",
        "content": [{"type": "output_text", "text": "Rome is warmer.", "annotations": []}],
    },
]


def test_reasoning_stays_with_its_function_calls() -> None:
    messages = from_responses(REASONING_HISTORY)
    # One assistant turn: the reasoning and both parallel calls together.
    assert [m.role for m in messages] == ["user", "assistant", "tool", "tool", "assistant"]
    turn = messages[1]
    assert [p.type for p in turn.content] == ["reasoning"]  # type: ignore[union-attr]
    assert [c.id for c in turn.tool_calls or []] == ["call_1", "call_2"]
    assert to_responses(messages) == REASONING_HISTORY
    # Dropping a reasoning message's calls is impossible: they are one message. And the
    # other providers pair both calls with their results, with no reasoning.
    chat = to_openai(messages)
    assert [m["role"] for m in chat] == ["user", "assistant", "tool", "tool", "assistant"]
    assert [c["function"]["arguments"] for c in chat[1]["tool_calls"]] == [
        '{"city": "Paris"}',
        '{"city": "Rome"}',
    ]
    anthropic = to_anthropic(messages)
    assert [b["type"] for b in anthropic[1]["content"]] == ["tool_use", "tool_use"]
    assert [b["type"] for b in anthropic[2]["content"]] == ["tool_result", "tool_result"]
    assert "two lookups" not in orjson.dumps([chat, anthropic]).decode()
    check_everywhere(messages)


def test_reasoning_not_produced_by_openai_is_never_sent_to_responses() -> None:
    msg = AgentMessage.model_validate(
        {
            "role": "assistant",
            "content": [
                {"type": "reasoning", "id": "rs_1", "summary": ["s"], "provider": "other"},
                {"type": "reasoning", "id": "rs_2", "summary": ["s"]},
                {"type": "thinking", "thinking": "t", "signature": "s", "provider": "anthropic"},
                {"type": "text", "text": "a"},
            ],
        }
    )
    assert to_responses([msg]) == [{"role": "assistant", "content": "a"}]


def test_what_cannot_be_represented_is_left_out_by_the_documented_rules() -> None:
    svg = {"type": "image", "url": "data:image/svg+xml,%3Csvg%2F%3E"}  # not base64: a URL
    audio = {"type": "audio", "data": b"RIFF", "media_type": "audio/wav"}
    image_by_id = {"type": "image", "file_id": "file-1"}
    messages = [
        AgentMessage.model_validate(
            {"role": "user", "content": [{"type": "text", "text": "hear"}, audio, image_by_id, svg]}
        ),
        AgentMessage.model_validate(
            {"role": "assistant", "content": [{"type": "refusal", "refusal": "no"}]}
        ),
    ]
    chat = to_openai(messages)
    # Chat: audio kept, an image by file id has no Chat form.
    assert [p["type"] for p in chat[0]["content"]] == ["text", "input_audio", "image_url"]
    assert chat[1]["content"] == [{"type": "refusal", "refusal": "no"}]
    anthropic = to_anthropic(messages)
    # Anthropic: no audio, no refusal block, no URL it cannot fetch; the assistant turn
    # left empty is dropped.
    assert anthropic == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "hear"},
                {"type": "image", "source": {"type": "file", "file_id": "file-1"}},
            ],
        }
    ]
    check_everywhere(messages)


def test_to_langchain_keeps_its_documented_output() -> None:
    messages = from_anthropic(THINKING_HISTORY)
    assert to_langchain(messages) == [
        {"role": "user", "content": "weather in Paris and Rome?"},
        {"role": "assistant", "content": "Checking both."},
        {"role": "assistant", "content": "Rome is warmer."},
    ]


def test_langchain_tool_history_and_ids_survive() -> None:
    history = [
        HumanMessage(content="q", id="h1"),
        AIMessage(content="", tool_calls=[{"name": "f", "args": {"x": 1}, "id": "c1"}], id="a1"),
        ToolMessage(content="r", tool_call_id="c1", id="t1", status="error"),
    ]
    messages = from_langchain(history)
    assert [m.id for m in messages] == ["h1", "a1", "t1"]
    assert messages[1].tool_calls and messages[1].tool_calls[0].args == {"x": 1}
    assert [m.model_dump() for m in to_langchain_messages(messages)] == [
        m.model_dump() for m in history
    ]
    assert [m["role"] for m in to_openai(messages)] == ["user", "assistant", "tool"]
    # LangChain's ids are not OpenAI item ids: Responses gets none of them.
    assert "a1" not in orjson.dumps(to_responses(messages)).decode()


# -- bad input --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "convert, history, index, path",
    [
        (
            from_openai,
            [{"role": "user", "content": "a"}, {"role": "user", "content": [{"type": "video"}]}],
            1,
            "content.0.type",
        ),
        (from_openai, [{"role": "user", "content": [{"type": "text"}]}], 0, "content.0.text"),
        (
            from_openai,
            [
                {
                    "role": "user",
                    "content": [
                        {"type": "image_url", "image_url": {"url": "data:image/png;base64,!!"}}
                    ],
                }
            ],
            0,
            "content.0.image_url.url",
        ),
        (from_openai, [{"role": "function", "content": "x", "name": "f"}], 0, "role"),
        (
            from_anthropic,
            [{"role": "user", "content": [{"type": "search_result"}]}],
            0,
            "content.0.type",
        ),
        (
            from_anthropic,
            [
                {"role": "user", "content": "q"},
                {"role": "assistant", "content": [{"type": "thinking", "signature": "s"}]},
            ],
            1,
            "content.0.thinking",
        ),
        (
            from_anthropic,
            [
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "image",
                            "source": {"type": "base64", "media_type": "image/png", "data": "abc"},
                        }
                    ],
                }
            ],
            0,
            "content.0.source.data",
        ),
        (
            from_responses,
            [{"role": "user", "content": "q"}, {"type": "web_search_call", "id": "w"}],
            1,
            "type",
        ),
        (from_responses, [{"type": "function_call", "call_id": "c", "name": "f"}], 0, "arguments"),
        (
            from_responses,
            [
                {
                    "type": "message",
                    "role": "user",
                    "content": [{"type": "input_file", "file_data": "a b"}],
                }
            ],
            0,
            "content.0.file_data",
        ),
    ],
)
def test_bad_input_names_the_message_and_the_path(
    convert: Any, history: list[Any], index: int, path: str
) -> None:
    with pytest.raises(InvalidMessageError) as caught:
        convert(history)
    assert caught.value.index == index
    assert f"message {index}" in str(caught.value)
    assert path in str(caught.value)


def test_bad_langchain_input_names_the_message_and_the_path() -> None:
    with pytest.raises(InvalidMessageError, match=r"message 1: content\.0\.type"):
        from_langchain([HumanMessage(content="a"), HumanMessage(content=[{"type": "video"}])])
    with pytest.raises(InvalidMessageError, match=r"message 0: content\.0\.base64"):
        from_langchain([HumanMessage(content=[{"type": "image", "base64": "not base64"}])])
    with pytest.raises(InvalidMessageError, match="message 0"):
        from_langchain([{"role": "user", "content": "a dict is not a BaseMessage"}])


def test_an_edited_copy_sends_its_own_text_not_the_imported_one() -> None:
    user = from_anthropic([{"role": "user", "content": "old question"}])[0]
    assert to_anthropic([user]) == [{"role": "user", "content": "old question"}]
    edited = user.model_copy(update={"content": "new question"})
    assert to_anthropic([edited]) == [{"role": "user", "content": "new question"}]

    chat = from_openai(
        [
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": None, "refusal": "no"},
        ]
    )
    assert "content" not in to_openai(chat)[1]
    bare = from_langchain([HumanMessage(content=["a bare string"])])[0]
    text = bare.content[0].model_copy(update={"text": "edited"})  # type: ignore[union-attr]
    assert to_langchain_messages([bare.model_copy(update={"content": [text]})])[0].content == [
        "edited"
    ]
    answered = chat[1].model_copy(update={"content": "yes after all"})
    assert to_openai([chat[0], answered])[1] == {
        "role": "assistant",
        "content": "yes after all",
        "refusal": "no",
    }


def test_custom_tool_calls_and_legacy_fields_round_trip_in_chat() -> None:
    history: list[dict[str, Any]] = [
        {"role": "user", "content": "list files"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "custom", "custom": {"name": "sh", "input": "ls -la"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "a.txt"},
    ]
    strict_validate(OPENAI, history)
    messages = from_openai(history)
    assert messages[1].tool_calls and messages[1].tool_calls[0].args == "ls -la"
    assert as_json(to_openai(messages)) == as_json(history)
    # Elsewhere a free-text input is an object, by the documented rule.
    assert to_anthropic(messages)[1]["content"] == [
        {"type": "tool_use", "id": "c1", "name": "sh", "input": {"value": "ls -la"}}
    ]
    strict_validate(ANTHROPIC, to_anthropic(messages))
    check_anthropic(to_anthropic(messages))
    strict_validate(RESPONSES, to_responses(messages))


def test_sdk_response_objects_are_taken_as_input() -> None:
    """What users pass back: Anthropic's response blocks, Responses' output items."""
    from anthropic.types import TextBlock, ThinkingBlock, ToolUseBlock
    from openai.types.responses import (
        ResponseFunctionToolCall,
        ResponseOutputMessage,
        ResponseOutputText,
        ResponseReasoningItem,
    )

    blocks = [
        ThinkingBlock(type="thinking", thinking="t", signature="c2ln"),
        TextBlock(type="text", text="calling"),
        ToolUseBlock(type="tool_use", id="toolu_1", name="f", input={"a": 1}),
    ]
    turns = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": blocks},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1"}]},
    ]
    out = to_anthropic(from_anthropic(turns))
    assert out[1]["content"] == [b.model_dump(exclude_none=True) for b in blocks]
    strict_validate(ANTHROPIC, out)

    output = [
        ResponseReasoningItem(type="reasoning", id="rs_1", summary=[], encrypted_content="ZQ=="),
        ResponseFunctionToolCall(
            type="function_call", call_id="call_1", name="f", arguments="{}", id="fc_1"
        ),
    ]
    items = [
        {"role": "user", "content": "q"},
        *output,
        {"type": "function_call_output", "call_id": "call_1", "output": "ok"},
        ResponseOutputMessage(
            type="message",
            role="assistant",
            id="msg_1",
            status="completed",
            content=[ResponseOutputText(type="output_text", text="done", annotations=[])],
        ),
    ]
    back = to_responses(from_responses(items))
    assert as_json(back) == as_json(
        [i if isinstance(i, dict) else i.model_dump(mode="json") for i in items]  # type: ignore[attr-defined]
    )
    strict_validate(RESPONSES, back)
