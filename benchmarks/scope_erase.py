"""What erasing a scope costs beside a large keyspace (docs/lifecycle.md, "Erasing a
scope"): ``--conversations`` scoped conversations (each with a few messages and
``--keyed`` appends made with an idempotency key) beside ``--keys`` unrelated keys, then
one ``Directory.erase`` of their scope: its wall time and the server's ``SCAN`` calls
(``INFO commandstats``), which must not grow with the keyspace.

    python -m benchmarks.scope_erase [--url redis://...] [--conversations 200] [--keys 200000]

With no ``--url`` it starts a private server (the keyspace is filled there; with a
``--url`` the unrelated keys are written under ``bench-scope-filler:`` and left).
"""

from __future__ import annotations

import argparse
import time
import uuid
from contextlib import ExitStack

import redis

from benchmarks.server import server_url
from redis_msglog import Directory, MessageLog

FILL_BATCH = 10_000


def _commands(client: redis.Redis, name: str) -> int:
    stats = client.info("commandstats").get(f"cmdstat_{name}")
    return int(stats["calls"]) if stats else 0


def fill(client: redis.Redis, keys: int) -> None:
    """``keys`` unrelated string keys, in pipelined batches."""
    for start in range(0, keys, FILL_BATCH):
        pipe = client.pipeline(transaction=False)
        for i in range(start, min(keys, start + FILL_BATCH)):
            pipe.set(f"bench-scope-filler:{i}", "x")
        pipe.execute()


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url")
    parser.add_argument("--conversations", type=int, default=200)
    parser.add_argument("--keys", type=int, default=200_000)
    parser.add_argument("--keyed", type=int, default=2, help="keyed appends a conversation")
    args = parser.parse_args(argv)
    with ExitStack() as stack:
        client = redis.Redis.from_url(server_url(stack, args.url))
        stack.callback(client.close)
        fill(client, args.keys)
        tenant = f"bench{uuid.uuid4().hex[:8]}"
        for i in range(args.conversations):
            log = MessageLog(client, f"{tenant}:c{i}", scope=(tenant, "u"))
            log.append_many([{"role": "user", "content": f"message {n}"} for n in range(3)])
            for n in range(args.keyed):
                log.add("user", f"keyed {n}", idempotency_key=f"k{n}")
        scans = _commands(client, "scan")
        started = time.perf_counter()
        erased = Directory(client).erase((tenant,))
        elapsed = time.perf_counter() - started
        assert len(erased) == args.conversations, len(erased)
        results = {
            "scope erase, wall time (ms)": elapsed * 1000,
            "SCAN calls": float(_commands(client, "scan") - scans),
            "conversations": float(args.conversations),
            "unrelated keys": float(args.keys),
        }
    for label, value in results.items():
        print(f"{label:<28}  {value:12.1f}")
    return results


if __name__ == "__main__":
    main()
