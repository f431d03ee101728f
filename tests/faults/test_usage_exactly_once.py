"""Usage totals under the faults that matter for billing (docs/usage.md): 8 processes
append to one conversation at once, each through a proxy that loses replies after the
server executed the call, so every lost reply is re-sent. The totals must be exactly
what the acknowledged appends carried: a re-sent append that was already committed adds
nothing, and none is lost."""

from __future__ import annotations

import multiprocessing
import random
from collections.abc import Callable
from typing import Any

import redis

from redis_msglog import MessageLog, Usage
from redis_msglog.testing import EphemeralServer

from ..conftest import new_id
from ..support.proxy import ReplyDroppingProxy

WORKERS, CALLS = 8, 15


def _usage(rng: random.Random) -> Usage:
    return Usage(
        input_tokens=rng.randrange(1, 5000),
        output_tokens=rng.randrange(0, 800),
        cached_tokens=rng.randrange(0, 100),
        cost=round(rng.random() / 100, 6),
        currency="USD",
    )


def _worker(port: int, conversation: str, worker: int, start: Any, results: Any) -> None:
    rng = random.Random(worker)
    sent: list[Usage] = []
    with ReplyDroppingProxy(port) as proxy:
        log = MessageLog(redis.Redis.from_url(proxy.url), conversation)
        start.wait()
        for call in range(CALLS):
            proxy.drops = rng.randrange(0, 3)  # lost replies in a row; the policy allows 5
            batch = [_usage(rng) for _ in range(1 + call % 2)]
            log.append_many([
                {"role": "assistant", "content": f"w{worker} c{call} m{i}", "usage": usage}
                for i, usage in enumerate(batch)
            ])  # fmt: skip
            sent += batch  # acknowledged: it returned
        dropped = proxy.dropped
    results.put((worker, [u.model_dump() for u in sent], dropped))


def test_eight_processes_losing_replies_count_each_usage_exactly_once(
    shared_server: Callable[[str], EphemeralServer],
) -> None:
    server = shared_server("redis")
    conversation = new_id()
    context = multiprocessing.get_context("spawn")
    start, results = context.Event(), context.Queue()
    processes = [
        context.Process(target=_worker, args=(server.port, conversation, w, start, results))
        for w in range(WORKERS)
    ]
    for process in processes:
        process.start()
    start.set()
    reported = [results.get(timeout=120) for _ in processes]
    for process in processes:
        process.join(timeout=60)
        assert process.exitcode == 0
    sent = [Usage(**u) for _, usages, _ in reported for u in usages]
    assert sum(dropped for _, _, dropped in reported) >= WORKERS  # replies were lost
    log = MessageLog(redis.Redis.from_url(server.url), conversation)
    rows = log.all()
    assert len(rows) == len(sent) == WORKERS * (CALLS + CALLS // 2)  # each message once
    expected = Usage.total(sent)
    assert log.usage() == expected
    assert Usage.total(r.usage for r in rows if r.usage) == expected
    log.erase()
