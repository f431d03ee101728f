"""Exactly-once appends: idempotency keys, and retries that never duplicate."""

from __future__ import annotations

import asyncio
import dataclasses
import multiprocessing
import socket
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
import redis
import redis.asyncio

from redis_msglog import (
    NO_RETRY,
    AppendInDoubtError,
    AsyncMessageLog,
    IdempotencyConflictError,
    MessageLog,
    RetryPolicy,
    ServerUnavailableError,
    StoredMessage,
)
from redis_msglog._core.steps import Refused
from redis_msglog._lua.contract import AppendReply, error_for
from redis_msglog.testing import EphemeralServer

from ..conftest import Env, new_id
from ..support.history import Append, History
from ..support.proxy import ReplyDroppingProxy

pytestmark = pytest.mark.slow  # lost replies through a proxy, many processes

FAST_RETRY = RetryPolicy(attempts=5, backoff=0.01, max_backoff=0.05)


def _records(env: Env, log: Any) -> list[bytes]:
    return sorted(env.raw.scan_iter(match=log.keys.idempotency_record("*").replace("{", "[{]")))


def test_same_key_twice_writes_once_and_returns_the_first_seq(env: Env) -> None:
    fired: list[list[StoredMessage]] = []
    log = env.log(on_append=fired.append)
    log.add("user", "before")
    assert log.add("user", "hello", idempotency_key="k1") == 2
    assert log.add("user", "hello", idempotency_key="k1") == 2
    assert log.append({"role": "user", "content": "hello"}, idempotency_key="k1") == 2
    assert [(m.seq, m.content) for m in log.all()] == [(1, "before"), (2, "hello")]
    assert [[m.seq for m in rows] for rows in fired] == [[1], [2]]  # no hook for replays
    assert log.add("user", "later") == 3


def test_same_key_for_a_batch(env: Env) -> None:
    log = env.log()
    batch = [{"role": "user", "content": str(i)} for i in range(3)]
    assert log.append_many(batch, idempotency_key="batch-1") == 3
    assert log.append_many(batch, idempotency_key="batch-1") == 3
    assert log.count() == 3


@pytest.mark.parametrize(
    "second",
    [
        [{"role": "user", "content": "different"}],
        [{"role": "user", "content": "hello"}, {"role": "user", "content": "hello"}],
    ],
    ids=["other content", "other length"],
)
def test_same_key_for_a_different_batch_is_refused(env: Env, second: list[Any]) -> None:
    log = env.log()
    log.append_many([{"role": "user", "content": "hello"}], idempotency_key="k")
    with pytest.raises(IdempotencyConflictError, match="different batch"):
        log.append_many(second, idempotency_key="k")
    assert [m.content for m in log.all()] == ["hello"]


def test_keys_are_per_conversation(env: Env) -> None:
    first, second = env.log(), env.log()
    first.add("user", "a")
    assert first.add("user", "b", idempotency_key="shared") == 2
    assert second.add("user", "b", idempotency_key="shared") == 1
    assert first.count() == 2 and second.count() == 1


def test_the_window_expires(env: Env) -> None:
    # 1 s: long enough that a loaded machine still looks at the record before it expires.
    window = timedelta(seconds=1)
    log = env.log(idempotency_window=window)
    assert log.add("user", "x", idempotency_key="k") == 1
    (record,) = _records(env, log)
    assert 0 < env.raw.pttl(record) <= 1000
    assert log.add("user", "x", idempotency_key="k") == 1
    time.sleep(1.3)
    assert log.add("user", "x", idempotency_key="k") == 2  # forgotten: a new append


