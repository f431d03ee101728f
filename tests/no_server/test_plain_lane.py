"""The plain lane (in redis_msglog/_core/write/encode.py) against the model route it
short-cuts: for any batch, both store byte-identical rows or refuse it with the same typed
error."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import hiredis
import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from redis_msglog import NO_RETRY, AgentMessage, MessageLog, MessageLogError
from redis_msglog._core.stored.codec import encode_message
from redis_msglog._core.write.encode import Batch, BatchRules
from redis_msglog._io.routing import pack, pack_split

# Near the plain shape, and just outside it: other roles and types, None, both spellings
# of the tool call id, unknown keys, lone surrogates, a str subclass, a dict subclass.
texts = st.text(max_size=12) | st.sampled_from(["\ud800", "a\udfffb", "", "\x00"])


class _Str(str):
    pass


class _OrderedDict(dict[str, Any]):
    pass


def _valid(msg: dict[str, Any]) -> AgentMessage | None:
    try:
        return AgentMessage.model_validate(msg)
    except ValueError:
        return None


values = texts | st.none() | st.integers() | st.builds(_Str, st.text(max_size=3))
plain_dicts = st.fixed_dictionaries(
    {
        "role": st.sampled_from(["system", "user", "assistant", "tool", "robot", "User"])
        | st.none(),
        "content": texts | st.none() | st.integers() | st.just([{"type": "text", "text": "t"}]),
    },
    optional={
        "name": values,
        "toolCallId": values,
        "tool_call_id": values,
        "id": values,
        "metadata": st.none() | st.just({"k": 1}),
        "extra": texts,
    },
)
# Valid plain messages (the lane's own), often: the batch must be valid throughout to
# compare the stored bytes.
plain_shaped = st.builds(
    lambda role, content, spelling, fields: (
        {"role": role, "content": content}
        | {spelling if key == "call" else key: value for key, value in fields.items()}
    ),
    st.sampled_from(["system", "user", "assistant", "tool"]),
    texts,
    st.sampled_from(["toolCallId", "tool_call_id"]),
    st.fixed_dictionaries({}, optional={k: st.none() | texts for k in ("name", "call", "id")}),
)
inputs = (
    plain_dicts
    | plain_shaped
    | plain_shaped.map(_OrderedDict)
    | plain_shaped.map(_valid).filter(lambda m: m is not None)
)


def _outcome(rules: BatchRules, batch: list[Any], models: bool) -> tuple[Any, ...]:
    try:
        made = rules.batch(batch, models=models)
    except MessageLogError as exc:
        return type(exc), str(exc), getattr(exc, "index", None)
    return made.encoded, made.blobs, made.blob_refs


@given(st.lists(inputs, max_size=4), st.sampled_from([1 << 20, 1 << 20, 60, 30]))
@settings(max_examples=600, suppress_health_check=[HealthCheck.too_slow])
def test_lane_and_model_route_agree_byte_for_byte(batch: list[Any], limit: int) -> None:
    rules = BatchRules(limit, 1024)
    assert _outcome(rules, batch, models=False) == _outcome(rules, batch, models=True)


@given(plain_shaped | plain_shaped.map(_valid))
@settings(max_examples=300)
def test_one_plain_message_agrees(msg: Any) -> None:
    rules = BatchRules(1 << 20, 1024)
    assert _outcome(rules, [msg], models=False) == _outcome(rules, [msg], models=True)


@pytest.mark.parametrize(
    "msg",
    [
        {"role": "user", "content": "hi"},
        {"role": "tool", "content": "42", "tool_call_id": "c1", "name": "add", "id": None},
        {"toolCallId": "c1", "content": 'é\n"', "role": "tool", "id": "m1", "name": "f"},
        AgentMessage(role="assistant", content="ok", name="bot"),
    ],
)
def test_plain_messages_take_the_lane(msg: Any) -> None:
    """The lane is taken (no model built: the batch carries none) and stores what the
    model route stores; a ``validate()``-style batch still carries the models."""
    rules = BatchRules(1 << 20, 1024)
    lane, route = rules.batch([msg]), rules.batch([msg], models=True)
    assert lane.messages == () and route.messages == (AgentMessage.model_validate(msg),)
    assert lane.encoded == route.encoded == (encode_message(route.messages[0]),)


def test_a_before_append_still_sees_models() -> None:
    seen: list[Any] = []

    def hook(msgs: list[AgentMessage]) -> list[AgentMessage]:
        seen.extend(msgs)
        return msgs

    batch = BatchRules(1 << 20, 1024, hook).batch([{"role": "user", "content": "hi"}])
    assert seen == [AgentMessage(role="user", content="hi")]
    assert isinstance(batch, Batch) and batch.messages == tuple(seen)


@given(
    st.text(min_size=1, max_size=8),
    st.sampled_from([{}, {"retry": NO_RETRY}, {"ttl": timedelta(hours=1)}]),
    st.none() | st.integers(0, 10**6),
    st.none() | st.text(min_size=1, max_size=4),
    st.lists(plain_dicts, min_size=1, max_size=2),
)
@settings(max_examples=60, deadline=None)
def test_a_first_try_packed_beforehand_is_what_hiredis_packs(
    conversation: str, options: dict[str, Any], expected: int | None, key: str | None, batch: Any
) -> None:
    """An append's first try is packed as the shell sends it with its head from a cache
    (``_io.routing.pack``, ``pack_split``): the bytes hiredis makes of its command, or
    none (an argument hiredis refuses: then packed whole, as any command); a call with a
    record has no cached head (``Write.split`` is 0)."""
    log = MessageLog(redis.Redis.from_url("redis://127.0.0.1:1"), conversation, **options)
    conn = redis.Connection()  # never connected: pack reads its encoder
    core = log._core
    try:
        made = core.batch(batch)
    except MessageLogError:
        return
    for _ in range(2):  # the second: its head from the cache
        prepared = core.prepare(made, key, expected)
        first = prepared.first_try
        prepared.settle()
        if key is not None:
            assert first.split == 0
            continue
        assert first.split
        try:
            whole = hiredis.pack_command(first.command)  # type: ignore[arg-type]
        except UnicodeEncodeError:
            assert pack_split(first.command, first.split) is None
            continue
        assert pack_split(first.command, first.split) == whole
        assert pack(conn, [first.command], first.split) == [whole]
