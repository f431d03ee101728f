"""Redis Cluster under faults: every read and an append while a slot move is held open
mid-way, slot moves under writers and readers, every node down, and appends through a
crash failover (kill -9 of a primary)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import redis.asyncio.cluster
from redis.crc import key_slot

from redis_msglog import (
    AppendInDoubtError,
    AsyncMessageLog,
    ConversationKeys,
    MessageLog,
    MessageLogError,
    RetryPolicy,
    ServerUnavailableError,
)
from redis_msglog.testing import EphemeralServer

from ..conftest import new_id, require_binary
from ..support.cluster import LocalCluster

pytestmark = pytest.mark.cluster

Call = Callable[[Any], Any]  # the value of a sync call, or the awaited coroutine of an async one


def slot_of(log: Any) -> int:
    return key_slot(log.keys.seq.encode())


@contextmanager
def held_move(cluster: LocalCluster, slot: int) -> Iterator[Callable[..., None]]:
    """A slot move stopped mid-way: ``IMPORTING`` on the target, ``MIGRATING`` on the
    source, and no key moved until the caller ``migrate(*keys)``s them. On exit the move
    completes (the remaining keys, then ``SETSLOT NODE`` on every primary)."""
    source = cluster.owner(slot)
    target = next(p for p in cluster.primaries if p.port != source.port)
    src, dst = cluster.admin(source), cluster.admin(target)
    dst.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", cluster.node_id(source))
    src.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", cluster.node_id(target))

    def migrate(*keys: str) -> None:
        src.execute_command("MIGRATE", "127.0.0.1", target.port, "", 0, 5000, "KEYS", *keys)

    try:
        yield migrate
    finally:
        while keys := src.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 100):
            migrate(*keys)
        for server in cluster.primaries:
            cluster.admin(server).execute_command(
                "CLUSTER", "SETSLOT", slot, "NODE", cluster.node_id(target)
            )


class ThreadResult:
    """``function()`` run in a thread: ``done()`` and ``result()``, like a future."""

    def __init__(self, function: Callable[[], Any]) -> None:
        self._value: list[Any] = []
        self._thread = threading.Thread(target=lambda: self._value.append(function()))
        self._thread.start()

    def done(self) -> bool:
        return not self._thread.is_alive()

    def result(self) -> Any:
        self._thread.join(timeout=60)
        return self._value[0]


def check_every_read(log: Any, call: Call, count: int) -> None:
    """Every read form on a log of ``count`` messages with contents "0", "1", ..."""
    assert [m.seq for m in call(log.all())] == list(range(1, count + 1))
    assert [m.seq for m in call(log.read(after=10))] == list(range(11, count + 1))
    assert [m.content for m in call(log.read(after=10, limit=5))] == ["10", "11", "12", "13", "14"]
    assert [m.seq for m in call(log.read(after=3, limit=20))] == list(range(4, 24))  # > a page
    assert call(log.last()).seq == count
    assert [m.seq for m in call(log.last(9))] == list(range(count - 8, count + 1))
    assert call(log.count()) == count
    follower = log.follow(after=count - 3)
    if isinstance(follower, Generator):
        assert [next(follower).seq for _ in range(3)] == [count - 2, count - 1, count]
        follower.close()
    else:
        assert [call(anext(follower)).seq for _ in range(3)] == [count - 2, count - 1, count]
        call(follower.aclose())


@pytest.mark.parametrize("flavor", ["sync", "async"])
def test_every_read_and_appends_while_a_slot_move_is_held_open(
    flavor: str, shared_cluster: Callable[[], LocalCluster]
) -> None:
    """Reads of every form are served, correctly, in both halves of a move: with only the
    counter on the importing node (each command must go to the node holding its key), and
    with the counter and the stream there. An append cannot run while its keys are split
    between the nodes (the producers hash is still on the source: TRYAGAIN): it waits, and
    raises ServerUnavailableError at its deadline, writing nothing."""
    cluster = shared_cluster()
    loop = asyncio.new_event_loop()
    if flavor == "sync":
        client: Any = cluster.client(socket_timeout=5)
        call: Call = lambda value: value  # noqa: E731
        make: Callable[..., Any] = MessageLog  # a log of either shell, used through call
    else:
        client = redis.asyncio.cluster.RedisCluster(
            host="127.0.0.1", port=cluster.port, socket_timeout=5
        )
        call, make = loop.run_until_complete, AsyncMessageLog
    conversation = new_id()
    log = make(client, conversation, page_size=7)  # several pages per read
    impatient = make(client, conversation, retry=RetryPolicy(deadline=1.0))
    call(log.append_many([{"role": "user", "content": str(i)} for i in range(30)]))
    call(log.add("user", "30"))
    try:
        with held_move(cluster, slot_of(log)) as migrate:
            migrate(log.keys.seq)
            check_every_read(log, call, 31)
            migrate(log.keys.stream)
            check_every_read(log, call, 31)
            started = time.monotonic()
            with pytest.raises(ServerUnavailableError, match="Nothing was written") as caught:
                call(impatient.add("user", "refused"))
            waited = time.monotonic() - started
            assert 1.0 <= waited < 5, waited
            assert "rehashing" in str(caught.value)  # TRYAGAIN
            assert not isinstance(caught.value, AppendInDoubtError)
            check_every_read(log, call, 31)  # nothing was written
            # With the default deadline (30 s) an append waits for the move to complete.
            started = time.monotonic()
            if flavor == "async":
                waiting: Any = loop.create_task(log.add("user", "31"))
                loop.run_until_complete(asyncio.sleep(0.5))  # sent, and refused so far
            else:
                waiting = ThreadResult(lambda: log.add("user", "31"))
                time.sleep(0.5)
            assert not waiting.done()
        # The move completed on leaving the block.
        assert (call(waiting) if flavor == "async" else waiting.result()) == 32
        assert time.monotonic() - started >= 0.5
        assert [m.content for m in call(log.all())] == [str(i) for i in range(32)]
    finally:
        if flavor == "async":
            loop.run_until_complete(client.aclose())
        loop.close()


def test_appends_do_not_wait_for_a_slot_move_to_complete(
    shared_cluster: Callable[[], LocalCluster],
) -> None:
    """Issue 18 item 3: an append names only keys that exist once the conversation does
    (no key per append), so once they are all on the importing node it is served there,
    mid-move, sync and asyncio, with no duplicate when its re-sends are replays."""
    cluster = shared_cluster()
    log = MessageLog(cluster.client(), new_id(), retry=RetryPolicy(deadline=1.0))
    log.add("user", "0")
    loop = asyncio.new_event_loop()
    client = redis.asyncio.cluster.RedisCluster(host="127.0.0.1", port=cluster.port)
    alog = AsyncMessageLog(client, log.conversation, retry=RetryPolicy(deadline=1.0))
    try:
        loop.run_until_complete(alog.add("user", "1"))
        with held_move(cluster, slot_of(log)) as migrate:
            migrate(log.keys.seq, log.keys.stream, log.keys.producers)
            started = time.monotonic()
            assert log.add("user", "2") == 3
            assert loop.run_until_complete(alog.add("user", "3")) == 4
            assert log.append_many([{"role": "user", "content": "4"}] * 2) == 6
            assert time.monotonic() - started < 0.5  # served at once, not after retries
        assert [m.content for m in log.all()] == ["0", "1", "2", "3", "4", "4"]
    finally:
        loop.run_until_complete(client.aclose())
        loop.close()


# -- slot moves under writers and readers ------------------------------------------------


class Traffic:
    """Writer threads appending to their own conversations, and for each conversation
    reader threads running every read form (one sync, one asyncio) and a follower; any
    read error or inconsistent answer is recorded."""

    def __init__(self, cluster: LocalCluster, conversations: int) -> None:
        self.cluster = cluster
        self.client = cluster.client(socket_timeout=5)
        self.ids = [new_id() for _ in range(conversations)]
        self.acked: dict[str, dict[int, str]] = {c: {} for c in self.ids}
        self.problems: list[str] = []
        self.reads = 0
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=target, args=(c,))
            for c in self.ids
            for target in (self._write, self._read_sync, self._read_async, self._follow)
        ]

    def _write(self, conversation: str) -> None:
        log = MessageLog(self.client, conversation)
        i = 0
        while not self._stop.is_set():
            try:
                self.acked[conversation][log.add("user", str(i))] = str(i)
            except MessageLogError as exc:
                self.problems.append(f"append {conversation}:{i}: {exc!r}")
            i += 1

    def _read_sync(self, conversation: str) -> None:
        log = MessageLog(self.client, conversation, page_size=20)
        self._read_every_form(lambda value: value, log)

    def _read_async(self, conversation: str) -> None:
        loop = asyncio.new_event_loop()  # this thread's own, run one read at a time
        client = redis.asyncio.cluster.RedisCluster(
            host="127.0.0.1", port=self.cluster.port, socket_timeout=5
        )
        try:
            log = AsyncMessageLog(client, conversation, page_size=20)
            self._read_every_form(loop.run_until_complete, log)
        finally:
            loop.run_until_complete(client.aclose())
            loop.close()

    def _read_every_form(self, call: Call, log: Any) -> None:
        seen = 0  # the count is never seen going back
        while not self._stop.is_set():
            try:
                rows = call(log.all())
                after = call(log.read(after=seen // 2))
                limited = call(log.read(after=seen // 2, limit=5))
                last, last_3, count = call(log.last()), call(log.last(3)), call(log.count())
            except MessageLogError as exc:
                self.problems.append(f"read {log.conversation}: {exc!r}")
                continue
            self.reads += 6
            checks = {
                "all": [m.seq for m in rows] == list(range(1, len(rows) + 1)) and len(rows) >= seen,
                "read(after)": [m.seq for m in after][:1] in ([], [seen // 2 + 1]),
                "read(after, limit)": [m.seq for m in limited]
                == list(range(seen // 2 + 1, seen // 2 + 1 + len(limited))),
                "last": last is None or last.seq >= len(rows),
                "last(3)": [m.seq for m in last_3] == sorted(m.seq for m in last_3),
                "count": count >= len(rows),
            }
            self.problems.extend(
                f"{name} {log.conversation}" for name, ok in checks.items() if not ok
            )
            seen = max(seen, len(rows))

    def _follow(self, conversation: str) -> None:
        log = MessageLog(self.cluster.client(socket_timeout=5), conversation)
        expected = 1
        try:
            for row in log.follow():
                if row.seq != expected:
                    self.problems.append(f"follow {conversation}: {row.seq}, not {expected}")
                expected = row.seq + 1
                if self._stop.is_set() and expected > max(self.acked[conversation], default=0):
                    return
        except MessageLogError as exc:
            self.problems.append(f"follow {conversation}: {exc!r}")

    def __enter__(self) -> Traffic:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for conversation in self.ids:  # wakes a follower waiting on an idle log
            MessageLog(self.client, conversation).add("user", "end")
        for thread in self._threads:
            thread.join(timeout=60)
            assert not thread.is_alive()


def test_slots_move_under_writers_and_readers_of_every_form(
    shared_cluster: Callable[[], LocalCluster],
) -> None:
    cluster = shared_cluster()
    with Traffic(cluster, conversations=3) as traffic:
        time.sleep(0.3)
        for round_ in range(2):
            for conversation in traffic.ids:
                slot = key_slot(ConversationKeys.build("msglog", conversation).seq.encode())
                owner = cluster.owner(slot)
                others = [p for p in cluster.primaries if p.port != owner.port]
                # Paced like a real reshard of a busy slot: the conversation's keys spend
                # a while on the importing node before the slot is reassigned.
                cluster.migrate_slot(slot, others[round_ % len(others)], batch=50, pause=0.02)
            time.sleep(0.1)
    assert not traffic.problems, traffic.problems[:10]
    assert traffic.reads > 300
    for conversation in traffic.ids:
        rows = MessageLog(traffic.client, conversation).all()
        assert [m.seq for m in rows] == list(range(1, len(rows) + 1))
        by_seq = {m.seq: m.content for m in rows}
        assert all(by_seq[seq] == content for seq, content in traffic.acked[conversation].items())
        assert len(traffic.acked[conversation]) > 20


# -- every node down ----------------------------------------------------------------------


def test_every_node_down_is_server_unavailable(flavor: str) -> None:
    """Nothing of redis-py leaks (its slot-table refresh raises RedisClusterException,
    which is not even a RedisError), and every call ends within its timeouts."""
    timeouts: dict[str, Any] = {"socket_timeout": 0.5, "socket_connect_timeout": 0.5}
    policy = RetryPolicy(deadline=0.5)
    with LocalCluster(require_binary("any"), replicas=0) as cluster:
        loop = asyncio.new_event_loop()
        if flavor == "sync":
            client: Any = cluster.client(**timeouts)
            call: Call = lambda value: value  # noqa: E731
            log: Any = MessageLog(client, new_id(), retry=policy)
        else:
            client = redis.asyncio.cluster.RedisCluster(
                host="127.0.0.1", port=cluster.port, **timeouts
            )
            call, log = loop.run_until_complete, AsyncMessageLog(client, new_id(), retry=policy)
        call(log.add("user", "before"))
        follower = log.follow(after=1, reconnect_within=0.5)
        for server in cluster.servers:
            server.stop()
        operations: dict[str, Callable[[], Any]] = {
            "append": lambda: log.add("user", "lost"),
            "append_many": lambda: log.append_many([{"role": "user", "content": "x"}] * 2),
            "all": log.all,
            "read(after)": lambda: log.read(after=1),
            "read(after, limit)": lambda: log.read(after=0, limit=5),
            "last": log.last,
            "last(n)": lambda: log.last(3),
            "count": log.count,
            "follow": lambda: next(follower) if flavor == "sync" else anext(follower),
        }
        try:
            for name, operation in operations.items():
                started = time.monotonic()
                with pytest.raises(MessageLogError) as caught:
                    call(operation())
                allowed: tuple[type, ...] = (ServerUnavailableError,)
                if flavor == "async" and name.startswith("append"):
                    # redis-py's asyncio cluster client hands out an idle connection that
                    # the stopped node closed without checking it (the sync pool does):
                    # the append is sent on it, so to the client it is in doubt.
                    allowed = (ServerUnavailableError, AppendInDoubtError)
                assert type(caught.value) in allowed, (name, caught.value)
                assert 0.5 <= time.monotonic() - started < 5, name  # waited, then gave up
        finally:
            if flavor == "async":
                loop.run_until_complete(client.aclose())
            loop.close()


# -- a primary crashes --------------------------------------------------------------------


def _conversations_on(cluster: LocalCluster, primary: EphemeralServer, count: int) -> list[str]:
    owned: list[str] = []
    while len(owned) < count:
        conversation = new_id()
        slot = key_slot(ConversationKeys.build("msglog", conversation).seq.encode())
        if cluster.owner(slot).port == primary.port:
            owned.append(conversation)
    return owned


class CrashWriters:
    """Appenders on the doomed primary's conversations, each recording every append's
    outcome and how long it took: sync threads and asyncio tasks, with the default policy
    (which must ride out the failover) and with a deadline shorter than the promotion."""

    SHORT = RetryPolicy(deadline=0.3)

    def __init__(self, cluster: LocalCluster, conversations: list[str]) -> None:
        self.port = cluster.port
        self.client = cluster.client(socket_timeout=1, socket_connect_timeout=1)
        self.outcomes: list[tuple[str, str, str, float]] = []  # policy, content, result, s
        self.in_doubt: list[tuple[str, str, str]] = []  # conversation, content, key
        self.acked_at: dict[str, float] = {}  # content: when its append returned
        self._stop = threading.Event()
        plans = [(c, policy) for c in conversations for policy in ("default", "short")]
        self._threads = [threading.Thread(target=self._sync, args=plan) for plan in plans]
        self._threads.append(threading.Thread(target=asyncio.run, args=(self._async(plans),)))

    def _record(
        self, conversation: str, policy: str, content: str, started: float, error: Any
    ) -> None:
        result = "acked" if error is None else type(error).__name__
        if error is None:
            self.acked_at[content] = time.monotonic()
        if isinstance(error, AppendInDoubtError):
            assert error.idempotency_key is not None
            self.in_doubt.append((conversation, content, error.idempotency_key))
        self.outcomes.append((policy, content, result, time.monotonic() - started))

    def _sync(self, conversation: str, policy: str) -> None:
        retry = self.SHORT if policy == "short" else RetryPolicy()
        log = MessageLog(self.client, conversation, retry=retry)
        i = 0
        while not self._stop.is_set():
            content, started, error = f"{conversation}:{policy}:sync:{i}", time.monotonic(), None
            try:
                log.add("user", content)
            except MessageLogError as exc:
                error = exc
            self._record(conversation, policy, content, started, error)
            i += 1

    async def _async(self, plans: list[tuple[str, str]]) -> None:
        client = redis.asyncio.cluster.RedisCluster(
            host="127.0.0.1", port=self.port, socket_timeout=1, socket_connect_timeout=1
        )

        async def write(conversation: str, policy: str) -> None:
            retry = self.SHORT if policy == "short" else RetryPolicy()
            log = AsyncMessageLog(client, conversation, retry=retry)
            i = 0
            while not self._stop.is_set():
                content, started = f"{conversation}:{policy}:async:{i}", time.monotonic()
                error = None
                try:
                    await log.add("user", content)
                except MessageLogError as exc:
                    error = exc
                self._record(conversation, policy, content, started, error)
                i += 1

        await asyncio.gather(*(write(*plan) for plan in plans))
        await client.aclose()

    def __enter__(self) -> CrashWriters:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=60)
            assert not thread.is_alive()


def test_appends_ride_out_a_crash_failover() -> None:
    """SIGSTOP then SIGKILL of a primary under appends (the pause lets the kernel hand the
    replica what the primary sent it, so nothing acknowledged well before the crash is
    lost to asynchronous replication and the test can demand that: within one turn of
    its event loop Redis writes a reply before the replication stream, so an append acked
    in the last moments may be lost; only ``Durability(replicas=1)`` rules that out, see
    test_durability). The default policy waits through the
    promotion: no error, nothing lost, nothing twice. A 0.3 s deadline gives up:
    ServerUnavailableError (nothing written) or AppendInDoubtError (re-sent afterwards
    with its key: written once)."""
    with LocalCluster(require_binary("any"), node_timeout_ms=1000) as cluster:
        victim = cluster.owner(16383)  # not the node the clients start from
        replica = cluster.replica_of(victim)
        conversations = _conversations_on(cluster, victim, 2)
        with CrashWriters(cluster, conversations) as writers:
            time.sleep(0.5)
            crashed = time.monotonic()
            victim.pause()
            time.sleep(0.2)
            victim.kill()
            while cluster.admin(replica).info("replication")["role"] != "master":
                assert time.monotonic() - crashed < 30, "no promotion"
                time.sleep(0.05)
            promoted = time.monotonic() - crashed
            time.sleep(1.0)  # appends go on against the new primary
        for conversation, content, key in writers.in_doubt:  # safe to retry with the key
            MessageLog(writers.client, conversation).add("user", content, idempotency_key=key)

        outcomes = writers.outcomes
        default = [o for o in outcomes if o[0] == "default"]
        short = [o for o in outcomes if o[0] == "short"]
        assert all(result == "acked" for _, _, result, _ in default), default
        results = {result for _, _, result, _ in short}
        assert results <= {"acked", "ServerUnavailableError", "AppendInDoubtError"}, results
        assert results - {"acked"}  # gave up before the promotion
        longest = max(seconds for _, _, _, seconds in default)
        assert longest > promoted - 0.5  # some append did wait through the failover
        print(  # shown with -s: the numbers the README quotes
            f"\npromotion {promoted:.2f} s after the crash; longest append with the "
            f"default policy {longest:.2f} s ({len(default)} appends); short deadline: "
            f"{sum(o[2] == 'ServerUnavailableError' for o in short)} not written, "
            f"{len(writers.in_doubt)} in doubt, "
            f"{sum(o[2] == 'acked' for o in short)} acked"
        )

        acked = {content for _, content, result, _ in outcomes if result == "acked"}
        doubtful = {content for _, content, _ in writers.in_doubt}
        refused = {c for _, c, result, _ in outcomes if result == "ServerUnavailableError"}
        reader = cluster.client()
        for conversation in conversations:
            rows = MessageLog(reader, conversation).all()
            assert [m.seq for m in rows] == list(range(1, len(rows) + 1))
            contents = [m.content for m in rows]
            assert len(set(contents)) == len(contents), "an append was written twice"
            mine = {c for c in acked | doubtful if c.startswith(conversation)}
            last_moments = {c for c, at in writers.acked_at.items() if at > crashed - 0.1}
            assert mine - last_moments <= set(contents), "an acknowledged append was lost"
            assert not refused & set(contents), "a refused append was written"
