"""Content parts in the model and the stored form: every kind round-trips through the
codec, binary data is bytes in Python and base64 in the JSON, old rows decode unchanged,
and bad parts are refused (input) or named by seq (stored rows). Through real servers:
``tests/contract/test_parts_on_a_server.py``."""

from __future__ import annotations

import base64
import uuid
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from redis_msglog import (
    AgentMessage,
    CodecError,
    CorruptEntryError,
    ImagePart,
    InvalidMessageError,
    ToolCall,
)
from redis_msglog._core.facade import LogCore
from redis_msglog._core.stored.codec import decode_entry, decode_row, encode_message, encode_row

AT = b"1700000000000000"
PIXEL = b"\x89PNG\r\n\x1a\n\x00\x00"

EVERY_PART: list[dict[str, Any]] = [
    {"role": "system", "content": "You are terse."},
    {
        "role": "user",
        "content": [
            {"type": "text", "text": "what are these?"},
            {"type": "image", "data": PIXEL, "media_type": "image/png", "detail": "high"},
            {"type": "image", "url": "https://example.com/a.png"},
            {"type": "audio", "data": b"RIFF\x00\x01", "media_type": "audio/wav"},
            {
                "type": "file",
                "data": b"%PDF-1.7",
                "media_type": "application/pdf",
                "filename": "a.pdf",
            },
            {"type": "file", "file_id": "file-abc"},
        ],
        "id": "msg-user-1",
        "metadata": {"tenant": "acme", "tags": ["a", 1, 2.5, True, None]},
    },
    {
        "role": "assistant",
        "content": [
            {
                "type": "thinking",
                "thinking": "look closer",
                "signature": "c2ln",
                "provider": "anthropic",
            },
            {"type": "redacted_thinking", "data": "ZW5j", "provider": "anthropic"},
            {
                "type": "reasoning",
                "id": "rs_1",
                "summary": ["compare"],
                "content": ["step"],
                "encrypted_content": "gAAA",
                "provider": "openai",
            },
            {
                "type": "text",
                "text": "checking",
                "extras": {"anthropic": {"cache_control": {"type": "ephemeral"}}},
            },
            {"type": "refusal", "refusal": "not that one"},
        ],
        "toolCalls": [
            {"id": "c1", "name": "zoom", "arguments": '{"x": 1,  "y": 2}'},
            {"id": "c2", "name": "zoom", "args": {"x": 3}, "extras": {"responses": {"id": "fc_2"}}},
        ],
        "extras": {"responses": {"phase": "commentary"}},
    },
    {"role": "tool", "content": [{"type": "text", "text": "zoomed"}], "toolCallId": "c1"},
    {"role": "tool", "content": "zoomed too", "toolCallId": "c2"},
]


def test_every_part_kind_round_trips_through_the_codec() -> None:
    for seq, raw in enumerate(EVERY_PART, start=1):
        msg = AgentMessage.model_validate(raw)
        data = encode_message(msg)
        row = decode_entry(seq, AT, data)
        assert row.as_message() == msg
        assert encode_message(row) == data  # stable
        # One JSON document per entry, binary data as base64 in it.
        doc = orjson.loads(data)
        if msg.role == "user":
            assert doc["content"][1] == {
                "type": "image",
                "data": base64.b64encode(PIXEL).decode(),
                "media_type": "image/png",
                "detail": "high",
            }
            assert isinstance(row.content[1], ImagePart) and row.content[1].data == PIXEL


def test_arguments_strings_are_kept_verbatim_and_args_follow_them() -> None:
    call = ToolCall(id="c", name="f", arguments='{"b": 1,   "a": [1, 2.50]}')
    assert call.args == {"b": 1, "a": [1, 2.5]}
    broken = ToolCall(id="c", name="f", arguments='{"b": ')
    assert broken.args == '{"b": '  # not JSON: the string itself
    msg = AgentMessage(role="assistant", content="", tool_calls=[call])
    data = encode_message(msg)
    # Stored once, as given; args is derived from it on decode.
    assert orjson.loads(data)["toolCalls"] == [
        {"id": "c", "name": "f", "arguments": '{"b": 1,   "a": [1, 2.50]}'}
    ]
    row = decode_entry(1, AT, data)
    assert row.tool_calls == [call]
    with pytest.raises(ValueError, match="disagree"):
        ToolCall(id="c", name="f", args={"b": 2}, arguments='{"b": 1}')


