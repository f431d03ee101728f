"""Edits on a Redis Cluster under faults: view reads while a slot move is held open with
the conversation's keys on the importing node, and poppers while the slot moves back and
forth (pops across a failover: test_cluster.py). Each message is popped once, and the
view always equals the fold of the physical log."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import timedelta

import pytest
from redis.crc import key_slot

from redis_msglog import LogView, MessageLog, RetryPolicy, StoredMessage

from ..conftest import new_id
from ..support.cluster import LocalCluster
from .test_cluster_faults import held_move

pytestmark = pytest.mark.cluster


def user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


def seqs(rows: list[StoredMessage]) -> list[int]:
    return [row.seq for row in rows]


def edited_log(cluster: LocalCluster) -> MessageLog:
    log = MessageLog(cluster.client(socket_timeout=5), new_id(), page_size=3)
    log.append_many([user(str(i)) for i in range(20)])
    log.retract([2, 3])
    log.compact([user("summary")], through_seq=5)
    log.archive(9)
    log.pop()
    return log


def test_view_reads_while_a_slot_move_is_held_open(
    shared_cluster: Callable[[], LocalCluster],
) -> None:
    cluster = shared_cluster()
    log = edited_log(cluster)
    fold = LogView(log.all(view="physical"))
    expected = (seqs(fold.rows), seqs(fold.active()), seqs(fold.archived()))

    def check() -> None:
        assert (
            seqs(log.all()),
            seqs(log.all(view="active")),
            seqs(log.all(view="archived")),
        ) == expected
        assert seqs(log.last(4)) == expected[0][-4:]
        assert log.count(view="visible") == len(expected[0])

    with held_move(cluster, key_slot(log.keys.seq.encode())) as migrate:
        check()  # every key still on the source
        keys = log.keys
        migrate(keys.seq, keys.stream, keys.view, keys.hidden)  # one MIGRATE: together
        check()  # every key on the importing node: ASK, then served there
    check()


def test_poppers_while_the_slot_moves(shared_cluster: Callable[[], LocalCluster]) -> None:
    cluster = shared_cluster()
    conversation = new_id()
    seed = MessageLog(cluster.client(socket_timeout=5), conversation)
    total = 120
    seed.append_many([user(str(i)) for i in range(total)])
    popped: list[int] = []
    problems: list[BaseException] = []
    lock = threading.Lock()

    def popper() -> None:
        log = MessageLog(cluster.client(socket_timeout=5), conversation)
        try:
            while (row := log.pop()) is not None:
                with lock:
                    popped.append(row.seq)
                time.sleep(0.005)
        except BaseException as exc:  # reported below, not lost in the thread
            problems.append(exc)

    threads = [threading.Thread(target=popper) for _ in range(4)]
    for thread in threads:
        thread.start()
    slot = key_slot(seed.keys.seq.encode())
    for round_ in range(2):
        owner = cluster.owner(slot)
        others = [p for p in cluster.primaries if p.port != owner.port]
        cluster.migrate_slot(slot, others[round_ % len(others)], batch=1, pause=0.01)
    for thread in threads:
        thread.join(timeout=120)
    assert not problems, problems[:3]
    assert sorted(popped) == list(range(1, total + 1))
    assert seed.all() == [] and seed.count() == 2 * total


def _keys_of(cluster: LocalCluster, log: MessageLog) -> list[str]:
    """The conversation's keys that exist (on the node owning its slot)."""
    k = log.keys
    names = [k.seq, k.stream, k.blobs, k.producers, k.view, k.hidden, k.usage]
    owner = cluster.admin(cluster.owner(key_slot(k.seq.encode())))
    return [name for name in names if owner.exists(name)]


def test_edits_and_ttl_appends_are_served_mid_move(
    shared_cluster: Callable[[], LocalCluster],
) -> None:
    """Issue 18 item 3 for edits and logs with a lifetime: every key they name exists
    once the conversation does (a log with a ttl makes its view keys and blobs hash on
    its first append; an edited log has its view keys), so with all of them on the
    importing node the calls are served there, mid-move."""
    cluster = shared_cluster()
    impatient = RetryPolicy(deadline=1.0)
    edited = MessageLog(cluster.client(socket_timeout=5), new_id(), retry=impatient)
    edited.append_many([user(str(i)) for i in range(5)])
    edited.retract([1])
    expiring = MessageLog(
        cluster.client(socket_timeout=5), new_id(), retry=impatient, ttl=timedelta(hours=1)
    )
    expiring.add("user", "0")
    for log in (edited, expiring):
        keys = _keys_of(cluster, log)
        with held_move(cluster, key_slot(log.keys.seq.encode())) as migrate:
            migrate(*keys)
            started = time.monotonic()
            popped = log.pop()
            assert popped is not None
            log.add("user", "mid-move")
            newest = log.last()
            assert newest is not None
            log.archive(newest.seq)
            assert time.monotonic() - started < 0.5  # served at once, not after retries
        fold = LogView(log.all(view="physical"))
        assert seqs(log.all()) == seqs(fold.rows)
        assert [m.content for m in log.all()][-1] == "mid-move"