def test_appends_without_a_key_keep_a_producer_record_not_a_key_per_append(env: Env) -> None:
    log = env.log()
    for i in range(40):
        log.add("user", str(i))
    assert _records(env, log) == []
    (value,) = env.raw.hgetall(log.keys.producers).values()
    expires, count, dropped, *results = _text(value).split(" ")
    (pseq, last_seq) = map(int, results[0].split(","))  # pseq: the process's call number
    assert (count, len(results), last_seq) == ("1", 1, 40)  # one call at a time
    assert dropped == f"{pseq - 1},0"  # the highest call whose result was dropped
    seconds, micros = env.raw.time()
    now_ms = int(seconds) * 1000 + int(micros) // 1000
    window = RetryPolicy().generated_key_ttl / timedelta(milliseconds=1)
    assert now_ms + window - 60_000 < int(expires) <= now_ms + window
    other = env.log(log.conversation)  # another log object of the process: its producer
    other.add("user", "40")
    (value,) = env.raw.hgetall(log.keys.producers).values()
    assert _text(value).split(" ")[1:] == ["1", f"{pseq},0", f"{pseq + 1},41"]
    without = env.log(retry=NO_RETRY)
    without.add("user", "x")
    assert _records(env, without) == [] and not env.raw.exists(without.keys.producers)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _try(
    log: Any, pseq: int, *, look_up: bool, content: str = "m", floor: int | None = None
) -> Any:
    """Send one try of call ``pseq`` of ``log``'s producer straight to the script (with
    ``floor`` as its lowest call in flight): its reply (last seq, at, replayed, writer),
    or the library's error for a refusal."""
    core = log._core if isinstance(log, MessageLog) else log.inner._core
    prepared = core._prepare(core.batch([{"role": "user", "content": content}]), None, None)
    prepared.settle()  # sent by hand below: not one of the process producer's calls
    call = dataclasses.replace(prepared.call, pseq=pseq, look_up=look_up, floor=floor)
    try:
        return AppendReply.parse(log._run(core._eval(call, None)))
    except Refused as refused:
        return error_for(refused, core.keys)


def test_a_producer_s_calls_may_commit_out_of_order(env: Env) -> None:
    log = env.log()
    assert _try(log, 2, look_up=False).last_seq == 1  # call 2 overtakes call 1
    assert _try(log, 1, look_up=False).last_seq == 2  # call 1's first try: written
    again = _try(log, 1, look_up=True)  # its re-send: the result, nothing written
    assert (again.last_seq, again.replayed, again.writer) == (2, True, "")
    entries: Any = env.raw.xrange(log.keys.stream, "2", "2")
    assert entries[0][0] == f"2-{again.at_micros}".encode()  # the commit's own time
    assert _try(log, 2, look_up=True).last_seq == 1
    assert log.count() == 2
    (value,) = env.raw.hgetall(log.keys.producers).values()
    assert _text(value).split(" ")[1:] == ["2", "0,0", "1,2", "2,1"]  # none dropped


def test_a_sequential_call_overtaken_by_a_later_one_keeps_both_results(env: Env) -> None:
    """Call 1 is its producer's lowest in flight (floor 1): its first try replaces the
    sequential field without reading it. Call 2, begun while call 1 was in flight,
    commits first, into the concurrent field (``<id>+``), which call 1's write leaves
    alone: a re-send of either is answered from its own result, nothing written twice."""
    log = env.log()
    assert _try(log, 2, look_up=False, content="2", floor=1).last_seq == 1
    assert _try(log, 1, look_up=False, content="1", floor=1).last_seq == 2
    for pseq, seq in ((2, 1), (1, 2)):
        again = _try(log, pseq, look_up=True, floor=1)
        assert (again.last_seq, again.replayed) == (seq, True)
    assert [m.content for m in log.all()] == ["2", "1"]
    held = {
        _text(k): _text(v).split(" ")[1:] for k, v in env.raw.hgetall(log.keys.producers).items()
    }
    (sequential,) = [name for name in held if not name.endswith("+")]
    assert held == {sequential: ["1", "0,0", "1,2"], f"{sequential}+": ["1", "0,0", "2,1"]}
    # Call 3, the lowest in flight once both settled: its result replaces call 1's, and
    # calls 1 and 2 are dropped (neither is sent again).
    assert _try(log, 3, look_up=False, content="3", floor=3).last_seq == 3
    stale = _try(log, 1, look_up=True)
    assert isinstance(stale, AppendInDoubtError)
    assert _try(log, 2, look_up=True).last_seq == 1  # still held in the concurrent field
    assert log.count() == 3


