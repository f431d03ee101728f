"""Eight worker processes appending to one conversation while another process erases it,
and eight creating conversations in a scope while another erases the scope: afterwards
nothing of it is left but its tombstone, and no append that began after the erasure ended
succeeded; every worker's next append raised ConversationErasedError, and every read it
made after that saw an empty log."""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
import redis
import redis.cluster

from redis_msglog import ConversationErasedError, Directory, MessageLog
from redis_msglog._core.lifecycle.scope import ScopeKeys
from redis_msglog.testing import EphemeralServer

from ..conftest import new_id

pytestmark = pytest.mark.slow  # 8 processes at once

WORKERS = 8


def _client(where: tuple[str, Any]) -> Any:
    kind, address = where
    if kind == "cluster":
        return redis.cluster.RedisCluster(host="127.0.0.1", port=address)
    return redis.Redis.from_url(address)


def _worker(where: tuple[str, Any], conversation: str, worker: int, out: Any) -> None:
    log = MessageLog(_client(where), conversation)
    done: list[tuple[float, float, int]] = []  # (started, returned, seq) of each success
    refused_at, reads = None, []
    for i in range(100_000):
        started = time.monotonic()
        try:
            if i % 3 == 0:  # with an idempotency record, which the erasure must find too
                seq = log.add("user", f"{worker}:{i}", idempotency_key=f"w{worker}:{i}")
            elif i % 3 == 1:
                seq = log.append_many(
                    [{"role": "user", "content": f"{worker}:{i}:{k}"} for k in range(3)]
                )
            else:
                seq = log.add("assistant", f"{worker}:{i}")
        except ConversationErasedError:
            refused_at = started
            reads = [log.count(), len(log.all()), log.attrs().last_seq]
            break
        done.append((started, time.monotonic(), seq))
    out.put((worker, done, refused_at, reads))


@pytest.mark.parametrize("kind", ["valkey", "cluster"])
def test_eight_processes_appending_while_another_erases(
    kind: str,
    shared_server: Callable[[str], EphemeralServer],
    shared_cluster: Callable[[], Any],
) -> None:
    where: tuple[str, Any] = (
        ("cluster", shared_cluster().port)
        if kind == "cluster"
        else ("plain", shared_server(kind).url)
    )
    conversation = new_id()
    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    processes = [
        context.Process(target=_worker, args=(where, conversation, w, out)) for w in range(WORKERS)
    ]
    for process in processes:
        process.start()
    log = MessageLog(_client(where), conversation)
    deadline = time.monotonic() + 60
    while log.count() < 300 and time.monotonic() < deadline:  # all of them busy appending
        time.sleep(0.05)
    assert log.count() >= 300
    log.erase(erased_for=timedelta(minutes=5))
    erased = time.monotonic()  # the erasure has ended
    results = [out.get(timeout=120) for _ in processes]
    for process in processes:
        process.join(timeout=60)
    client = _client(where)
    tag = "{" + conversation + "}"
    left = sorted(k.decode() for k in client.scan_iter(match=f"*{tag}*", count=1000))
    assert left == [log.keys.seq]  # the tombstone, and nothing else
    assert client.get(log.keys.seq) == b"erased"
    successes = 0
    for worker, done, refused_at, reads in results:
        assert refused_at is not None, f"worker {worker} was never refused"
        assert all(started < erased for started, _, _ in done), f"worker {worker}"
        assert reads == [0, 0, 0]  # an empty log, never a half-erased one
        successes += len(done)
    assert successes > 100


def _scope_worker(where: tuple[str, Any], top: str, worker: int, out: Any) -> None:
    """New conversations in the scope, a few appends each, until the scope is erased."""
    client = _client(where)
    made: list[str] = []
    done: list[float] = []  # when each successful append had started
    refused_at = None
    for n in range(100_000):
        log = MessageLog(client, f"{top}:w{worker}:{n}", scope=(top, f"w{worker}"))
        made.append(log.conversation)
        try:
            for i in range(3):
                started = time.monotonic()
                log.add("user", f"{worker}:{n}:{i}")
                done.append(started)
        except ConversationErasedError:  # ScopeErasedError included
            refused_at = time.monotonic()
            break
    out.put((worker, made, done, refused_at))


@pytest.mark.parametrize("kind", ["valkey", "cluster"])
def test_eight_processes_creating_conversations_while_their_scope_is_erased(
    kind: str,
    shared_server: Callable[[str], EphemeralServer],
    shared_cluster: Callable[[], Any],
) -> None:
    where: tuple[str, Any] = (
        ("cluster", shared_cluster().port)
        if kind == "cluster"
        else ("plain", shared_server(kind).url)
    )
    top = f"t{new_id()[-12:]}"
    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    processes = [
        context.Process(target=_scope_worker, args=(where, top, w, out)) for w in range(WORKERS)
    ]
    for process in processes:
        process.start()
    directory = Directory(_client(where))
    deadline = time.monotonic() + 60
    while len(directory.list((top,)).conversations) < 40 and time.monotonic() < deadline:
        time.sleep(0.05)
    erased = directory.erase((top,), erased_for=timedelta(minutes=5))
    ended = time.monotonic()
    results = [out.get(timeout=120) for _ in processes]
    for process in processes:
        process.join(timeout=60)
    assert len(erased) >= 40
    client = _client(where)
    assert directory.list((top,)).conversations == []
    left = sorted(k.decode() for k in client.scan_iter(match=f"*{{{top}:}}*", count=1000))
    assert left == [ScopeKeys.build("msglog", (top,)).tombstone()]  # no index, no entry
    for worker, made, done, refused_at in results:
        assert refused_at is not None, f"worker {worker} was never refused"
        assert all(started < ended for started in done), f"worker {worker}"
        for conversation in made:  # erased (its tombstone alone), or never registered
            tag = "{" + conversation + "}"
            found = sorted(k.decode() for k in client.scan_iter(match=f"*{tag}*", count=1000))
            assert found in ([], [MessageLog(client, conversation).keys.seq]), found
    assert set(erased) <= {c for _, made, _, _ in results for c in made}
