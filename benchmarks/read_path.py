"""What the reads the benchmark targets bound cost, next to the baseline each is bounded by.

    python -m benchmarks.read_path [--url redis://...] [--size 20000] [--rounds 5]

Three reads of the sync client, each beside its baseline measured in the same round:

- cold ``last(50)`` against raw redis-py ``XREVRANGE ... COUNT 50`` + ``orjson.loads``
  (a ``gc.collect()``, then ``--calls`` calls back to back, per call);
- cold ``all()`` of ``--size`` messages (the warm-read cache off: a process's first
  read) against raw ``XRANGE`` paging (1,000 a page) + ``orjson.loads`` (a
  ``gc.collect()`` before each call);
- the warm read: ``all()`` right after one new message, the cache warm, against one
  ``count()``: the median of ``--turns`` turns of a back-to-back loop; and in the same
  turns ``list(rows)`` of the list it returned. The line under the table is issue 36's
  decision 3: the warm read over ``2 x count() + 1.5 x copying the list`` (at most 1.0),
  each turn's quotient, then the median (run it at ``--size`` 1000, 20000 and 100000).

Client CPU is ``time.process_time`` and wall ``time.perf_counter`` per call; server CPU
the server main thread's ``INFO cpu`` per call. The last column names each row's
baseline: ``python -m benchmarks.compare`` divides by it round by round.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
import uuid
from collections.abc import Callable
from contextlib import ExitStack
from functools import partial
from typing import Any

import redis

import redis_msglog
from benchmarks.server import server_url
from redis_msglog import MessageLog

from .contenders import RawSync
from .run import _server_counters, messages

Figures = dict[str, list[tuple[float, float, float]]]  # (client CPU, wall, server CPU) µs
LAST_N = 50
RAW_LAST = f"raw XREVRANGE + orjson.loads, last {LAST_N}"
OURS_LAST = f"msglog last({LAST_N}), cold"
COUNT = "msglog count()"
WARM = "msglog all() after one new message, warm"
COPY = "list(rows) of the list all() returned"
ROW_BYTES = 2048  # above the cache's estimate of a chat-sized row (~1.3 KB)
DECISION_3 = "warm all() / (2 x count() + 1.5 x list(rows)): at most 1.0"


def _raw_all(size: int) -> str:
    return f"raw XRANGE paging + orjson.loads, {size:,}"


def _ours_all(size: int) -> str:
    return f"msglog all() of {size:,}, cold"


def baselines(size: int) -> dict[str, str]:
    """Each measured row's baseline row (the ratios the targets are written in)."""
    return {OURS_LAST: RAW_LAST, _ours_all(size): _raw_all(size), WARM: COUNT}


def _measure(admin: redis.Redis, call: Callable[[], Any], calls: int, collect: bool) -> tuple[
    float, float, float
]:  # fmt: skip
    """Per call: client CPU, wall and server CPU (µs) of ``calls`` calls back to back,
    after one full collection (``collect``: the harness's own heap is not the call's)."""
    if collect:
        gc.collect()
    _, server_before = _server_counters(admin)
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(calls):
        call()
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    _, server_after = _server_counters(admin)
    n = calls / 1e6
    return cpu / n, wall / n, (server_after - server_before) / n


def _cache_off(client: redis.Redis, off: bool, size: int = 0) -> None:
    """The warm-read cache off, or on with a budget that holds ``size`` chat-sized rows
    (decision 3's condition: the default, 64 MiB, holds ~50,000)."""
    # getattr: versions from before the cache
    configure = getattr(redis_msglog, "configure_read_cache", None)
    if configure is not None:
        budget = max(redis_msglog.DEFAULT_READ_CACHE_BYTES, size * ROW_BYTES)
        configure(client, 0 if off else budget)


def _median(samples: list[tuple[float, float, float]]) -> tuple[float, float, float]:
    a, b, c = (statistics.median(s[i] for s in samples) for i in range(3))
    return a, b, c


