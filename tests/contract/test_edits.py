"""Edits as entries of the log (docs/edits.md): retract, pop, compact, replace, clear,
archive and fork, the views they make, and their guarantees. Every backend (cluster and
ACL included), both clients; the views are checked against :class:`LogView`, the fold of
the physical log, including by hypothesis over random edit sequences."""

from __future__ import annotations

import itertools
import multiprocessing
from collections.abc import Callable
from typing import Any

import orjson
import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from redis_msglog import (
    AsyncMessageLog,
    Attributes,
    CorruptLogError,
    EditEntry,
    Entry,
    InvalidEditError,
    LogView,
    MessageLog,
    SeqConflictError,
    StoredMessage,
    WrongTypeError,
)
from redis_msglog.testing import EphemeralServer

from ..conftest import Env, SyncView, new_id


def user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


def seqs(rows: list[StoredMessage]) -> list[int]:
    return [row.seq for row in rows]


def assert_views_match_the_fold(log: Any) -> LogView:
    """Every view read equals the fold of the physical log."""
    fold = LogView(log.all(view="physical"))
    assert seqs(log.all()) == seqs(fold.rows)
    assert seqs(log.all(view="active")) == seqs(fold.active())
    assert seqs(log.all(view="archived")) == seqs(fold.archived())
    assert log.count(view="visible") == len(fold.rows)
    assert log.count(view="active") == len(fold.active())
    assert log.count(view="archived") == len(fold.archived())
    assert log.count() == log.count(view="physical") == fold.last_seq
    for n in (1, 2, 5):
        assert seqs(log.last(n)) == seqs(fold.rows)[-n:]
    after = min(3, fold.last_seq)  # a cursor beyond the end is a rewind (an error)
    assert seqs(log.read(after=after)) == [s for s in seqs(fold.rows) if s > after]
    return fold


def keys_of(log: Any) -> list[str]:
    k = log.keys
    return [k.seq, k.stream, k.blobs, k.view, k.hidden]


def snapshot(env: Env, log: Any) -> dict[str, Any]:
    return {key: env.raw.dump(key) for key in keys_of(log)}


def test_each_edit_is_one_entry_and_changes_the_view(env: Env) -> None:
    log = env.log()
    log.append_many([user(f"m{i}") for i in range(1, 11)])
    popped = log.pop()
    assert popped is not None and popped.seq == 10 and popped.content == "m10"
    assert log.count() == 11 and log.count(view="visible") == 9
    assert log.retract([3, 5]) == 12
    assert seqs(log.all()) == [1, 2, 4, 6, 7, 8, 9]
    # A compaction: its messages are newer entries, shown first.
    assert log.compact([{"role": "system", "content": "summary"}], through_seq=6) == 14
    assert seqs(log.all()) == [14, 7, 8, 9]
    assert log.add("user", "after") == 15
    assert seqs(log.last(3)) == [8, 9, 15]
    assert log.archive(7) == 16
    assert seqs(log.all(view="active")) == [8, 9, 15]
    assert seqs(log.all(view="archived")) == [14, 7]
    physical = log.all(view="physical")
    assert [e.seq for e in physical] == list(range(1, 17))
    edits = {e.seq: e for e in physical if isinstance(e, EditEntry)}
    assert edits[11].op == "retract" and edits[11].seqs == (10,)
    assert edits[13].op == "compact" and edits[13].through_seq == 6 and edits[13].count == 1
    assert edits[16].op == "archive" and edits[16].through_seq == 7
    assert_views_match_the_fold(log)
    assert log.replace([user("only")]) == 18
    assert [m.content for m in log.all()] == ["only"]
    assert log.clear() == 19 and log.all() == [] and log.pop() is None
    assert log.count() == 19  # the pop of an empty view wrote nothing
    assert_views_match_the_fold(log)


def test_an_edit_free_log_reads_as_before(env: Env) -> None:
    log = env.log()
    log.append_many([user("a"), user("b")])
    assert env.raw.exists(log.keys.view, log.keys.hidden) == 0
    assert seqs(log.all(view="active")) == [1, 2] and log.all(view="archived") == []
    assert log.count(view="visible") == 2 and log.count(view="archived") == 0


