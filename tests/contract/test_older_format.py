"""Logs written by earlier versions: entry ID ``<seq>-0`` and the commit time in an
``at`` field. Appends now write ID ``<seq>-<at>`` and the message alone; a log holding
both kinds is read, followed, edited, forked and verified like any other, and the
appends continue after the older entries (the seq grows, so the IDs do)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import orjson
import pytest

from redis_msglog import ConversationKeys, CorruptLogError, EditEntry, MessageLog, StoredMessage
from redis_msglog.admin import verify_conversation

from ..conftest import Env, new_id

OLDER = 4  # entries written by hand as an earlier version did
OLD_AT = 1_700_000_000_000_000  # their commit times: OLD_AT + seq
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def _micros(when: datetime) -> int:
    return (when - _EPOCH) // timedelta(microseconds=1)


def _older_log(env: Env, prefix: str = "msglog") -> str:
    """A conversation as an earlier version left it: raw ``XADD <seq>-0 at <t> msg
    <json>`` per message, then the seq counter."""
    conversation = new_id()
    keys = ConversationKeys.build(prefix, conversation)
    for seq in range(1, OLDER + 1):
        body = orjson.dumps({"role": "user", "content": f"old {seq}"})
        env.raw.xadd(keys.stream, {"at": OLD_AT + seq, "msg": body}, id=f"{seq}-0")
    env.raw.set(keys.seq, OLDER)
    return conversation


def _raw(env: Env, stream: str) -> list[tuple[str, set[str]]]:
    entries: Any = env.raw.xrange(stream)
    return [
        (entry_id.decode(), {field.decode() for field in fields}) for entry_id, fields in entries
    ]


def test_a_log_of_an_earlier_version_reads_appends_and_verifies(env: Env) -> None:
    conversation = _older_log(env)
    log = env.log(conversation, page_size=2)  # pages cross from the older entries to the new
    assert log.count() == OLDER
    rows = log.all()
    assert [(r.seq, r.content, _micros(r.at)) for r in rows] == [
        (s, f"old {s}", OLD_AT + s) for s in range(1, OLDER + 1)
    ]

    assert log.append_many([{"role": "user", "content": f"new {i}"} for i in (5, 6)]) == 6
    log.add("assistant", "new 7")
    stored = _raw(env, log.keys.stream)
    assert stored[:OLDER] == [(f"{s}-0", {"at", "msg"}) for s in range(1, OLDER + 1)]
    new_ids = [entry_id for entry_id, _ in stored[OLDER:]]
    assert [fields for _, fields in stored[OLDER:]] == [{"msg"}] * 3
    assert [entry_id.split("-")[0] for entry_id in new_ids] == ["5", "6", "7"]

    rows = log.all()
    assert [r.seq for r in rows] == list(range(1, 8))
    assert [_micros(r.at) for r in rows[OLDER:]] == [int(i.split("-")[1]) for i in new_ids]
    assert rows[4].at == rows[5].at < rows[6].at  # one append, one time
    assert [r.seq for r in log.read(after=3)] == [4, 5, 6, 7]
    assert [r.seq for r in log.read(after=4, limit=1)] == [5]
    assert [r.seq for r in log.read(after=2, limit=3)] == [3, 4, 5]
    assert [r.seq for r in log.last(5)] == [3, 4, 5, 6, 7]  # XREVRANGE pages, both kinds
    assert [r.seq for r in log.last(7)] == list(range(1, 8))
    last = log.last()
    assert last is not None and last.seq == 7 and last.content == "new 7"
    assert log.count() == 7

    follower = MessageLog(env.make_sync_client(), conversation, page_size=2)
    for after in (0, 3, 4, 5):  # from, at and after the last older entry
        followed: Any = follower.follow(after=after)
        seen = [next(followed) for _ in range(7 - after)]
        followed.close()
        assert [(r.seq, r.at) for r in seen] == [(r.seq, r.at) for r in rows[after:]]

    report = verify_conversation(env.raw, "msglog", conversation)
    assert report.problems == [] and report.entries == report.last_seq == 7


def test_edits_over_a_log_of_an_earlier_version(env: Env) -> None:
    conversation = _older_log(env)
    log = env.log(conversation, page_size=2)
    log.append_many([{"role": "user", "content": "new 5"}, {"role": "user", "content": "new 6"}])
    assert log.retract([2, 5]) == 7  # one older row, one new
    assert [r.seq for r in log.all()] == [1, 3, 4, 6]
    assert [r.seq for r in log.last(3)] == [3, 4, 6]  # the view script walks both kinds
    assert [r.seq for r in log.read(after=3)] == [4, 6]
    popped = log.pop()
    assert popped is not None and popped.seq == 6
    assert [r.seq for r in log.all()] == [1, 3, 4]
    physical: list[Any] = log.all(view="physical")
    assert [type(e) for e in physical] == [StoredMessage] * 6 + [EditEntry] * 2
    assert _micros(physical[0].at) == OLD_AT + 1
    compacted = log.compact([{"role": "system", "content": "summary"}], through_seq=3)
    assert compacted == 10
    assert [r.content for r in log.all()] == ["summary", "old 4"]

    fork = env.log(log.fork(new_id()).conversation)
    assert [r.content for r in fork.all()] == ["summary", "old 4"]
    assert all(
        not entry_id.endswith("-0") and fields in ({"msg"}, {"edit"})
        for entry_id, fields in _raw(env, fork.keys.stream)
    )
    report = verify_conversation(env.raw, "msglog", conversation)
    assert report.problems == [] and report.entries == report.last_seq == 10


def test_a_replay_reads_its_commit_time_from_the_entry_id(env: Env) -> None:
    log = env.log(_older_log(env))
    first = log.add("user", "once", idempotency_key="k")
    again = log.add("user", "once", idempotency_key="k")
    assert first == again == OLDER + 1
    [(entry_id, fields)] = _raw(env, log.keys.stream)[OLDER:]
    last = log.last()
    assert last is not None and entry_id == f"{OLDER + 1}-{_micros(last.at)}"
    assert fields == {"msg"}


@pytest.mark.parametrize("backend", ["redis", "fakeredis"])
def test_a_seq_written_twice_is_refused_and_reported(env: Env) -> None:
    """A second entry of a seq (``<seq>-<another time>``, only by hand): the append
    refuses (the counter is behind the stream), reads and verify say so."""
    log = env.log(_older_log(env))
    log.add("user", "new 5")
    env.raw.xadd(log.keys.stream, {"msg": b'{"role":"user","content":"x"}'}, id=f"5-{2 * OLD_AT}")
    before = _raw(env, log.keys.stream)
    with pytest.raises(CorruptLogError, match="behind"):
        log.add("user", "refused")
    assert _raw(env, log.keys.stream) == before
    with pytest.raises(CorruptLogError, match="two entries of seq 5"):
        log.last(3)
    with pytest.raises(CorruptLogError):
        log.all()
    report = verify_conversation(env.raw, "msglog", log.conversation)
    assert any("seq 5 twice" in p for p in report.problems), report.problems
