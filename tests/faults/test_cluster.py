"""Redis Cluster: one slot per conversation whatever its id, sharded events, and appends
that stay exactly-once and gap-free while slots move and primaries fail over."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta

import pytest
import redis.asyncio.cluster
from redis.crc import key_slot

from redis_msglog import (
    AsyncMessageLog,
    ConversationKeys,
    Durability,
    LogView,
    MessageLog,
    MessageLogError,
    NotDurableError,
    StoredMessage,
)

from ..conftest import new_id, require_binary
from ..support.cluster import LocalCluster
from ..support.history import Append, History, Summary

pytestmark = pytest.mark.cluster

HOSTILE_IDS = ["plain", "{", "}", "{a}", "}{", "a{b}c", "%7B", "x:{y}:seq", "{}" * 50, "é🎉{"]


@pytest.mark.parametrize("conversation", HOSTILE_IDS)
def test_every_key_of_a_conversation_shares_one_slot(conversation: str) -> None:
    keys = ConversationKeys.build("msglog", conversation)
    names = [keys.seq, keys.stream, keys.channel, keys.idempotency_record("k{1}")]
    assert len({key_slot(name.encode()) for name in names}) == 1


def test_hostile_ids_append_and_read_on_a_cluster(
    shared_cluster: Callable[[], LocalCluster],
) -> None:
    client = shared_cluster().client()
    for conversation in HOSTILE_IDS:
        log = MessageLog(client, f"{conversation}-{new_id()}")
        assert log.append_many([{"role": "user", "content": "a"}] * 3) == 3  # no CROSSSLOT
        assert log.add("user", "b", idempotency_key="k") == 4
        assert [m.seq for m in log.all()] == [1, 2, 3, 4]


def test_events_are_published_on_the_conversations_shard(
    shared_cluster: Callable[[], LocalCluster],
) -> None:
    client = shared_cluster().client()
    log = MessageLog(client, new_id())
    pubsub = client.pubsub()
    pubsub.ssubscribe(log.keys.channel)
    deadline = time.monotonic() + 5
    while pubsub.get_sharded_message(timeout=0.1) is None and time.monotonic() < deadline:
        pass  # the subscribe confirmation
    log.append_many([{"role": "user", "content": "x"}, {"role": "user", "content": "y"}])
    message = None
    while message is None and time.monotonic() < deadline:
        message = pubsub.get_sharded_message(timeout=0.1)
    assert message is not None
    assert b'"first":1,"last":2' in message["data"]
    pubsub.close()


# -- topology changes under load -----------------------------------------------------------


@pytest.fixture
def private_cluster() -> Iterator[LocalCluster]:
    cluster = LocalCluster(require_binary("any"))
    with cluster:
        yield cluster


class Writers:
    """Threads appending to their own conversations, and one reading them all back, each
    operation recorded in the conversation's History."""

    def __init__(self, cluster: LocalCluster, conversations: int) -> None:
        self.client = cluster.client(socket_timeout=5)
        self.ids = [new_id() for _ in range(conversations)]
        self.histories = {c: History(c) for c in self.ids}
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._write, args=(c,)) for c in self.ids]
        self._threads.append(threading.Thread(target=self._read))

    def _write(self, conversation: str) -> None:
        log, history = MessageLog(self.client, conversation), self.histories[conversation]
        i = 0
        while not self._stop.is_set():
            content = f"{conversation}:{i}"
            # A clear error is allowed (recorded, for the test to judge); a silent loss is not.
            with contextlib.suppress(MessageLogError), history.append("writer", [content]) as op:
                op.committed(log.add("user", content))
            i += 1

    def _read(self) -> None:
        logs = [MessageLog(self.client, conversation) for conversation in self.ids]
        while not self._stop.is_set():
            for log in logs:
                with contextlib.suppress(MessageLogError):
                    after = max(0, log.count() - 5)
                    with self.histories[log.conversation].read("reader", after) as read:
                        read.returned(log.read(after=after))
            self._stop.wait(0.02)  # a steady trickle of reads, not a second load

    def __enter__(self) -> Writers:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=60)

    def check(self) -> list[Summary]:
        """Every conversation's log against its history."""
        return [self.histories[c].check(self.client) for c in self.ids]

    def errors(self) -> list[Append]:
        """The appends that raised (failed or in doubt)."""
        return [
            record
            for history in self.histories.values()
            for record in history.records
            if isinstance(record, Append) and record.outcome != "ok"
        ]