OLD_ROWS = [
    b'{"role":"user","content":"hello"}',
    b'{"role":"assistant","content":"","toolCalls":[{"id":"c1","name":"f","args":{}}]}',
    b'{"role":"tool","content":"3 hits","name":"search","toolCallId":"c1"}',
    b'{"role":"assistant","content":"x","toolCalls":[{"id":"c","name":"f","args":"{\\"k\\": 1}"}]}',
]


@pytest.mark.parametrize("body", OLD_ROWS)
def test_old_rows_decode_unchanged(body: bytes) -> None:
    row = decode_entry(3, AT, body)
    assert isinstance(row.content, str)
    assert row.id is None and row.metadata is None and row.extras is None
    assert encode_message(row) == body  # no new key appears


def test_text_only_messages_are_stored_as_before() -> None:
    msg = AgentMessage(role="user", content="hi")
    assert encode_message(msg) == b'{"role":"user","content":"hi"}'


@pytest.mark.parametrize(
    "part, path",
    [
        ({"type": "video", "url": "https://x"}, "content.1"),
        ({"type": "text"}, "content.1.text"),
        ({"type": "thinking", "signature": "s"}, "content.1.thinking"),
        ({"type": "image", "data": base64.b64encode(PIXEL).decode()}, "content.1.data"),
        ({"type": "image", "data": bytearray(PIXEL)}, "content.1.data"),
        ({"type": "image"}, "content.1"),
        ({"type": "image", "data": PIXEL, "url": "https://x"}, "content.1"),
        ({"type": "text", "text": "x", "cache_control": {}}, "content.1.cache_control"),
        ({"type": "reasoning", "summary": "not a list"}, "content.1.summary"),
    ],
)
def test_a_bad_part_is_refused_naming_the_message_and_path(part: dict[str, Any], path: str) -> None:
    core = LogCore("c", prefix="msglog", max_message_bytes=1 << 20, page_size=10, clock=lambda: 0.0)
    bad = {"role": "user", "content": [{"type": "text", "text": "ok"}, part]}
    with pytest.raises(InvalidMessageError) as caught:
        core.batch([{"role": "user", "content": "fine"}, bad])
    assert caught.value.index == 1
    assert str(caught.value).startswith(f"message 1: {path}")


@pytest.mark.parametrize(
    "where, value",
    [
        ("metadata", {"x": float("nan")}),
        ("metadata", {"x": (1, 2)}),
        ("extras", {"openai": {"x": uuid.uuid4()}}),
    ],
)
def test_free_values_without_exact_json_are_refused(where: str, value: Any) -> None:
    msg = AgentMessage.model_validate({"role": "user", "content": "x", where: value})
    with pytest.raises(CodecError, match=where):
        encode_message(msg)


def test_part_extras_without_exact_json_are_refused() -> None:
    msg = AgentMessage.model_validate(
        {"role": "user", "content": [{"type": "text", "text": "x", "extras": {"a": (1,)}}]}
    )
    with pytest.raises(CodecError, match="content"):
        encode_message(msg)


@pytest.mark.parametrize(
    "body, problem",
    [
        # Written by a newer version: a part kind this one does not know.
        (b'{"role":"user","content":[{"type":"hologram","data":"AA=="}]}', "hologram"),
        (b'{"role":"user","content":[{"type":"image","data":"not base64!"}]}', "base64"),
        (b'{"role":"user","content":[{"type":"image","data":"AB=="}]}', "canonical"),
        (b'{"role":"user","content":[{"type":"text"}]}', "text"),
    ],
)
def test_a_stored_row_with_a_bad_part_names_its_seq(body: bytes, problem: str) -> None:
    with pytest.raises(CorruptEntryError, match=problem) as caught:
        decode_entry(41, AT, body)
    assert caught.value.seq == 41
    assert "41" in str(caught.value)


