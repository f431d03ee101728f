"""What a draft costs (docs/drafts.md): one writer streaming tokens at a given rate into a
draft while one ``follow(drafts=True)`` reader watches it, against the raw floor of the
same workload: one ``XADD`` per token to a plain stream and one ``XREAD BLOCK`` reader.

    python -m benchmarks.drafts [--tokens 1000] [--rates 100,1000] [--drafts 100]

It starts a private server. Per rate: the round trips the writer made per 1,000 tokens
(the server's ``EVALSHA`` calls: each flush or heartbeat is one; the raw floor makes one
``XADD`` per token), and the delay from a token's write to the reader's receipt, p50 and
p99, for the draft and for the raw floor. Then the server memory one open draft holds,
over ``--drafts`` drafts of ``--tokens`` tokens each (``used_memory`` before and after).
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import redis

from redis_msglog import DraftDelta, MessageLog
from redis_msglog.testing import EphemeralServer, find_server_binary

TOKEN = "tok "


def _percentiles(delays: list[float]) -> tuple[float, float]:
    ordered = sorted(delays)
    return statistics.median(ordered) * 1000, ordered[int(len(ordered) * 0.99) - 1] * 1000


def _paced(tokens: int, rate: float, write: Callable[[int], object]) -> list[float]:
    """Call ``write(i)`` for each token at ``rate`` a second; the time of each."""
    started, times = time.perf_counter(), []
    for i in range(tokens):
        due = started + i / rate
        pause = due - time.perf_counter()
        if pause > 0:
            time.sleep(pause)
        times.append(time.perf_counter())
        write(i)
    return times


def _draft_run(client: redis.Redis, tokens: int, rate: float) -> dict[str, Any]:
    conversation = f"bench-{uuid.uuid4().hex[:8]}"
    log, reader = MessageLog(client, conversation), MessageLog(client, conversation)
    received: dict[int, float] = {}  # the last token each delta carries, when received
    total = len(TOKEN) * tokens

    def follow() -> None:
        seen = 0
        for item in reader.follow(drafts=True):
            if isinstance(item, DraftDelta):
                seen += len(item.text)
                received[seen // len(TOKEN) - 1] = time.perf_counter()
                if seen >= total:
                    return

    thread = threading.Thread(target=follow, daemon=True)
    thread.start()
    time.sleep(0.2)
    client.config_resetstat()
    with log.draft() as draft:
        sent = _paced(tokens, rate, lambda i: draft.write(TOKEN))
        draft.flush()
        thread.join(30)
        calls = int(client.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0))
    # A token is received with the first delta that carries it.
    delays, arrived = [], sorted(received.items())
    for i, at in enumerate(sent):
        later = next(t for last, t in arrived if last >= i)
        delays.append(later - at)
    p50, p99 = _percentiles(delays)
    return {"round_trips_per_1000": calls * 1000 / tokens, "p50_ms": p50, "p99_ms": p99}


def _raw_run(client: redis.Redis, tokens: int, rate: float) -> dict[str, Any]:
    stream = f"bench-raw-{uuid.uuid4().hex[:8]}"
    reader = redis.Redis(connection_pool=client.connection_pool)
    received: list[float] = []

    def follow() -> None:
        last = "0-0"
        while len(received) < tokens:
            replies: Any = reader.xread({stream: last}, block=1000)
            for _, entries in replies or []:
                for entry_id, _ in entries:
                    received.append(time.perf_counter())
                    last = entry_id

    thread = threading.Thread(target=follow, daemon=True)
    thread.start()
    time.sleep(0.2)
    sent = _paced(tokens, rate, lambda i: client.xadd(stream, {"d": TOKEN}))
    thread.join(30)
    p50, p99 = _percentiles([r - s for s, r in zip(sent, received, strict=True)])
    client.delete(stream)
    return {"round_trips_per_1000": 1000.0, "p50_ms": p50, "p99_ms": p99}


def _memory_per_draft(client: redis.Redis, drafts: int, tokens: int) -> float:
    log = MessageLog(client, f"bench-{uuid.uuid4().hex[:8]}")
    before = int(client.info("memory")["used_memory"])
    writers = []
    for _ in range(drafts):
        writer = log.draft(lease=timedelta(minutes=5))
        writer.__enter__()
        for _ in range(tokens):
            writer.write(TOKEN)
        writer.flush()
        writers.append(writer)
    after = int(client.info("memory")["used_memory"])
    for writer in writers:
        writer.abort()
    return (after - before) / drafts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=1000)
    parser.add_argument("--rates", default="100,1000")
    parser.add_argument("--drafts", type=int, default=100)
    args = parser.parse_args()
    binary = find_server_binary("any")
    if binary is None:
        raise SystemExit("no redis-server or valkey-server found")
    with EphemeralServer(binary) as server:
        client = redis.Redis.from_url(server.url)
        print("| rate (tokens/s) | run | round trips / 1,000 tokens | p50 ms | p99 ms |")
        print("|---|---|---|---|---|")
        for rate in (float(r) for r in args.rates.split(",")):
            for name, run in (("draft", _draft_run), ("raw XADD + XREAD", _raw_run)):
                r = run(client, args.tokens, rate)
                print(
                    f"| {rate:g} | {name} | {r['round_trips_per_1000']:.0f} "
                    f"| {r['p50_ms']:.1f} | {r['p99_ms']:.1f} |"
                )
        per_draft = _memory_per_draft(client, args.drafts, args.tokens)
        print(f"\nserver memory per open draft of {args.tokens} tokens: {per_draft / 1024:.1f} KiB")


if __name__ == "__main__":
    main()