def test_slots_move_while_writers_append(private_cluster: LocalCluster) -> None:
    with Writers(private_cluster, conversations=8) as writers:
        time.sleep(0.3)
        for round_ in range(2):
            for conversation in writers.ids[:4]:
                slot = key_slot(ConversationKeys.build("msglog", conversation).seq.encode())
                owner = private_cluster.owner(slot)
                others = [p for p in private_cluster.primaries if p.port != owner.port]
                private_cluster.migrate_slot(slot, others[round_ % len(others)])
            time.sleep(0.2)
    summaries = writers.check()
    assert sum(s.acked for s in summaries) > 100
    assert sum(s.reads for s in summaries) > 0
    assert not writers.errors(), writers.errors()


def test_a_primary_fails_over_while_writers_append(private_cluster: LocalCluster) -> None:
    with Writers(private_cluster, conversations=6) as writers:
        time.sleep(0.3)
        slot = key_slot(ConversationKeys.build("msglog", writers.ids[0]).seq.encode())
        promoted = private_cluster.failover(private_cluster.owner(slot))
        time.sleep(0.5)
        assert private_cluster.owner(slot).port == promoted.port
    summaries = writers.check()
    assert all(s.acked for s in summaries)  # every conversation kept going


def test_async_cluster_client_through_a_slot_move(private_cluster: LocalCluster) -> None:
    conversation = new_id()
    slot = key_slot(ConversationKeys.build("msglog", conversation).seq.encode())
    history = History(conversation)

    async def scenario() -> list[StoredMessage]:
        client = redis.asyncio.cluster.RedisCluster(host="127.0.0.1", port=private_cluster.port)
        log = AsyncMessageLog(client, conversation)

        async def add(i: int) -> None:
            with history.append("client", [str(i)]) as op:
                op.committed(await log.add("user", str(i)))

        for i in range(20):
            await add(i)
        source = private_cluster.owner(slot)
        target = next(p for p in private_cluster.primaries if p.port != source.port)
        await asyncio.to_thread(private_cluster.migrate_slot, slot, target)
        for i in range(20, 40):
            await add(i)
        with history.read("client", after=0) as read:
            rows = read.returned(await log.all())
        await client.aclose()
        return rows

    rows = asyncio.run(scenario())
    assert [(m.seq, m.content) for m in rows] == [(i + 1, str(i)) for i in range(40)]
    history.check(private_cluster.client())


def test_follow_on_a_cluster_survives_a_failover(private_cluster: LocalCluster) -> None:
    client = private_cluster.client(socket_timeout=5)
    log = MessageLog(client, new_id())
    history = History(log.conversation)

    def add(i: int) -> None:
        with history.append("writer", [str(i)]) as op:
            op.committed(log.add("user", str(i)))

    add(0)
    seen: list[int] = []

    def follow() -> None:
        follower = MessageLog(private_cluster.client(socket_timeout=5), log.conversation)
        with history.read("follower", after=0) as read:  # what it saw, checked for content
            messages = (r for r in follower.follow() if isinstance(r, StoredMessage))
            rows = read.returned(itertools.islice(messages, 10))
        seen.extend(row.seq for row in rows)

    thread = threading.Thread(target=follow, daemon=True)
    thread.start()
    for i in range(1, 5):
        add(i)
    slot = key_slot(log.keys.stream.encode())
    private_cluster.failover(private_cluster.owner(slot))
    for i in range(5, 10):
        add(i)
    thread.join(timeout=60)
    assert seen == list(range(1, 11))
    assert history.check(client).reads == 1


def test_wait_runs_on_the_node_that_took_the_write(private_cluster: LocalCluster) -> None:
    """WAIT counts the writes of its own connection: sent to another node (redis-py's
    cluster client would pick a default one) it would return at once and prove nothing.
    So freeze the owning primary's replica: the append must be reported not durable."""
    client = private_cluster.client(socket_timeout=5)
    durable = Durability(replicas=1, timeout=timedelta(milliseconds=300))
    log = MessageLog(client, new_id(), durability=durable)
    assert log.add("user", "replicated") == 1
    replica = private_cluster.replica_of(private_cluster.owner(key_slot(log.keys.seq.encode())))
    replica.pause()
    try:
        with pytest.raises(NotDurableError, match="0 of 1 replicas"):
            log.add("user", "not replicated in time")
    finally:
        replica.resume()
    assert log.count() == 2


def test_pops_across_a_failover(private_cluster: LocalCluster) -> None:
    """An edit rides out a failover like an append: the pop after it pops the next one."""
    log = MessageLog(private_cluster.client(socket_timeout=5), new_id())
    log.append_many([{"role": "user", "content": str(i)} for i in range(10)])
    assert log.pop() is not None
    private_cluster.failover(private_cluster.owner(key_slot(log.keys.seq.encode())))
    popped = log.pop()
    assert popped is not None and popped.seq == 9
    fold = LogView(log.all(view="physical"))
    assert [m.seq for m in log.all()] == [m.seq for m in fold.rows] == list(range(1, 9))
