"""What a view read costs the server as edits pile up (docs/edits.md, "Cost"):
``last(10)`` and ``count(view=...)`` of conversations with few and many segments (each
``compact(..., through_seq=0)`` adds some) and few and many hidden ranges (each
retracted message between two visible ones adds one), in server time, against a raw
``XREVRANGE ... COUNT 10`` in the same run.

    python -m benchmarks.view_cost [--url redis://...] [--segments 6000] [--ranges 50000]

Server time is ``INFO commandstats`` microseconds per ``EVALSHA`` (a script's time
includes the commands it runs), one client calling in a loop. The figures to look at
are the ratios ``many / few``: a read must cost the same whatever the history (flat:
~1.0x). Also the server time of one ``retract`` of the most seqs it takes. With no
``--url`` it starts a private server.
"""

from __future__ import annotations

import argparse
import uuid
from collections.abc import Callable
from contextlib import ExitStack
from functools import partial
from typing import Any

import redis

from benchmarks.server import print_costs, server_url
from redis_msglog import MessageLog
from redis_msglog._core.read.views import (
    MAX_RETRACT as RETRACT_CAP,  # the most seqs a retract takes
)

TAIL = 30  # the same last rows in every conversation, the archive watermark among them


def _message(text: str) -> dict[str, str]:
    return {"role": "user", "content": text + " " + "x" * 200}


def built(client: redis.Redis, *, compactions: int, ranges: int) -> MessageLog:
    """A conversation with about ``2 * compactions`` segments and ``ranges`` hidden
    ranges, ending with the same ``TAIL`` rows."""
    log = MessageLog(client, f"bench-views-{uuid.uuid4().hex}")
    log.add("user", "first")
    for i in range(compactions):
        log.append_many([_message(f"a{i}"), _message(f"b{i}")])
        log.compact([_message(f"summary {i}")], through_seq=0)
    batch = 1000
    for start in range(0, 2 * ranges, batch):
        size = min(batch, 2 * ranges - start)
        last = log.append_many([_message(f"r{start + i}") for i in range(size)])
        doomed = list(range(last - size + 1, last + 1, 2))  # every other one
        for chunk in range(0, len(doomed), RETRACT_CAP):
            log.retract(doomed[chunk : chunk + RETRACT_CAP])
    last = log.append_many([_message(f"tail {i}") for i in range(TAIL)])
    log.archive(last - TAIL // 2)
    return log


def server_us(client: redis.Redis, call: Callable[[], object], calls: int) -> float:
    """``INFO commandstats`` microseconds per call of ``call``: its scripts, or (no
    script) its commands."""
    call()  # loads the script
    client.config_resetstat()
    for _ in range(calls):
        call()
    stats: Any = client.info("commandstats")
    scripts = [stats[n] for n in ("cmdstat_evalsha", "cmdstat_eval") if n in stats]
    chosen = scripts or [v for k, v in stats.items() if k not in ("cmdstat_config",)]
    return sum(float(entry["usec"]) for entry in chosen) / calls


def costs(client: redis.Redis, segments: int, ranges: int, calls: int) -> dict[str, float]:
    logs = {
        "few": built(client, compactions=10, ranges=100),
        "many segments": built(client, compactions=segments // 2, ranges=100),
        "many ranges": built(client, compactions=10, ranges=ranges),
    }
    reads: dict[str, Callable[[MessageLog], object]] = {
        "last(10)": lambda log: log.last(10),
        "count(view='visible')": lambda log: log.count(view="visible"),
        "count(view='active')": lambda log: log.count(view="active"),
    }
    results: dict[str, float] = {}
    for name, log in logs.items():
        view: Any = client.hgetall(log.keys.view)
        hidden = int(client.zcard(log.keys.hidden))
        width = sum(1 for field in view if field.startswith(b"g"))
        print(f"{name}: {width:,} segments, {hidden:,} hidden ranges and segments by seq")
        for read, call in reads.items():
            results[f"{read}, {name}"] = server_us(client, partial(call, log), calls)
    stream = logs["few"].keys.stream
    results["raw XREVRANGE COUNT 10"] = server_us(
        client, lambda: client.xrevrange(stream, count=10), calls
    )
    for read in reads:
        for many in ("many segments", "many ranges"):
            results[f"{read}: {many} / few (flat = 1.0)"] = (
                results[f"{read}, {many}"] / results[f"{read}, few"]
            )
    results["last(10), few / raw XREVRANGE"] = (
        results["last(10), few"] / results["raw XREVRANGE COUNT 10"]
    )
    results[f"retract of {RETRACT_CAP:,} seqs"] = _retract_us(client)
    return results


def _retract_us(client: redis.Redis) -> float:
    log = MessageLog(client, f"bench-views-{uuid.uuid4().hex}")
    last = log.append_many([_message(f"m{i}") for i in range(2 * RETRACT_CAP)])
    doomed = list(range(last - 2 * RETRACT_CAP + 1, last + 1, 2))
    client.config_resetstat()
    log.retract(doomed)
    stats: Any = client.info("commandstats")
    return float(sum(stats[n]["usec"] for n in ("cmdstat_evalsha", "cmdstat_eval") if n in stats))


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.view_cost")
    parser.add_argument("--url", help="an existing server (default: start a private one)")
    parser.add_argument("--segments", type=int, default=6000)
    parser.add_argument("--ranges", type=int, default=50_000)
    parser.add_argument("--calls", type=int, default=300)
    args = parser.parse_args(argv)
    with ExitStack() as stack:
        url = server_url(stack, args.url)
        results = costs(redis.Redis.from_url(url), args.segments, args.ranges, args.calls)
    print_costs(results)
    return results


if __name__ == "__main__":
    main()
