"""Nothing lost, nothing wedged: a deleted counter heals, retention expires a
conversation whole."""

from __future__ import annotations

import time
from datetime import timedelta

from redis_msglog.admin import verify_conversation

from .conftest import Env


def test_a_deleted_seq_counter_heals_on_the_next_append(env: Env) -> None:
    log = env.log()
    log.append_many([{"role": "user", "content": str(i)} for i in range(3)])
    env.raw.delete(log.keys.seq)  # deleted by an operator, or evicted
    report = verify_conversation(env.raw, "msglog", log.conversation)
    assert any("seq counter" in p and "missing" in p for p in report.problems)
    assert log.count() == 0  # what the counter says, until the next append
    assert log.add("user", "next") == 4  # continues after the stream's last entry
    assert [m.seq for m in log.all()] == [1, 2, 3, 4]
    assert verify_conversation(env.raw, "msglog", log.conversation).ok


def test_retention_slides_with_every_append_and_expires_the_conversation_whole(
    env: Env,
) -> None:
    log = env.log(ttl=timedelta(seconds=1.5))
    log.add("user", "first", idempotency_key="k1")
    keys = [log.keys.seq, log.keys.stream, log.keys.idempotency_record("k1")]
    assert all(0 < env.raw.pttl(key) <= 1500 for key in keys)  # records included
    time.sleep(0.8)
    log.add("user", "second")
    assert env.raw.pttl(log.keys.seq) > 1000 and env.raw.pttl(log.keys.stream) > 1000
    time.sleep(1.8)
    assert env.raw.exists(*keys) == 0  # gone whole, never half
    assert log.add("user", "again", idempotency_key="k1") == 1  # a new conversation


def test_without_ttl_keys_do_not_expire(env: Env) -> None:
    log = env.log()
    log.add("user", "kept")
    assert env.raw.pttl(log.keys.seq) == -1 and env.raw.pttl(log.keys.stream) == -1