def test_a_producer_keeps_the_results_its_calls_in_flight_may_ask_for(env: Env) -> None:
    log = env.log()
    for pseq in range(1, 6):  # five calls in flight at once
        _try(log, pseq, look_up=False, content=str(pseq))
    _try(log, 7, look_up=False, floor=4)  # calls below 4 settled; 6 never reaches the server
    stale = _try(log, 2, look_up=True)  # dropped: it may have committed, cannot tell
    assert isinstance(stale, AppendInDoubtError) and stale.idempotency_key is None
    assert "no longer holds the result of call 2" in str(stale) and "read the log" in str(stale)
    assert "MSGLOG_" not in str(stale)  # the script's code is not for the reader
    assert _try(log, 4, look_up=True).last_seq == 4  # the lowest in flight, replayed
    assert _try(log, 6, look_up=True).last_seq == 7  # above it, never written: written now
    assert _try(log, 6, look_up=True).replayed  # ... and now it is
    assert log.count() == 7
    (value,) = env.raw.hgetall(log.keys.producers).values()
    assert _text(value).split(" ")[1:] == ["4", "3,0", "4,4", "5,5", "6,7", "7,6"]


def test_a_call_whose_first_try_never_arrived_is_written_after_later_ones(env: Env) -> None:
    """Threads and tasks of a process share its producer, so its calls commit in any
    order: call 1's first try lost on the way (never run) while calls 2 and 3 committed.
    Its re-send is not in doubt (no result of call 1 was ever dropped): it is written."""
    log = env.log()
    for pseq in (2, 3):
        _try(log, pseq, look_up=False, content=str(pseq), floor=1)
    resent = _try(log, 1, look_up=True, content="1", floor=1)
    assert (resent.last_seq, resent.replayed) == (3, False)
    assert [m.content for m in log.all()] == ["2", "3", "1"]
    # A value an earlier version wrote (no marker): anything below its lowest may be gone.
    key = log.keys.producers
    (field,) = env.raw.hkeys(key)
    env.raw.hset(key, field, "99999999999999 2 5,4 6,5")
    assert isinstance(_try(log, 4, look_up=True), AppendInDoubtError)
    assert _try(log, 7, look_up=True).last_seq == 4  # above it: never written
    (value,) = env.raw.hgetall(key).values()
    assert _text(value).split(" ")[1:] == ["3", "4,0", "5,4", "6,5", "7,4"]


def test_a_producer_keeps_at_most_64_results_and_refuses_to_guess(env: Env) -> None:
    log = env.log()
    for pseq in [*range(1, 10), *range(11, 71)]:  # 69 in flight; call 10 never arrives
        _try(log, pseq, look_up=False)
    assert isinstance(_try(log, 5, look_up=True), AppendInDoubtError)  # dropped
    assert _try(log, 6, look_up=True).last_seq == 6  # the lowest of the 64 held
    assert _try(log, 10, look_up=True).last_seq == 70  # within them, never written
    assert log.count() == 70


def test_idle_producers_are_pruned_by_every_write(env: Env) -> None:
    """No new writer joins: the one writer's own appends drop the idle producers (each
    write whose seq passes a multiple of 10 looks at 40 fields, at most one of them its
    own), and never a live one."""
    log = env.log()
    log.add("user", "first")
    idle: dict[Any, Any] = {f"{i:012x}": "1 1 1,1" for i in range(60)}  # expired long ago
    env.raw.hset(log.keys.producers, mapping=idle)
    for _ in range(20):  # seqs 2-21: pruned at 10 (40 of the 61) and 20 (the rest)
        env.log(log.conversation).add("user", "x")
    assert len(env.raw.hkeys(log.keys.producers)) == 1  # only this process's
    live: dict[Any, Any] = {f"{i:012x}": "99999999999999 1 1,1" for i in range(100, 103)}
    env.raw.hset(log.keys.producers, mapping=live)
    for _ in range(10):
        env.log(log.conversation).add("user", "y")
    left = {_text(k) for k in env.raw.hkeys(log.keys.producers)}
    assert set(live) < left and len(left) == 4  # the live ones kept


