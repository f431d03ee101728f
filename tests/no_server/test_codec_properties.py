"""Property tests: any message either round-trips exactly or is rejected with a
ValueError (InvalidMessageError/CodecError) before anything is written."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from redis_msglog import AgentMessage, MessageLogError
from redis_msglog._core.facade import LogCore
from redis_msglog._core.stored.codec import decode_entry, encode_message

# JSON-ish values, plus the things that have no exact JSON form.
scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text()
    | st.sampled_from([(1, 2), {1, 2}, b"x", "\ud800"])
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
tool_calls = st.lists(
    st.fixed_dictionaries(
        {"id": st.text(max_size=10), "name": st.text(max_size=10), "args": values}
    ),
    max_size=3,
)
messages = st.fixed_dictionaries(
    {
        "role": st.sampled_from(["system", "user", "assistant", "tool", "robot"]),
        "content": st.text() | st.integers() | st.none(),
    },
    optional={
        "name": st.text(max_size=10),
        "toolCalls": tool_calls,
        "toolCallId": st.text(max_size=10),
    },
)


def _is_exact_json(value: Any) -> bool:
    if value is None or isinstance(value, bool):
        return True
    if isinstance(value, int):
        return -(2**63) <= value < 2**64
    if isinstance(value, float):
        return value == value and value not in (float("inf"), float("-inf"))
    if isinstance(value, str):
        return not any(0xD800 <= ord(c) <= 0xDFFF for c in value)
    if isinstance(value, list):
        return all(map(_is_exact_json, value))
    if isinstance(value, dict):
        return all(_is_exact_json(k) and _is_exact_json(v) for k, v in value.items())
    return False


def _expected_valid(message: dict[str, Any]) -> bool:
    if message["role"] == "robot" or not isinstance(message["content"], str):
        return False
    strings = [message["content"], message.get("name", ""), message.get("toolCallId", "")]
    for call in message.get("toolCalls", []):
        strings += [call["id"], call["name"]]
        if not _is_exact_json(call["args"]):
            return False
    return all(map(_is_exact_json, strings))


@given(messages)
@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
def test_codec_round_trips_exactly_or_rejects(message: dict[str, Any]) -> None:
    core = LogCore("c", prefix="msglog", max_message_bytes=1 << 20, page_size=10, clock=lambda: 0.0)
    try:
        batch = core.batch([message])
    except MessageLogError as exc:
        assert isinstance(exc, ValueError)
        assert not _expected_valid(message), f"rejected a valid message: {exc}"
        return
    assert _expected_valid(message), "accepted a message with no exact JSON form"
    stored = decode_entry(7, "1700000000000000", batch.encoded[0])
    assert stored.as_message() == AgentMessage.model_validate(message)
    assert stored.seq == 7
    assert encode_message(stored) == batch.encoded[0]  # stable: re-encoding is identical


# Stored bodies as a reader may find them: valid rows (text, parts, binaries, tool calls),
# and rows no client of this library writes: not JSON, not an object, wrong types, values
# orjson refuses (NaN, integers over 64 bits), bad base64, unknown parts.
_VALID_BODIES = [
    b'{"role":"user","content":"hi"}',
    b'{"role":"assistant","content":"","toolCalls":[{"id":"c1","name":"f","args":{"x":1.5}}]}',
    b'{"role":"user","content":[{"type":"text","text":"a"},'
    b'{"type":"image","data":"aGVsbG8=","media_type":"image/png"}]}',
    b'{"role":"tool","content":"r","toolCallId":"c1","metadata":{"k":[1,null,true]}}',
    b'{"role":"assistant","content":"x","toolCalls":[{"id":"c","name":"f","arguments":"{\\"a\\":1}"}]}',
    b'{"role":"user","content":"hi","seq":99,"at":"nope"}',  # overwritten, as row by row
    b'{"content":"hi","role":"system"}',  # a role and a text in the other order
]
_BAD_BODIES = [
    # Two keys, as a role and a text are, but not those (the rows built without pydantic).
    b'{"role":["user"],"content":"hi"}',
    b'{"role":1,"content":"hi"}',
    b'{"role":"User","content":"hi"}',
    b'{"role":"user","content":null}',
    b'{"role":"user","name":"hi"}',
    b'"ab"',
    b"[1,2]",
    b"",
    b"{",
    b"[]",
    b'"text"',
    b"null",
    b"{}",
    b'{"role":"robot","content":"hi"}',
    b'{"role":"user","content":3}',
    b'{"role":"user","content":"hi","extra":1}',
    b'{"role":"user","content":"hi","metadata":{"x":NaN}}',
    b'{"role":"user","content":"hi","metadata":{"x":18446744073709551616}}',
    b'{"role":"user","content":"hi","metadata":{"x":1e400}}',
    b'{"role":"user","content":"\\ud800"}',
    b'{"role":"user","content":[{"type":"image","data":"aGVsbG8","media_type":"x"}]}',
    b'{"role":"user","content":[{"type":"video","data":"aGVsbG8="}]}',
    b'{"role":"user","content":"hi"}}',
    b'{"role":"user","content":"hi"',
    b'\xff{"role":"user","content":"hi"}',
]
_AT = [b"1700000000000000", b"1700000000000001", b"0", b"-5", b"x", b"99999999999999999999"]
entry_fields = st.one_of(
    # An earlier version's entry: ID <seq>-0, the time in an "at" field.
    st.tuples(st.sampled_from(_AT), st.sampled_from(_VALID_BODIES + _BAD_BODIES)).map(
        lambda t: [b"at", t[0], b"msg", t[1]]
    ),
    # Today's: ID <seq>-<at>, the message alone.
    st.sampled_from(_VALID_BODIES + _BAD_BODIES).map(lambda body: [b"msg", body]),
    st.sampled_from([[b"msg", _VALID_BODIES[0], b"at", _AT[0]], [b"at", _AT[0]], []]),
)
# The ID's second part: 0 (an earlier version's), a commit time (today's), one out of range.
_TAILS = ["-0", "-0", "-1700000000000000", "-1700000000000001", "-18446744073709551615", ""]
pages = st.lists(st.tuples(st.sampled_from(_TAILS), entry_fields), max_size=8)


def _row_by_row(core: LogCore, entries: list[Any]) -> Any:
    """What decoding a page must equal: each entry decoded on its own, in order (the
    row path: ``decode_entry`` per entry)."""
    try:
        return core.decode_entries_one_by_one(entries)
    except MessageLogError as exc:
        return type(exc), str(exc), getattr(exc, "seq", None)


@given(pages, st.booleans())
@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
def test_a_page_decodes_exactly_as_its_rows_do(page: list[Any], as_str: bool) -> None:
    """The page decoder (one validation call) gives the rows, or the error naming the
    first bad entry's seq, that decoding each entry on its own gives."""
    core = LogCore("c", prefix="msglog", max_message_bytes=1 << 20, page_size=10, clock=lambda: 0.0)
    entries: list[Any] = [
        (f"{i + 1}{tail}".encode(), fields) for i, (tail, fields) in enumerate(page)
    ]
    if as_str:  # a client with decode_responses=True
        entries = [
            (i.decode(), [f.decode(errors="surrogateescape") for f in fields])
            for i, fields in entries
        ]
    expected = _row_by_row(core, entries)
    try:
        got: Any = core.decode_entries(entries)
    except MessageLogError as exc:
        got = type(exc), str(exc), getattr(exc, "seq", None)
    assert got == expected
    if isinstance(got, list):
        assert [type(r.at.tzinfo) for r in got] == [type(r.at.tzinfo) for r in expected]
        # Rows of a role and a text are built without the model's constructor: the same
        # object as pydantic makes, field for field, in the same order, and as frozen.
        assert [list(r.__dict__.items()) for r in got] == [
            list(r.__dict__.items()) for r in expected
        ]
        assert [r.model_fields_set for r in got] == [r.model_fields_set for r in expected]
        assert [(r.__pydantic_extra__, r.__pydantic_private__) for r in got] == [
            (r.__pydantic_extra__, r.__pydantic_private__) for r in expected
        ]
        assert [repr(r) for r in got] == [repr(r) for r in expected]
        assert [r.model_dump() for r in got] == [r.model_dump() for r in expected]
        for row, reference in zip(got, expected, strict=True):
            with pytest.raises(ValidationError):
                row.content = "changed"
            if len(row.model_fields_set) == 4 and type(row.content) is str:  # hashable
                assert hash(row) == hash(reference)