@pytest.mark.parametrize(
    "edit, error, match",
    [
        (lambda log: log.retract([99]), InvalidEditError, "not in the log"),
        (lambda log: log.retract([6]), InvalidEditError, "not in the view"),  # an edit entry
        (lambda log: log.retract([5]), InvalidEditError, "not in the view"),  # retracted
        (lambda log: log.retract([1]), InvalidEditError, "not in the view"),  # compacted away
        (lambda log: log.retract([3, 99]), InvalidEditError, "99"),  # one bad: none hidden
        (lambda log: log.retract([]), InvalidEditError, "no seqs"),
        (lambda log: log.retract([3, 3]), InvalidEditError, "repeat"),
        (lambda log: log.retract([0]), InvalidEditError, "not a seq"),
        (lambda log: log.retract("3"), TypeError, "iterable of ints"),
        (lambda log: log.compact([], through_seq=99), InvalidEditError, "not in the log"),
        (lambda log: log.compact([], through_seq=-1), InvalidEditError, ">= 0"),
        (lambda log: log.archive(3), InvalidEditError, "only moves forward"),  # the watermark
        (lambda log: log.archive(2), InvalidEditError, "not in the view"),
        (lambda log: log.archive(0), InvalidEditError, ">= 1"),
        (lambda log: log.compact([{"role": "robot"}], through_seq=3), ValueError, "role"),
        (lambda log: log.retract([3], expected_seq=1), SeqConflictError, "not 1"),
    ],
)
def test_a_bad_edit_raises_and_writes_nothing(
    env: Env, edit: Any, error: type[Exception], match: str
) -> None:
    log = env.log()
    log.append_many([user("m1"), user("m2"), user("m3"), user("m4"), user("m5")])
    log.compact([user("s")], through_seq=2)  # 6: compact, 7: s
    log.retract([5])  # 8
    log.archive(3)  # 9
    before = snapshot(env, log)
    with pytest.raises(error, match=match):
        edit(log)
    assert snapshot(env, log) == before


def test_a_fork_copies_the_view_and_leaves_the_source_untouched(env: Env) -> None:
    log = env.log()
    log.append_many([user("a"), user("b"), user("c")])
    log.retract([2])  # 4
    log.add("user", "d")  # 5
    before = snapshot(env, log)
    target = new_id()
    fork = log.fork(target, at_seq=4)
    fork = SyncView(fork, env.loop) if isinstance(fork, AsyncMessageLog) else fork
    assert snapshot(env, log) == before
    assert [m.content for m in fork.all()] == ["a", "c"]
    first = fork.all(view="physical")[0]
    assert isinstance(first, EditEntry) and first.op == "fork"
    assert (first.source, first.source_seq, first.count) == (log.conversation, 4, 2)
    assert fork.add("user", "e") == 4 and [m.content for m in fork.all()] == ["a", "c", "e"]
    with pytest.raises(SeqConflictError):
        log.fork(target)  # it has entries now
    assert seqs(fork.all()) == [2, 3, 4]
    with pytest.raises(ValueError, match="differ"):
        log.fork(log.conversation)


def test_a_retried_edit_takes_effect_once(env: Env) -> None:
    log = env.log()
    log.append_many([user("a"), user("b"), user("c")])
    assert log.retract([1], idempotency_key="r1") == 4
    assert log.retract([1], idempotency_key="r1") == 4  # a replay, not an error
    first = log.pop(idempotency_key="p1")
    again = log.pop(idempotency_key="p1")  # the reply lost, say: the same message back
    assert first is not None and again is not None and first.seq == again.seq == 3
    assert log.count() == 5 and seqs(log.all()) == [2]


def test_follow_and_subscribe_deliver_edits_a_follower_can_fold(env: Env) -> None:
    log = env.log()
    log.append_many([user("a"), user("b")])
    log.pop()
    log.compact([user("s")], through_seq=1)
    log.archive(5)
    follower = LogView()
    for entry in _take(env, log, log.count()):
        follower.apply(entry)
    assert seqs(follower.rows) == seqs(log.all()) == [5]
    assert seqs(follower.archived()) == [5]


def _take(env: Env, log: Any, n: int) -> list[Entry]:
    """The first ``n`` entries of ``log.follow()``, for either client."""
    rows = log.follow()
    if not hasattr(rows, "__anext__"):
        return list(itertools.islice(rows, n))

    async def collect() -> list[Entry]:
        out: list[Entry] = []
        async for row in rows:
            out.append(row)
            if len(out) == n:
                break
        return out

    return env.loop.run_until_complete(collect())


def test_events_name_the_edit(real_backend: str, shared_server: Any) -> None:
    server: EphemeralServer = shared_server(real_backend)
    client = redis.Redis.from_url(server.url)
    log = MessageLog(client, new_id())
    log.add("user", "a")
    pubsub = client.pubsub()
    pubsub.subscribe(log.keys.channel)
    assert pubsub.get_message(timeout=1) is not None  # the subscribe confirmation
    log.compact([user("s")], through_seq=1)
    event = pubsub.get_message(timeout=2)
    assert event is not None
    payload = orjson.loads(event["data"])
    assert payload["first"] == 2 and payload["last"] == 3
    assert payload["edit"] == {"op": "compact", "through": 1, "count": 1}
    assert payload["messages"] == [user("s")]
    pubsub.close()


