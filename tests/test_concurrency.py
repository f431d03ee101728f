"""Many worker processes appending to one conversation: seqs 1..N, unique, gap-free,
each writer's own order kept."""

from __future__ import annotations

import itertools
import multiprocessing
from collections.abc import Callable

import redis

from redis_msglog import MessageLog
from redis_msglog.ephemeral import EphemeralServer

from .conftest import new_id

WORKERS = 8
ROUNDS = 40  # each round: one append, then an append_many of 2


def _worker(url: str, conversation: str, worker: int) -> None:
    log = MessageLog(redis.Redis.from_url(url), conversation)
    for i in range(ROUNDS):
        log.add("user", f"{worker}:{3 * i}")
        log.append_many(
            [
                {"role": "assistant", "content": f"{worker}:{3 * i + 1}"},
                {"role": "tool", "content": f"{worker}:{3 * i + 2}", "toolCallId": "c"},
            ]
        )


def test_eight_processes_on_one_conversation(
    real_backend: str, shared_server: Callable[[str], EphemeralServer]
) -> None:
    url = shared_server(real_backend).url
    conversation = new_id()
    context = multiprocessing.get_context("spawn")
    processes = [
        context.Process(target=_worker, args=(url, conversation, w)) for w in range(WORKERS)
    ]
    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout=120)
        assert process.exitcode == 0

    log = MessageLog(redis.Redis.from_url(url), conversation)
    rows = log.all()
    total = WORKERS * ROUNDS * 3
    assert log.count() == total
    assert [m.seq for m in rows] == list(range(1, total + 1))
    assert len({m.content for m in rows}) == total  # each message exactly once
    by_worker: dict[str, list[int]] = {}
    for row in rows:
        worker, index = row.content.split(":")
        by_worker.setdefault(worker, []).append(int(index))
    assert sorted(by_worker) == [str(w) for w in range(WORKERS)]
    for indexes in by_worker.values():
        assert indexes == list(range(ROUNDS * 3))  # each writer's order kept
    # A batch commits together: its two rows are adjacent and share one timestamp.
    for first, second in itertools.pairwise(rows):
        if first.role == "assistant":
            assert second.seq == first.seq + 1 and second.at == first.at
            assert second.content.split(":")[0] == first.content.split(":")[0]
