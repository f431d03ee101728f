"""What edits cost readers: ``last(50)`` of a conversation with edits present, at two
history lengths, against the same reads of an edit-free conversation and raw
``XREVRANGE`` + ``orjson.loads`` in the same run (docs/edits.md, "Cost").

    python -m benchmarks.edits [--url redis://...] [--small 10000] [--large 100000]

The edited conversations have a retraction every 10 messages, a compaction of the first
half, an archive watermark and pops at the tail, so a read crosses hidden ranges. The
figure to look at is ``large / small`` for the edited log: ``last(n)`` must cost the same
at any history length (flat: ~1.0x). With no ``--url`` it starts a private server.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from collections.abc import Callable
from contextlib import ExitStack
from functools import partial
from typing import Any

import orjson
import redis

from benchmarks.server import print_costs, server_url
from redis_msglog import MessageLog

LAST_N = 50
RUNS = 5


def _us_per_call(fn: Callable[[], object], calls: int) -> float:
    samples = []
    for _ in range(RUNS):
        started = time.perf_counter()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter() - started) / calls * 1e6)
    return statistics.median(samples)


def filled(client: redis.Redis, size: int, *, edited: bool) -> MessageLog:
    """A conversation of ``size`` messages; with ``edited``, edits all along it."""
    log = MessageLog(client, f"bench-edits-{uuid.uuid4().hex}")
    batch = [{"role": "user", "content": f"message {i} " + "x" * 200} for i in range(1000)]
    for _ in range(size // len(batch)):
        log.append_many(batch)
    if edited:
        rows = log.all()
        for chunk in range(0, len(rows), 1000):  # a retraction every 10 messages
            log.retract([r.seq for r in rows[chunk : chunk + 1000 : 10]])
        log.compact([{"role": "system", "content": "summary"}], through_seq=rows[size // 2 + 1].seq)
        log.archive(rows[size // 2 + 102].seq)  # not a retracted one
        for _ in range(5):
            log.pop()
    return log


def last_n_costs(client: redis.Redis, small: int, large: int, calls: int) -> dict[str, float]:
    results: dict[str, float] = {}
    for size in (small, large):
        for edited in (False, True):
            log = filled(client, size, edited=edited)
            label = f"last({LAST_N}), {size:,} messages, {'edited' if edited else 'no edits'}"
            results[label] = _us_per_call(partial(log.last, LAST_N), calls)
            if not edited:
                stream = log.keys.stream

                def raw(stream: str = stream) -> object:
                    entries: Any = client.xrevrange(stream, count=LAST_N)
                    return [orjson.loads(fields[b"msg"]) for _, fields in entries]

                results[f"raw XREVRANGE + orjson.loads, {size:,} messages"] = _us_per_call(
                    raw, calls
                )
    edited_small = results[f"last({LAST_N}), {small:,} messages, edited"]
    edited_large = results[f"last({LAST_N}), {large:,} messages, edited"]
    results["edited: large / small (flat = 1.0)"] = edited_large / edited_small
    plain_large = results[f"last({LAST_N}), {large:,} messages, no edits"]
    results["large: edited / no edits"] = edited_large / plain_large
    return results


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.edits")
    parser.add_argument("--url", help="an existing server (default: start a private one)")
    parser.add_argument("--small", type=int, default=10_000)
    parser.add_argument("--large", type=int, default=100_000)
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args(argv)
    with ExitStack() as stack:
        url = server_url(stack, args.url)
        client = redis.Redis.from_url(url)
        results = last_n_costs(client, args.small, args.large, args.calls)
    print_costs(results)
    return results


if __name__ == "__main__":
    main()