def test_a_large_page_is_decoded_in_one_piece_and_leaves_the_collector_on() -> None:
    import gc

    core = LogCore("c", prefix="msglog", max_message_bytes=1 << 20, page_size=10, clock=lambda: 0.0)
    entries = [
        (f"{i}-0".encode(), [b"at", b"1700000000000000", b"msg", _VALID_BODIES[i % 5]])
        for i in range(1, 301)
    ]
    rows = core.decode_entries(entries)
    assert [r.seq for r in rows] == list(range(1, 301))
    assert rows == _row_by_row(core, entries)
    assert gc.isenabled()
    entries[150] = (b"151-0", [b"at", b"1700000000000000", b"msg", b"{}"])
    with pytest.raises(MessageLogError, match="entry 151") as caught:
        core.decode_entries(entries)
    assert getattr(caught.value, "seq", None) == 151
    assert gc.isenabled()
    # Today's layout: ID <seq>-<at>, the message alone.
    entries = [
        (f"{i}-{1700000000000000 + i}".encode(), [b"msg", _VALID_BODIES[i % 5]])
        for i in range(1, 301)
    ]
    rows = core.decode_entries(entries)
    assert [r.seq for r in rows] == list(range(1, 301))
    assert rows == _row_by_row(core, entries) and gc.isenabled()