@pytest.mark.parametrize("key", ["", 42, "k" * 257], ids=["empty", "not a str", "too long"])
def test_bad_keys_are_refused_before_sending(env: Env, key: Any) -> None:
    log = env.log()
    with pytest.raises(ValueError, match="idempotency_key"):
        log.add("user", "x", idempotency_key=key)
    assert log.count() == 0


@pytest.mark.parametrize(
    "options",
    [
        {"retry": "three"},
        {"idempotency_window": 5},
        {"idempotency_window": timedelta(0)},
    ],
)
def test_bad_options_are_refused(env: Env, options: dict[str, Any]) -> None:
    with pytest.raises((TypeError, ValueError)):
        env.log(**options)


@pytest.mark.parametrize(
    "policy",
    [
        {"attempts": -1},
        {"attempts": 1.5},
        {"backoff": -1},
        {"max_backoff": 0.001},
        {"deadline": -1},
        {"deadline": True},
        {"deadline": "30"},
    ],
)
def test_bad_retry_policies_are_refused(policy: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        RetryPolicy(**policy)


def test_retry_deadline_and_attempts_bound_the_re_sends() -> None:
    policy = RetryPolicy(backoff=0.1, max_backoff=0.4, deadline=1.0)
    assert 0.05 <= (policy.pause_before(1, elapsed=0.0) or 0) <= 0.1
    assert policy.pause_before(5, elapsed=0.9) == pytest.approx(0.1)  # the last, at 1 s
    assert policy.pause_before(5, elapsed=1.0) is None
    assert policy.pause_before(5000, elapsed=0.5) is not None  # no cap on attempts
    assert RetryPolicy(attempts=2).pause_before(3, elapsed=0.0) is None
    assert NO_RETRY.pause_before(1, elapsed=0.0) is None


def _append_with_shared_key(
    url: str, conversation: str, worker: int, start: Any, results: Any
) -> None:
    log = MessageLog(redis.Redis.from_url(url), conversation)
    history = History(conversation)
    start.wait()
    with history.append(f"p{worker}", ["the one answer"]) as op:
        op.committed(log.add("assistant", "the one answer", idempotency_key="shared-key"))
    results.put(history.records)


def test_same_key_from_many_processes_at_once(
    real_backend: str, shared_server: Callable[[str], EphemeralServer]
) -> None:
    url = shared_server(real_backend).url
    conversation = new_id()
    context = multiprocessing.get_context("spawn")
    start, results = context.Event(), context.Queue()
    processes = [
        context.Process(target=_append_with_shared_key, args=(url, conversation, w, start, results))
        for w in range(8)
    ]
    for process in processes:
        process.start()
    start.set()
    history = History(conversation)
    for _ in processes:
        history.extend(results.get(timeout=60))
    for process in processes:
        process.join(timeout=60)
        assert process.exitcode == 0
    appends = [r for r in history.records if isinstance(r, Append)]
    assert len(appends) == len(history.records)  # the workers only append
    assert [(a.outcome, a.last_seq) for a in appends] == [("ok", 1)] * 8
    assert history.check(redis.Redis.from_url(url)).length == 1  # the one answer, once


# -- lost replies, through a proxy that drops them ---------------------------------------


@pytest.mark.parametrize("after_execute", [True, False], ids=["reply lost", "request lost"])
def test_many_lost_replies_in_a_row_still_write_exactly_once(
    real_backend: str,
    flavor: str,
    after_execute: bool,
    shared_server: Callable[[str], EphemeralServer],
) -> None:
    server = shared_server(real_backend)
    conversation = new_id()
    history = History(conversation)
    fired: list[int] = []
    with ReplyDroppingProxy(server.port, after_execute=after_execute) as proxy:
        seqs = []
        reader = MessageLog(redis.Redis.from_url(proxy.url), conversation)
        for i in range(20):
            proxy.drops = i % 5  # 0 to 4 failures in a row; the policy allows 5
            with history.append("writer", [f"m{i}"]) as op:
                seqs.append(
                    op.committed(
                        _append(flavor, proxy.url, conversation, f"m{i}", on_append=fired.append)
                    )
                )
            with history.read("reader", after=max(0, i - 2)) as read:  # through the proxy too
                read.returned(reader.read(after=max(0, i - 2)))
        assert proxy.dropped == sum(i % 5 for i in range(20))
    # Acked once each at the seq returned, nothing else in the log: exactly m0..m19.
    assert history.check(redis.Redis.from_url(server.url)).length == 20
    assert seqs == list(range(1, 21))
    assert fired == list(range(1, 21))  # the hook fired once per append, replay or not


def test_lost_replies_beyond_the_policy_raise_in_doubt_with_a_key_that_is_safe_to_retry(
    real_backend: str, flavor: str, shared_server: Callable[[str], EphemeralServer]
) -> None:
    server = shared_server(real_backend)
    conversation = new_id()
    history = History(conversation)
    with ReplyDroppingProxy(server.port) as proxy:
        proxy.drops = 100
        with (
            pytest.raises(AppendInDoubtError, match="may have committed") as caught,
            history.append("writer", ["once"]) as op,
        ):
            op.committed(_append(flavor, proxy.url, conversation, "once"))
        assert FAST_RETRY.attempts is not None
        assert proxy.dropped == FAST_RETRY.attempts + 1
        key = caught.value.idempotency_key
        assert key is not None
        proxy.drops = 0
        with history.append("writer", ["once"]) as op:  # the same message, re-sent
            op.committed(_append(flavor, proxy.url, conversation, "once", idempotency_key=key))
        assert op.last_seq == 1
    summary = history.check(redis.Redis.from_url(server.url))
    assert (summary.length, summary.in_doubt_written) == (1, 1)  # written once, not twice


@pytest.mark.parametrize("committed", [True, False], ids=["reply lost", "request lost"])
def test_an_in_doubt_key_stays_good_while_its_log_goes_on_appending(
    real_backend: str, committed: bool, shared_server: Callable[[str], EphemeralServer]
) -> None:
    server = shared_server(real_backend)
    conversation = new_id()
    history = History(conversation)
    MessageLog(redis.Redis.from_url(server.url), new_id()).add("user", "x")  # script cached
    with ReplyDroppingProxy(server.port, after_execute=committed) as proxy:
        log = MessageLog(redis.Redis.from_url(proxy.url), conversation, retry=FAST_RETRY)
        proxy.drops = 100
        with pytest.raises(AppendInDoubtError) as caught, history.append("w", ["doubt"]) as op:
            op.committed(log.add("user", "doubt"))
        proxy.drops = 0
        for i in range(40):  # far more than a producer's window of results
            with history.append("w", [f"after {i}"]) as op:
                op.committed(log.add("user", f"after {i}"))
        key = caught.value.idempotency_key
        assert key is not None
        elsewhere = MessageLog(redis.Redis.from_url(server.url), conversation)
        with history.append("w", ["doubt"]) as op:
            op.committed(elsewhere.add("user", "doubt", idempotency_key=key))
        assert op.last_seq == (1 if committed else 41)
        with pytest.raises(IdempotencyConflictError):
            elsewhere.add("user", "not the same", idempotency_key=key)
    summary = history.check(redis.Redis.from_url(server.url))
    assert (summary.length, summary.in_doubt_written) == (41, 1)  # written once, not twice


def test_many_concurrent_calls_of_one_asyncio_log_losing_replies_write_once(
    real_backend: str, shared_server: Callable[[str], EphemeralServer]
) -> None:
    """40 calls of one log object in flight at once (one producer), 10 replies lost: every
    re-send is answered from the producer's results, however many later calls committed
    meanwhile, and nothing is written twice."""
    server = shared_server(real_backend)
    conversation = new_id()
    MessageLog(redis.Redis.from_url(server.url), new_id()).add("user", "x")  # script cached

    async def run(url: str) -> list[int]:
        client = redis.asyncio.Redis.from_url(url, max_connections=100)
        log = AsyncMessageLog(client, conversation, retry=FAST_RETRY)
        try:
            return list(await asyncio.gather(*(log.add("user", str(i)) for i in range(40))))
        finally:
            await client.aclose()

    with ReplyDroppingProxy(server.port) as proxy:
        proxy.drops = 10
        seqs = asyncio.run(run(proxy.url))
        assert proxy.dropped == 10
    rows = MessageLog(redis.Redis.from_url(server.url), conversation).all()
    assert sorted(seqs) == list(range(1, 41)) == [m.seq for m in rows]
    assert sorted(m.content for m in rows) == sorted(str(i) for i in range(40))
    assert {m.content: m.seq for m in rows} == {str(i): seq for i, seq in enumerate(seqs)}


@pytest.mark.parametrize("drops", [0, 1, 3])
def test_a_replay_never_fires_the_hook_whatever_happened_to_its_replies(
    real_backend: str, flavor: str, drops: int, shared_server: Callable[[str], EphemeralServer]
) -> None:
    """The second call with a used key writes nothing; its lost-and-re-sent replies must
    not make it look like its own commit (hooks would see the seq twice)."""
    server = shared_server(real_backend)
    conversation = new_id()
    fired: list[int] = []
    with ReplyDroppingProxy(server.port) as proxy:
        first = _append(
            flavor, proxy.url, conversation, "once", idempotency_key="k", on_append=fired.append
        )
        proxy.drops = drops  # the second call's first tries lose their replies
        again = _append(
            flavor, proxy.url, conversation, "once", idempotency_key="k", on_append=fired.append
        )
        assert proxy.dropped == drops
    assert first == again == 1
    assert fired == [1]  # the first call's hook only
    # And a call whose own first try committed with its reply lost is still fresh.
    with ReplyDroppingProxy(server.port) as proxy:
        proxy.drops = 1
        third = _append(
            flavor, proxy.url, conversation, "twice", idempotency_key="k2", on_append=fired.append
        )
        assert proxy.dropped == 1
    assert third == 2 and fired == [1, 2]


def test_no_resend_once_the_record_may_have_expired(
    real_backend: str, shared_server: Callable[[str], EphemeralServer]
) -> None:
    server = shared_server(real_backend)
    conversation = new_id()
    slow = RetryPolicy(attempts=5, backoff=0.2, max_backoff=0.2)
    history = History(conversation)
    with ReplyDroppingProxy(server.port) as proxy:
        proxy.drops = 1
        log = MessageLog(
            redis.Redis.from_url(proxy.url),
            conversation,
            retry=slow,
            idempotency_window=timedelta(milliseconds=100),  # gone before the first re-send
        )
        with pytest.raises(AppendInDoubtError, match="1 try;"), history.append("w", ["once"]):
            log.add("user", "once", idempotency_key="k")
    summary = history.check(redis.Redis.from_url(server.url))
    assert (summary.length, summary.in_doubt_written) == (1, 1)  # the one try ran, once


def test_unreachable_server_after_retries_says_nothing_was_written(flavor: str) -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        url = f"redis://127.0.0.1:{probe.getsockname()[1]}/0"
    with pytest.raises(ServerUnavailableError, match=r"6 tries.*Nothing was written") as caught:
        _append(flavor, url, new_id(), "x")
    assert not isinstance(caught.value, AppendInDoubtError)


def _append(
    flavor: str,
    url: str,
    conversation: str,
    content: str,
    *,
    idempotency_key: str | None = None,
    on_append: Callable[[int], object] | None = None,
) -> int:
    """One append through a fresh client of the given flavor, under FAST_RETRY."""

    def hook(rows: list[StoredMessage]) -> None:
        if on_append is not None:
            on_append(rows[0].seq)

    if flavor == "sync":
        client = redis.Redis.from_url(url, socket_connect_timeout=2)
        log = MessageLog(client, conversation, hook, retry=FAST_RETRY)
        try:
            return log.add("user", content, idempotency_key=idempotency_key)
        finally:
            client.close()

    async def run() -> int:
        client = redis.asyncio.Redis.from_url(url, socket_connect_timeout=2)
        alog = AsyncMessageLog(client, conversation, hook, retry=FAST_RETRY)
        try:
            return await alog.add("user", content, idempotency_key=idempotency_key)
        finally:
            await client.aclose()

    return asyncio.run(run())