def test_a_jsonl_export_line_with_parts_imports_back() -> None:
    msg = AgentMessage.model_validate(EVERY_PART[1])
    line = encode_row(decode_entry(5, AT, encode_message(msg)))
    assert AgentMessage.model_validate(decode_row(line)) == msg
    with pytest.raises(CodecError, match=r"content\.0\.data"):
        decode_row(b'{"role":"user","content":[{"type":"image","data":"%%%"}]}')


def test_msglog_show_labels_the_parts_it_cannot_print_as_text() -> None:
    from redis_msglog._tools.render import format_row

    row = decode_entry(2, AT, encode_message(AgentMessage.model_validate(EVERY_PART[1])))
    shown = format_row(row).plain
    assert shown.endswith(
        "what are these? [image 10 B png] [image url https://example.com/a.png]"
        " [audio 6 B wav] [file a.pdf 8 B pdf] [file file_id file-abc]"
    )
    row = decode_entry(3, AT, encode_message(AgentMessage.model_validate(EVERY_PART[2])))
    assert format_row(row).plain.endswith(
        "[thinking 11 chars, signed] [redacted thinking]"
        " [reasoning rs_1: 1 summary part, 1 content part, encrypted]"
        ' checking [refusal: not that one] → zoom({"x":1,"y":2}) [c1] → zoom({"x":3}) [c2]'
    )


# Free values: JSON and the things that have no exact JSON form.
free = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats()
    | st.text(max_size=6)
    | st.sampled_from([(1, 2), b"x", "\ud800", uuid.UUID(int=1)]),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=6,
)
parts = st.one_of(
    st.fixed_dictionaries({"type": st.just("text"), "text": st.text(max_size=8)}),
    st.fixed_dictionaries(
        {"type": st.just("image"), "data": st.binary(max_size=8) | st.text(max_size=4)},
        optional={"media_type": st.just("image/png"), "url": st.just("https://x")},
    ),
    st.fixed_dictionaries(
        {"type": st.sampled_from(["audio", "file"]), "data": st.binary(max_size=8)},
        optional={"filename": st.text(max_size=4)},
    ),
    st.fixed_dictionaries(
        {"type": st.just("thinking"), "thinking": st.text(max_size=8)},
        optional={"signature": st.text(max_size=4), "provider": st.just("anthropic")},
    ),
    st.fixed_dictionaries({"type": st.just("redacted_thinking"), "data": st.text(max_size=8)}),
    st.fixed_dictionaries(
        {"type": st.just("reasoning")},
        optional={"id": st.text(max_size=4), "summary": st.lists(st.text(max_size=4), max_size=2)},
    ),
    st.fixed_dictionaries({"type": st.just("refusal"), "refusal": st.text(max_size=8)}),
    st.fixed_dictionaries({"type": st.sampled_from(["video", "text"])}),  # unknown / incomplete
).flatmap(
    lambda p: st.fixed_dictionaries(
        {k: st.just(v) for k, v in p.items()},
        optional={
            "extras": st.dictionaries(st.sampled_from(["openai", "anthropic"]), free, max_size=1)
        },
    )
)
messages_with_parts = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant"]), "content": st.lists(parts, max_size=4)},
    optional={
        "id": st.text(max_size=6),
        "metadata": st.dictionaries(st.text(max_size=4), free, max_size=2),
    },
)


@given(messages_with_parts)
@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
def test_a_message_with_parts_round_trips_exactly_or_is_refused(message: dict[str, Any]) -> None:
    core = LogCore("c", prefix="msglog", max_message_bytes=1 << 20, page_size=10, clock=lambda: 0.0)
    try:
        batch = core.batch([message])
    except (InvalidMessageError, CodecError):
        return  # refused before anything could be written
    row = decode_entry(9, AT, batch.encoded[0])
    assert row.as_message() == AgentMessage.model_validate(message)
    assert encode_message(row) == batch.encoded[0]
