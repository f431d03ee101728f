"""Many worker processes appending to one conversation: seqs 1..N, unique, gap-free,
each writer's own order kept."""

from __future__ import annotations

import itertools
import multiprocessing
from collections.abc import Callable
from typing import Any

import pytest
import redis

from redis_msglog import MessageLog
from redis_msglog.testing import EphemeralServer

from ..conftest import new_id
from ..support.history import History

pytestmark = pytest.mark.slow  # 8 processes at once

WORKERS = 8
ROUNDS = 40  # each round: one append, then an append_many of 2


def _worker(url: str, conversation: str, worker: int, out: Any) -> None:
    log = MessageLog(redis.Redis.from_url(url), conversation)
    history, name = History(conversation), f"w{worker}"
    for i in range(ROUNDS):
        first, second, third = (f"{worker}:{3 * i + k}" for k in range(3))
        with history.append(name, [first]) as op:
            op.committed(log.add("user", first))
        with history.append(name, [second, third]) as op:
            last = op.committed(
                log.append_many(
                    [
                        {"role": "assistant", "content": second},
                        {"role": "tool", "content": third, "toolCallId": "c"},
                    ]
                )
            )
        after = max(0, last - 6)
        with history.read(name, after) as read:  # with what the others interleaved
            read.returned(log.read(after=after))
    out.put(history.records)


def test_eight_processes_on_one_conversation(
    real_backend: str, shared_server: Callable[[str], EphemeralServer]
) -> None:
    url = shared_server(real_backend).url
    conversation = new_id()
    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    processes = [
        context.Process(target=_worker, args=(url, conversation, w, out)) for w in range(WORKERS)
    ]
    for process in processes:
        process.start()
    history = History(conversation)
    for _ in processes:
        history.extend(out.get(timeout=120))
    for process in processes:
        process.join(timeout=120)
        assert process.exitcode == 0

    # Every append acknowledged, once, at its seqs (batches whole); reads consistent.
    total = WORKERS * ROUNDS * 3
    summary = history.check(redis.Redis.from_url(url))
    assert (summary.length, summary.acked) == (total, WORKERS * ROUNDS * 2)
    log = MessageLog(redis.Redis.from_url(url), conversation)
    assert log.count() == total
    rows = log.all()
    by_worker: dict[str, list[int]] = {}
    for row in rows:
        worker, index = row.text.split(":")
        by_worker.setdefault(worker, []).append(int(index))
    assert sorted(by_worker) == [str(w) for w in range(WORKERS)]
    for indexes in by_worker.values():
        assert indexes == list(range(ROUNDS * 3))  # each writer's order kept
    # A batch commits together: its two rows are adjacent and share one timestamp.
    for first, second in itertools.pairwise(rows):
        if first.role == "assistant":
            assert second.seq == first.seq + 1 and second.at == first.at
            assert second.text.split(":")[0] == first.text.split(":")[0]
