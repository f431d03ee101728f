"""The floor of an append's server time (docs/design.md): the bare commands the
design needs, alone, against the append script and a raw ``XADD``, in one run.

    python -m benchmarks.floor [--url redis://...] [--calls 20000] [--rounds 3]

Each figure is ``INFO commandstats`` time per call (``EVALSHA`` counts the commands its
script runs), one client calling in a loop: the median of ``--rounds`` rounds, each
measuring every row in turn (so a change in the machine's speed hits all rows alike).
The two rows ending in ``/ floor`` are the append script's time over the design's floor
(``INCRBY``, ``TIME``, ``XADD``, ``PUBLISH``), each round's ratio, then the median; the
last row is decision 1's bound on the sync append (see :func:`floors`). With no
``--url`` it starts a private server.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from collections.abc import Callable
from contextlib import ExitStack
from typing import Any

import orjson
import redis

from benchmarks.server import print_costs, server_url
from redis_msglog import NO_RETRY, MessageLog

MESSAGE = {"role": "user", "content": "x" * 250}

SMALLEST = """
local t = redis.call('TIME')
local s = redis.call('INCR', KEYS[1])
redis.call('XADD', KEYS[2], s .. '-' .. t[1], 'msg', ARGV[1])
return s
"""
"""The least a script assigning a seq does."""

DESIGN = """
local t = redis.call('TIME')
local seq = redis.call('INCRBY', KEYS[1], 1)
local at = t[1] .. string.format('%06d', tonumber(t[2]))
redis.call('XADD', KEYS[2], string.format('%d-', seq) .. at, 'msg', ARGV[1])
redis.call('PUBLISH', KEYS[3], '{"first":' .. seq .. ',"messages":[' .. ARGV[1] .. ']}')
return seq .. ' ' .. at
"""
"""The design's floor for a plain append (docs/design.md): the clock, the counter, the
entry and the event, without the checks or the exactly-once record the append makes."""


def server_us(client: redis.Redis, call: Callable[[int], object], calls: int) -> float:
    """``INFO commandstats`` microseconds per call of ``call`` (its commands only)."""
    return timed(client, call, calls)[0]


def timed(client: redis.Redis, call: Callable[[int], object], calls: int) -> tuple[float, float]:
    """``INFO commandstats`` microseconds per call of ``call`` (its commands only), and
    the wall-clock microseconds per call the caller saw."""
    client.config_resetstat()
    started = time.perf_counter()
    for i in range(calls):
        call(i)
    wall = (time.perf_counter() - started) * 1e6 / calls
    stats: Any = client.info("commandstats")
    names = ("cmdstat_xadd", "cmdstat_evalsha", "cmdstat_eval")
    return sum(float(stats[name]["usec"]) for name in names if name in stats) / calls, wall


FLOOR = "script: the design's floor (INCRBY, TIME, XADD, PUBLISH)"
RAW = "raw XADD"
OF_BOUND = "sync append / raw XADD, over its ceiling (bound: >= 0.95)"
DEFAULT, NO_RETRY_ROW = "append script, producer (default)", "append script, NO_RETRY"


def floors(client: redis.Redis, calls: int, rounds: int = 1) -> dict[str, float]:
    """Server µs per call of each row (medians over ``rounds``), each append row over the
    floor, and decision 1's bound (docs/benchmarks.md): the sync append's calls per second
    over raw ``XADD``'s, wall clock, against the ceiling the floor allows,
    ``raw / (raw + floor - xadd)`` (wall µs of a raw ``XADD``; server µs of the floor
    script and of ``XADD``), each round's quotient, then the median."""
    body = orjson.dumps(MESSAGE)
    tag = uuid.uuid4().hex
    keys = [f"floor:{{{tag}}}:{name}" for name in ("seq", "stream", "events")]
    smallest, design = client.register_script(SMALLEST), client.register_script(DESIGN)
    calls_of: dict[str, Callable[[int], object]] = {
        RAW: lambda i: client.xadd(f"raw:{tag}", {"msg": body}),
        "script: TIME + INCR + XADD": lambda i: smallest(keys=keys[:2], args=[body]),
        FLOOR: lambda i: design(keys=keys, args=[body]),
    }
    variants: dict[str, dict[str, Any]] = {DEFAULT: {}, NO_RETRY_ROW: {"retry": NO_RETRY}}
    for label, options in variants.items():
        log = MessageLog(client, f"floor-{uuid.uuid4().hex}", **options)
        log.add("user", "warm up")  # loads the script
        calls_of[label] = _appending(log)
    figures: dict[str, list[float]] = {label: [] for label in calls_of}
    walls: dict[str, list[float]] = {label: [] for label in calls_of}
    for _ in range(rounds):  # every row in turn, each round
        for label, call in calls_of.items():
            server, wall = timed(client, call, calls)
            figures[label].append(server)
            walls[label].append(wall)
    results = {label: statistics.median(values) for label, values in figures.items()}
    for label in (DEFAULT, NO_RETRY_ROW):
        ratios = [ours / floor for ours, floor in zip(figures[label], figures[FLOOR], strict=True)]
        results[f"{label} / floor"] = statistics.median(ratios)
    of_bound = []
    for i in range(rounds):
        raw_wall = walls[RAW][i]
        ceiling = raw_wall / (raw_wall + figures[FLOOR][i] - figures[RAW][i])
        of_bound.append(raw_wall / walls[DEFAULT][i] / ceiling)
    results[OF_BOUND] = statistics.median(of_bound)
    results[f"{RAW}, wall µs a call"] = statistics.median(walls[RAW])
    results[f"{DEFAULT}, wall µs a call"] = statistics.median(walls[DEFAULT])
    return results


def _appending(log: MessageLog) -> Callable[[int], object]:
    return lambda i: log.append(MESSAGE)


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.floor")
    parser.add_argument("--url", help="an existing server (default: start a private one)")
    parser.add_argument("--calls", type=int, default=20_000, help="calls per row and round")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    with ExitStack() as stack:
        url = server_url(stack, args.url)
        results = floors(redis.Redis.from_url(url), args.calls, args.rounds)
    print_costs(results)
    return results


if __name__ == "__main__":
    main()
