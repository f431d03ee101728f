"""Conditional appends (``expected_seq``): a compare-and-set checked inside the append
script. A stale writer is refused with the current seq and writes nothing; of writers
racing on one seq exactly one wins; it combines with idempotency keys. Every backend,
both clients."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from redis_msglog import DEFAULT_RETRY, NO_RETRY, MessageLog, SeqConflictError
from redis_msglog.testing import EphemeralServer

from ..conftest import Env, new_id


def test_an_append_commits_only_where_the_log_ends(env: Env) -> None:
    log = env.log()
    assert log.add("user", "first", expected_seq=0) == 1
    assert (
        log.append_many(
            [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}], expected_seq=1
        )
        == 3
    )
    before = {key: env.raw.dump(key) for key in (log.keys.seq, log.keys.stream)}
    with pytest.raises(SeqConflictError, match="3 is the last seq") as caught:
        log.add("user", "stale", expected_seq=1)
    assert caught.value.current_seq == 3
    with pytest.raises(SeqConflictError):
        log.add("user", "ahead", expected_seq=7)
    assert {key: env.raw.dump(key) for key in before} == before  # nothing written
    assert [m.content for m in log.all()] == ["first", "a", "b"]


def test_a_conflict_on_a_new_conversation_leaves_no_key(env: Env) -> None:
    """The script takes the counter first (``INCRBY``) and undoes it on a conflict: a
    conversation that had no counter has none after it, and a later append starts at 1."""
    log = env.log()
    with pytest.raises(SeqConflictError) as caught:
        log.append_many([{"role": "user", "content": "a"}] * 2, expected_seq=2)
    assert caught.value.current_seq == 0
    assert not env.raw.exists(log.keys.seq) and not env.raw.exists(log.keys.stream)
    assert log.add("user", "first", expected_seq=0) == 1


def test_an_empty_batch_checks_the_count(env: Env) -> None:
    log = env.log()
    log.add("user", "x")
    assert log.append_many([], expected_seq=1) == 1
    with pytest.raises(SeqConflictError) as caught:
        log.append_many([], expected_seq=0)
    assert caught.value.current_seq == 1


def test_a_replay_with_its_key_wins_even_after_the_log_moved_on(env: Env) -> None:
    log = env.log()
    assert log.add("user", "once", idempotency_key="k", expected_seq=0) == 1
    log.add("user", "someone else")
    # The same call again (a retry after a lost reply, say): its first result, no conflict.
    assert log.add("user", "once", idempotency_key="k", expected_seq=0) == 1
    assert log.count() == 2


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    length=st.integers(0, 4),
    expected=st.integers(0, 6),
    batch=st.integers(1, 3),
    keyed=st.booleans(),
    retries=st.booleans(),
)
def test_a_conditional_append_commits_exactly_where_the_log_ends(
    shared_server: Any, length: int, expected: int, batch: int, keyed: bool, retries: bool
) -> None:
    """Any length, condition, batch, key or none, producer or none: it commits iff the
    log ends at ``expected_seq``, else refuses with the log's end and changes no byte of
    the conversation's keys (each example its own conversation: no keyspace scan)."""
    client = redis.Redis.from_url(shared_server("redis").url)
    log = MessageLog(client, new_id(), retry=DEFAULT_RETRY if retries else NO_RETRY)
    if length:
        log.append_many([{"role": "user", "content": f"m{i}"} for i in range(length)])
    keys = (log.keys.seq, log.keys.stream, log.keys.producers, log.keys.records)
    before = [client.dump(key) for key in keys]
    rows = [{"role": "user", "content": f"new{i}"} for i in range(batch)]
    key = new_id() if keyed else None
    if expected != length:
        with pytest.raises(SeqConflictError) as caught:
            log.append_many(rows, expected_seq=expected, idempotency_key=key)
        assert caught.value.current_seq == length
        assert [client.dump(key) for key in keys] == before
        return
    assert log.append_many(rows, expected_seq=expected, idempotency_key=key) == length + batch
    assert [m.content for m in log.all()][length:] == [r["content"] for r in rows]
    assert client.get(log.keys.seq) == str(length + batch).encode()


@pytest.mark.parametrize("bad", [-1, "3", 2.0, True])
def test_a_bad_expected_seq_is_refused_before_sending(env: Env, bad: Any) -> None:
    log = env.log()
    with pytest.raises(ValueError, match="expected_seq"):
        log.add("user", "x", expected_seq=bad)
    assert env.raw.exists(log.keys.seq, log.keys.stream) == 0


def test_writers_racing_on_one_seq_have_exactly_one_winner(
    real_backend: str, shared_server: Any
) -> None:
    server: EphemeralServer = shared_server(real_backend)
    conversation = new_id()
    per_writer, writers = 25, 8
    conflicts: list[int] = []
    wins: dict[int, str] = {}
    lock = threading.Lock()

    def writer(name: str) -> None:
        log = MessageLog(redis.Redis.from_url(server.url), conversation)
        done = 0
        while done < per_writer:
            seen = log.count()
            try:
                seq = log.add("user", f"{name}:{done}", expected_seq=seen)
            except SeqConflictError as exc:
                assert exc.current_seq > seen
                with lock:
                    conflicts.append(exc.current_seq)
                continue
            with lock:
                assert seq not in wins, f"seq {seq} won twice"
                wins[seq] = f"{name}:{done}"
            assert seq == seen + 1
            done += 1

    threads = [threading.Thread(target=writer, args=(f"w{i}",)) for i in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    total = per_writer * writers
    log = MessageLog(redis.Redis.from_url(server.url), conversation)
    rows = log.all()
    assert [r.seq for r in rows] == list(range(1, total + 1))
    assert {r.seq: r.content for r in rows} == wins  # each seq written once, by its winner
    assert conflicts  # they did race