def _warm_turns(
    admin: redis.Redis,
    log: MessageLog,
    turns: int,
    figures: Figures,
    bound: tuple[list[float], list[float]],
) -> None:
    """``turns`` turns of an agent loop (one new message, one warm read, then one
    ``count()`` and one copy of the list it returned): their medians into ``figures``,
    and each turn's quotient of decision 3 (client CPU, wall) into ``bound``."""
    counts, warm, copies = [], [], []
    for turn in range(turns):
        log.append(messages(1, tag=f"warm{turn}:")[0])
        read: list[Any] = []
        warm.append(_measure(admin, partial(_keep, read, log.all), 1, False))
        counts.append(_measure(admin, log.count, 1, False))
        # The copy kept, as all()'s list is: its freeing is not the read's.
        copies.append(_measure(admin, partial(_keep, read, partial(list, read[0])), 1, False))
        for i in (0, 1):
            bound[i].append(warm[-1][i] / (2 * counts[-1][i] + 1.5 * copies[-1][i]))
    figures[COUNT].append(_median(counts))
    figures[WARM].append(_median(warm))
    figures[COPY].append(_median(copies))


def _keep(kept: list[Any], call: Callable[[], Any]) -> None:
    kept.append(call())


def read_figures(url: str, size: int, calls: int, turns: int, rounds: int) -> Figures:
    admin, client = redis.Redis.from_url(url), redis.Redis.from_url(url)
    conversation = f"reads-{uuid.uuid4().hex}"
    raw, log = RawSync(url, conversation), MessageLog(client, conversation)
    history = messages(size)
    raw.fill(raw.prepare(history))
    for i in range(0, size, 1000):
        log.append_many(history[i : i + 1000])
    names = [RAW_LAST, OURS_LAST, _raw_all(size), _ours_all(size), COUNT, WARM, COPY]
    figures: Figures = {name: [] for name in names}
    bound: tuple[list[float], list[float]] = ([], [])  # decision 3, client CPU and wall
    _cache_off(client, True)
    for call in (lambda: raw.last(LAST_N), lambda: log.last(LAST_N), raw.all, log.all):
        call()  # warmed up: connections, the script, imports (compare runs one round)
    try:
        for _ in range(rounds):
            _cache_off(client, True)
            figures[RAW_LAST].append(_measure(admin, lambda: raw.last(LAST_N), calls, True))
            figures[OURS_LAST].append(_measure(admin, lambda: log.last(LAST_N), calls, True))
            figures[_raw_all(size)].append(_measure(admin, raw.all, 1, True))
            figures[_ours_all(size)].append(_measure(admin, log.all, 1, True))
            _cache_off(client, False, size)
            log.all()  # the cache warm: the next reads fetch only what is new
            _warm_turns(admin, log, turns, figures, bound)
    finally:
        client.delete(*client.keys(f"*{{{conversation}}}*"))  # both, every key
    figures[DECISION_3] = [(statistics.median(bound[0]), statistics.median(bound[1]), 0.0)]
    return figures


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.read_path", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--url", help="an existing server (default: start a private one)")
    parser.add_argument("--size", type=int, default=20_000, help="messages read by all()")
    parser.add_argument("--calls", type=int, default=100, help="last(50) calls per round")
    parser.add_argument("--turns", type=int, default=25, help="warm turns per round")
    parser.add_argument("--rounds", type=int, default=5, help="rounds (medians are shown)")
    args = parser.parse_args(argv)
    with ExitStack() as stack:
        url = server_url(stack, args.url)
        figures = read_figures(url, args.size, args.calls, args.turns, args.rounds)
    base = baselines(args.size)
    print("| per call, µs (median) | client CPU | wall | server CPU | baseline |")
    print("|---|---:|---:|---:|---|")
    for name, samples in figures.items():
        cpu, wall, server = _median(samples)
        digits = 2 if name == DECISION_3 else 1  # a ratio (client CPU, wall), not µs
        print(f"| {name} | {cpu:.{digits}f} | {wall:.{digits}f} | {server:.{digits}f} | "
              f"{base.get(name, '')} |")  # fmt: skip


if __name__ == "__main__":
    main()