def test_windows_never_split_a_tool_call_from_its_result(env: Env) -> None:
    log = env.log()
    call = {"id": "c1", "name": "lookup", "args": {}}
    log.append_many(
        [
            user("q1"),
            {"role": "assistant", "content": "", "toolCalls": [call]},
            {"role": "tool", "content": "r", "toolCallId": "c1"},
            {"role": "assistant", "content": "a1"},
            user("q2"),
            {"role": "assistant", "content": "a2"},
        ]
    )
    assert seqs(log.last_turns(1)) == [5, 6]
    assert seqs(log.last_turns(2)) == [1, 2, 3, 4, 5, 6]
    assert seqs(log.last_turns(9)) == [1, 2, 3, 4, 5, 6]
    assert log.last_turns(0) == []
    # One token a message: a budget of 4 would start at the tool result (3): moved past it.
    assert seqs(log.last_tokens(4, lambda m: 1)) == [4, 5, 6]
    assert seqs(log.last_tokens(100, lambda m: 1)) == [1, 2, 3, 4, 5, 6]
    log.retract([6])
    assert seqs(log.last_turns(1)) == [5]


def test_edits_refresh_the_lifetime_of_every_key(env: Env) -> None:
    from datetime import timedelta

    log = env.log(ttl=timedelta(seconds=100))
    log.add("user", "a")
    log.add("user", "b")
    log.retract([1])
    log.add("user", "c")
    for key in keys_of(log):
        if env.raw.exists(key):
            assert 0 < env.raw.pttl(key) <= 100_000, key


@pytest.mark.parametrize("damaged", ["view", "hidden", "blobs", "usage"])
def test_an_append_of_a_log_with_a_lifetime_keeps_every_key_or_refuses_a_wrong_type(
    env: Env, damaged: str
) -> None:
    """Each append of a log with a lifetime names its view keys, blobs and usage totals
    (to refresh their expiry; a key named must exist, for cluster slot moves): one it
    finds gone is made again, and one of another type refuses the append, nothing
    written (the type read once: it also says whether the key must be made)."""
    from datetime import timedelta

    log = env.log(ttl=timedelta(seconds=100))
    log.add("user", "a")
    key = getattr(log.keys, damaged)
    env.raw.delete(key)
    log.add("user", "b")
    assert env.raw.exists(key) and 0 < env.raw.pttl(key) <= 100_000
    assert all(0 < env.raw.pttl(k) <= 100_000 for k in keys_of(log) if env.raw.exists(k))
    env.raw.delete(key)
    env.raw.set(key, "not mine")
    before = {k: env.raw.dump(k) for k in (log.keys.seq, log.keys.stream, key)}
    with pytest.raises(WrongTypeError):
        log.add("user", "c")
    assert {k: env.raw.dump(k) for k in before} == before  # (a read refuses it too)


# -- the views against the fold, over random edit sequences ------------------------------

OPS = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(1, 3)),
        st.tuples(st.just("retract"), st.integers(0, 50)),
        st.tuples(st.just("pop"), st.just(0)),
        st.tuples(st.just("compact"), st.integers(0, 50)),
        st.tuples(st.just("replace"), st.integers(0, 2)),
        st.tuples(st.just("archive"), st.integers(0, 50)),
    ),
    min_size=1,
    max_size=14,
)


def _apply(log: MessageLog, op: str, arg: int, fold: LogView) -> None:
    rows = fold.rows
    if op == "append":
        log.append_many([user(f"m{i}") for i in range(arg)])
    elif op == "retract" and rows:
        log.retract([rows[arg % len(rows)].seq])
    elif op == "pop":
        popped = log.pop()
        assert (popped.seq if popped else None) == (rows[-1].seq if rows else None)
    elif op == "compact":
        through = 0 if not rows or arg % 4 == 0 else rows[arg % len(rows)].seq
        log.compact([user("summary")], through_seq=through)
    elif op == "replace":
        log.replace([user(f"r{i}") for i in range(arg)])
    elif op == "archive" and rows:
        candidates = fold.active()
        if candidates:
            log.archive(candidates[arg % len(candidates)].seq)


@pytest.mark.parametrize("kind", ["redis", "fakeredis"])
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=OPS)
def test_views_equal_the_fold_of_the_physical_log(
    kind: str, shared_server: Any, ops: list[tuple[str, int]]
) -> None:
    if kind == "redis":
        client: redis.Redis = redis.Redis.from_url(shared_server("redis").url)
    else:
        import fakeredis

        client = fakeredis.FakeRedis()
    log = MessageLog(client, new_id(), page_size=3)  # small pages: paged view reads too
    fold = LogView()
    for op, arg in ops:
        _apply(log, op, arg, fold)
        fold = assert_views_match_the_fold(log)


# -- races ----------------------------------------------------------------------------


