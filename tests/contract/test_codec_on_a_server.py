"""Property tests on a real server: any batch either round-trips exactly or is refused
with nothing written, and any interleaving of clients keeps the log contiguous (the
codec's own properties are ``tests/no_server/test_codec_properties.py``)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from redis_msglog import AgentMessage, LogRewoundError, MessageLog, MessageLogError

from ..no_server.test_codec_properties import _expected_valid, messages

operations = st.lists(
    st.tuples(
        st.sampled_from(["append", "append_many", "bad append", "all", "last", "read", "count"]),
        st.integers(min_value=0, max_value=2),  # which of three clients
        st.integers(min_value=0, max_value=4),  # batch size, n, or cursor
    ),
    max_size=25,
)


def _write(log: MessageLog, op: str, who: int, n: int, model: list[str]) -> None:
    """An append of ``op``'s kind through client ``who``, mirrored in ``model``."""
    if op == "append":
        model.append(f"{who}:{len(model)}")
        assert log.add("user", model[-1]) == len(model)
    elif op == "append_many":
        batch = [f"{who}:{len(model) + i}" for i in range(n)]
        seq = log.append_many([{"role": "user", "content": c} for c in batch])
        model.extend(batch)
        assert seq == len(model)
    elif op == "bad append":
        try:
            log.append_many([{"role": "user", "content": "ok"}, {"role": "user", "content": n}])
        except ValueError:
            pass  # rejected, as it must be: and nothing written (checked by the caller)
        else:
            raise AssertionError("a non-string content was accepted")


def _read(log: MessageLog, op: str, n: int, model: list[str]) -> None:
    """A read of ``op``'s kind, which must agree with ``model``."""
    if op == "all":
        assert [m.content for m in log.all()] == model
    elif op == "last":
        assert [m.content for m in log.last(n)] == (model[-n:] if n else [])
    elif op == "read" and n > len(model):
        with pytest.raises(LogRewoundError):  # a cursor past the end is an error
            log.read(after=n)
    elif op == "read":
        assert [m.content for m in log.read(after=n)] == model[n:]


@given(st.lists(messages, min_size=1, max_size=4))
@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_server_round_trip_or_nothing_written(
    shared_server: Any, batch: list[dict[str, Any]]
) -> None:
    client = redis.Redis.from_url(shared_server("redis").url)
    log = MessageLog(client, f"prop-{id(batch)}-{len(batch)}-{hash(repr(batch)) & 0xFFFFFF}")
    client.delete(log.keys.seq, log.keys.stream)
    try:
        log.append_many(batch)
    except MessageLogError as exc:
        assert isinstance(exc, ValueError)
        assert not all(map(_expected_valid, batch))
        assert client.exists(log.keys.seq, log.keys.stream) == 0
        return
    assert all(map(_expected_valid, batch))
    assert [m.as_message() for m in log.all()] == [AgentMessage.model_validate(m) for m in batch]


@given(operations)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_any_interleaving_of_clients_keeps_the_log_contiguous(
    shared_server: Any, ops: list[tuple[str, int, int]]
) -> None:
    """Several clients (separate connections) interleave appends, rejected appends and
    reads: count() == len(all()), seqs are 1..N, and every read agrees with the model."""
    url = shared_server("redis").url
    conversation = f"prop-{uuid.uuid4().hex}"
    logs = [MessageLog(redis.Redis.from_url(url), conversation) for _ in range(3)]
    model: list[str] = []
    for op, who, n in ops:
        log = logs[who]
        if op in ("append", "append_many", "bad append"):
            _write(log, op, who, n, model)
        else:
            _read(log, op, n, model)
        rows = log.all()
        assert log.count() == len(rows) == len(model)
        assert [m.seq for m in rows] == list(range(1, len(model) + 1))
