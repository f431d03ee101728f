"""Aggregate append throughput over many conversations: one server vs a 3-primary Redis
Cluster, same binaries, same machine, same client processes.

    python -m benchmarks.cluster [--quick] [--processes 6] [--json PATH]

Each process appends to conversations of its own, round-robin; conversations spread over
the cluster's slots by their hash tag. The figure is messages per second from the moment
every process is ready to the moment the last one finishes (median of several runs).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import time
import uuid
from typing import Any

import orjson
import redis
import redis.cluster

from redis_msglog import MessageLog
from redis_msglog.testing import EphemeralCluster, EphemeralServer, find_server_binary


def _worker(
    target: tuple[str, int], per_process: int, conversations: int, start: Any, done: Any
) -> None:
    kind, port = target
    client: Any = (
        redis.cluster.RedisCluster(host="127.0.0.1", port=port)
        if kind == "cluster"
        else redis.Redis(port=port)
    )
    run = uuid.uuid4().hex[:8]
    logs = [MessageLog(client, f"bench-{run}-{i}") for i in range(conversations)]
    for log in logs:
        log.count()  # connect to every node first
    start.wait()
    for i in range(per_process):
        logs[i % conversations].add("user", f"message {i}: " + "lorem ipsum " * 20)
    done.put(time.monotonic())


def measure(target: tuple[str, int], processes: int, per_process: int, conversations: int) -> float:
    context = multiprocessing.get_context("fork")
    start, done = context.Barrier(processes + 1), context.Queue()
    procs = [
        context.Process(target=_worker, args=(target, per_process, conversations, start, done))
        for _ in range(processes)
    ]
    for proc in procs:
        proc.start()
    start.wait()
    started = time.monotonic()
    finished: float = max(done.get(timeout=600) for _ in procs)
    for proc in procs:
        proc.join()
    return processes * per_process / (finished - started)


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.cluster", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--processes", type=int, default=6)
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args()
    runs, per_process = (1, 1000) if args.quick else (3, 4000)
    binary = find_server_binary("any")
    if binary is None:
        raise SystemExit("no redis-server or valkey-server found")
    results: dict[str, float] = {}
    with (
        EphemeralServer(binary) as single,
        EphemeralCluster(binary, primaries=3, replicas=0) as cluster,
    ):
        for name, target in (
            ("1 server", ("single", single.port)),
            ("3 primaries", ("cluster", cluster.port)),
        ):
            samples = [measure(target, args.processes, per_process, 50) for _ in range(runs)]
            results[name] = statistics.median(samples)
    ratio = results["3 primaries"] / results["1 server"]
    print(f"| setup | appends/s ({args.processes} processes, 50 conversations each) |")
    print("|---|---:|")
    for name, value in results.items():
        print(f"| {name} | {value:,.0f} |")
    print(f"\n3 primaries / 1 server: {ratio:.2f}x on {os.cpu_count()} cores")
    if args.json:
        with open(args.json, "wb") as file:
            file.write(
                orjson.dumps(
                    {
                        "appends_per_s": results,
                        "ratio": ratio,
                        "cores": os.cpu_count(),
                        "processes": args.processes,
                        "runs": runs,
                    },
                    option=orjson.OPT_INDENT_2,
                )
            )


if __name__ == "__main__":
    main()
