"""The history checker of the fault tests (tests/support/history.py) catches what it must: bad
logs are built on a real server with raw XADDs, then checked against a history."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import orjson
import pytest
import redis

from redis_msglog import (
    AppendInDoubtError,
    IdempotencyConflictError,
    MessageLog,
    NotDurableError,
    StoredMessage,
)
from redis_msglog.testing import EphemeralServer

from ..conftest import new_id
from ..support.history import Append, History, Read, Summary


@pytest.fixture
def raw(shared_server: Callable[[str], EphemeralServer]) -> redis.Redis:
    return redis.Redis.from_url(shared_server("redis").url)


def write_raw(raw: redis.Redis, history: History, entries: list[tuple[int, str]]) -> None:
    """A log exactly as given: one XADD per (seq, content), then the counter at the end."""
    for seq, content in entries:
        msg = orjson.dumps({"role": "user", "content": content})
        raw.xadd(history.keys.stream, {"at": 0, "msg": msg}, id=f"{seq}-0")
    raw.set(history.keys.seq, max((seq for seq, _ in entries), default=0))


def acked(content: str, seq: int, client: str = "w1") -> Append:
    return Append(client, (content,), "ok", seq)


def test_a_consistent_history_passes_and_is_summarised(raw: redis.Redis) -> None:
    history = History(new_id())
    write_raw(raw, history, [(1, "a"), (2, "b"), (3, "c"), (4, "d")])
    history.extend(
        [
            acked("a", 1),
            Append("w2", ("b", "c"), "ok", 3),
            Append("w1", ("d",), "in doubt"),  # written
            Append("w2", ("e",), "in doubt"),  # not written: allowed
            Append("w1", ("f",), "failed"),
            Read("r", 0, ((1, "a"), (2, "b"))),
            Read("r", None, ((3, "c"), (4, "d"))),
        ]
    )
    assert history.check(raw) == Summary(
        length=4, acked=2, in_doubt=2, in_doubt_written=1, failed=1, reads=2
    )


def test_a_duplicate_is_caught(raw: redis.Redis) -> None:
    history = History(new_id())
    write_raw(raw, history, [(1, "a"), (2, "b"), (3, "b")])
    history.extend([acked("a", 1), Append("w1", ("b",), "in doubt"), acked("b", 2, "w2")])
    with pytest.raises(AssertionError, match=r"'b' was written 2 times, at seqs \[2, 3\]"):
        history.check(raw)


def test_a_lost_acknowledged_append_is_caught(raw: redis.Redis) -> None:
    history = History(new_id())
    write_raw(raw, history, [(1, "a")])
    history.extend([acked("a", 1), acked("b", 2, "w2")])
    with pytest.raises(
        AssertionError, match="lost: 'b' was acknowledged to w2 at seq 2 and is not in the log"
    ):
        history.check(raw)


def test_a_gap_is_caught(raw: redis.Redis) -> None:
    history = History(new_id())
    write_raw(raw, history, [(1, "a"), (3, "c")])
    history.extend([acked("a", 1), Append("w1", ("b",), "in doubt"), acked("c", 3)])
    with pytest.raises(AssertionError, match=r"not gap-free 1\.\.2: missing \[2\]") as caught:
        history.check(raw)
    assert "the seq counter says 3 but the log has 2 entries" in str(caught.value)


def test_a_seq_seen_with_two_contents_is_caught(raw: redis.Redis) -> None:
    """A reader saw 'b' at seq 2; the final log has 'x' there (a rewound log that reused
    the seq): both were possible writes, so only the two views disagree."""
    history = History(new_id())
    write_raw(raw, history, [(1, "a"), (2, "x")])
    history.extend(
        [
            acked("a", 1),
            Append("w2", ("b",), "in doubt"),
            Append("w3", ("x",), "in doubt"),
            Read("r", 1, ((2, "b"),)),
        ]
    )
    with pytest.raises(AssertionError) as caught:
        history.check(raw)
    assert "seq 2 was seen with 2 contents: 'x' (the final log); 'b' (read by r)" in str(
        caught.value
    )


def test_an_ack_at_a_seq_holding_another_message_is_caught(raw: redis.Redis) -> None:
    history = History(new_id())
    write_raw(raw, history, [(1, "b"), (2, "a")])
    history.extend([acked("a", 1), acked("b", 2)])
    with pytest.raises(AssertionError) as caught:
        history.check(raw)
    message = str(caught.value)
    assert "'a' was acknowledged to w1 at seq 1, but the log has it at seqs [2]" in message
    assert "seq 1 was seen with 2 contents" in message


@pytest.mark.parametrize(
    "records, entries, problem",
    [
        ([Append("w", ("a",), "failed")], [(1, "a")], "written by failed appends only"),
        ([], [(1, "stranger")], "holds 'stranger', written by no recorded append"),
        (
            [Append("w", ("a", "b"), "in doubt")],
            [(1, "a")],
            r"in-doubt batch \('a', 'b'\) of w is half written",
        ),
        (
            [Append("w", ("a", "b"), "in doubt"), acked("c", 2, "v")],
            [(1, "a"), (2, "c"), (3, "b")],
            r"batch \('a', 'b'\) of w is not contiguous and in order: at seqs \[1, 3\]",
        ),
        (
            [acked("a", 1), acked("b", 2), Read("r", 0, ((2, "b"),))],
            [(1, "a"), (2, "b")],
            r"a read by r after 0 returned seqs \[2\]: not a gap-free segment from 1",
        ),
        (
            [acked("a", 1), Read("r", 0, ((1, "a"), (2, "b")))],
            [(1, "a")],
            "r read seq 2 \\('b'\\), which the final log lacks",
        ),
    ],
    ids=["failed but written", "unknown", "half batch", "split batch", "read gap", "read past"],
)
def test_other_violations_are_named(
    raw: redis.Redis, records: list[Append | Read], entries: list[tuple[int, str]], problem: str
) -> None:
    history = History(new_id())
    write_raw(raw, history, entries)
    history.extend(records)
    with pytest.raises(AssertionError, match=problem):
        history.check(raw)


def test_outcomes_are_recorded_from_real_calls(raw: redis.Redis) -> None:
    history = History(new_id())
    log = MessageLog(raw, history.conversation)
    with history.append("w", ["a"]) as op:
        op.committed(log.add("user", "a", idempotency_key="k"))
    with pytest.raises(IdempotencyConflictError), history.append("w", ["other"]) as op:
        op.committed(log.add("user", "other", idempotency_key="k"))  # refused: failed
    with pytest.raises(NotDurableError), history.append("w", ["b"]):
        raise NotDurableError("committed, not replicated", last_seq=log.add("user", "b"))
    with pytest.raises(AppendInDoubtError), history.append("w", ["c"]):
        raise AppendInDoubtError("reply lost")

    async def cancelled() -> None:
        with history.append("w", ["d"]):
            await asyncio.sleep(10)

    async def cancel() -> None:
        task = asyncio.create_task(cancelled())
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancel())
    with history.read("r", after=0) as read:
        rows: list[StoredMessage] = read.returned(log.read(after=0))
    assert [r.outcome for r in history.records] == [
        "ok", "failed", "ok", "in doubt", "in doubt", "ok"
    ]  # fmt: skip
    assert [m.content for m in rows] == ["a", "b"]
    summary = history.check(raw)
    assert (summary.acked, summary.in_doubt, summary.failed, summary.reads) == (2, 2, 1, 1)
    with pytest.raises(AssertionError, match=r"without op\.committed"), history.append("w", ["e"]):
        pass