def _pop_all(url: str, conversation: str, out: Any) -> None:
    log = MessageLog(redis.Redis.from_url(url), conversation)
    while (row := log.pop()) is not None:
        out.put(row.seq)
    out.put(None)


def test_eight_processes_popping_pop_each_message_once(shared_server: Any) -> None:
    server: EphemeralServer = shared_server("redis")
    log = MessageLog(redis.Redis.from_url(server.url), new_id())
    total = 200
    log.append_many([user(f"m{i}") for i in range(total)])
    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    workers = [
        context.Process(target=_pop_all, args=(server.url, log.conversation, out)) for _ in range(8)
    ]
    for worker in workers:
        worker.start()
    popped: list[int] = []
    finished = 0
    while finished < len(workers):
        seq = out.get(timeout=60)
        if seq is None:
            finished += 1
        else:
            popped.append(seq)
    for worker in workers:
        worker.join(timeout=30)
    assert sorted(popped) == list(range(1, total + 1))  # each once: none twice, none lost
    assert log.all() == [] and log.count() == 2 * total
    assert_views_match_the_fold(log)


@pytest.mark.parametrize(
    "damage, error",
    [
        (lambda raw, keys: raw.set(keys.view, "x"), WrongTypeError),
        (lambda raw, keys: raw.hset(keys.view, "segments", "garbage"), CorruptLogError),
        (lambda raw, keys: raw.hset(keys.view, "segments", "1-4"), CorruptLogError),  # none open
        (lambda raw, keys: (raw.delete(keys.hidden), raw.set(keys.hidden, "x")), WrongTypeError),
    ],
)
def test_damaged_view_keys_are_an_error_and_nothing_is_written(
    env: Env, damage: Any, error: type[Exception]
) -> None:
    log = env.log()
    log.append_many([user("a"), user("b"), user("c")])
    log.retract([2])
    damage(env.raw, log.keys)
    before = snapshot(env, log)
    calls: list[Callable[[], object]] = [
        lambda: log.pop(),
        lambda: log.retract([1]),
        lambda: log.archive(1),
        lambda: log.all(),
        lambda: log.last(2),
        lambda: log.count(view="active"),
    ]
    for call in calls:
        with pytest.raises(error):
            call()
    assert snapshot(env, log) == before
    if env.raw.type(log.keys.view) in (b"hash", b"none"):
        assert seqs(log.all(view="physical")) == [1, 2, 3, 4]  # the entries are still readable
    else:  # the view hash holds the log's first seq (after a trim): a read needs it
        with pytest.raises(WrongTypeError):
            log.all(view="physical")


# -- attributes --------------------------------------------------------------------------


def test_attributes_change_with_the_entries_they_go_with(env: Env) -> None:
    log = env.log()
    assert log.attrs() == Attributes({}, 0)
    assert log.append_many([user("a")], attrs={"revision": "r1", "title": "t"}) == 2
    assert log.attrs() == Attributes({"revision": "r1", "title": "t"}, 2)
    assert seqs(log.all()) == [2]  # the attrs entry (1) is in no view
    first = log.all(view="physical")[0]
    assert isinstance(first, EditEntry) and first.op == "attrs"
    assert first.attrs == {"revision": "r1", "title": "t"}
    # A compare-and-set: only if nobody wrote since the attributes were read.
    seen = log.attrs()
    assert log.set_attrs({"revision": "r2", "title": None}, expected_seq=seen.last_seq) == 3
    before = snapshot(env, log)
    with pytest.raises(SeqConflictError):
        log.set_attrs({"revision": "stale"}, expected_seq=seen.last_seq)
    assert snapshot(env, log) == before
    # Any edit carries them too, in its own entry.
    popped = log.pop(attrs={"revision": "r3"})
    assert popped is not None and popped.seq == 2
    assert log.attrs() == Attributes({"revision": "r3"}, 4)
    assert log.all(view="physical")[-1].attrs == {"revision": "r3"}
    fork = log.fork(new_id(), attrs={"revision": "f1"})
    fork = SyncView(fork, env.loop) if isinstance(fork, AsyncMessageLog) else fork
    assert fork.attrs() == Attributes({"revision": "f1"}, 1)
    assert LogView(log.all(view="physical")).attrs == log.attrs().values


@pytest.mark.parametrize(
    "attrs",
    [{}, {"": "x"}, {"k": 1}, {"k" * 257: "x"}, {"k": "\ud800"}, ["k"]],
)
def test_bad_attributes_raise_and_write_nothing(env: Env, attrs: Any) -> None:
    log = env.log()
    log.add("user", "a")
    before = snapshot(env, log)
    with pytest.raises(ValueError):
        log.set_attrs(attrs)
    with pytest.raises(ValueError):
        log.append_many([user("b")], attrs=attrs)
    assert snapshot(env, log) == before
