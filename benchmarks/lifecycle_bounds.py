"""What each lifecycle write costs the server against the bytes it rewrites: a redaction
(near the end, and in the middle), a trim (keeping 50 entries, and keeping half), a trim
by ``max_age``, an erasure and a scope's erasure, on logs of 1,000 and 10,000 messages of
1 KB and 32 KB (docs/lifecycle.md, "Bounds").

    python -m benchmarks.lifecycle_bounds [--sizes 1000,10000] [--kb 1,32]

It starts a private server (its command statistics are reset around each call). Per call:
the server's time (the ``usec`` of ``INFO commandstats``, every command of the call), the
entries added again (``XADD`` calls but the call's own entries) and their bytes, the server
process's peak resident memory over its resident memory before the call (Linux's
``VmHWM``, reset through ``/proc/<pid>/clear_refs``: it counts the script's Lua memory,
which ``used_memory_peak`` does not, and no command resets that), and µs per rewritten
KB. "refused" is a call over ``max_rewrite_bytes`` (it writes nothing); its time is the
time to find that out.
"""

from __future__ import annotations

import argparse
import time
import uuid
from collections.abc import Callable
from contextlib import ExitStack
from datetime import timedelta
from typing import Any

import redis

from redis_msglog import Directory, InvalidEditError, MessageLog
from redis_msglog.testing import EphemeralServer, find_server_binary

BATCH_BYTES = 8 * 1024 * 1024  # the appends that build a log stay under max_batch_bytes


def _stats(client: redis.Redis) -> tuple[int, int]:
    """The server's time (µs) and XADD calls since the last reset, INFO and CONFIG aside."""
    usec = calls = 0
    for name, stat in client.info("commandstats").items():
        if not name.startswith(("cmdstat_info", "cmdstat_config")):
            usec += int(stat["usec"])
        if name == "cmdstat_xadd":
            calls = int(stat["calls"])
    return usec, calls


def _kb(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as status:
        line = next(line for line in status if line.startswith(field + ":"))
    return int(line.split()[1])


def _measure(client: redis.Redis, call: Callable[[], object], own: int = 1) -> dict[str, Any]:
    """One call, measured: ``own`` is how many XADDs it makes of its own (not rewrites)."""
    pid = int(client.info("server")["process_id"])
    client.config_resetstat()
    with open(f"/proc/{pid}/clear_refs", "w") as refs:
        refs.write("5")  # the peak resident size starts again from the current one
    before = _kb(pid, "VmRSS")
    refused = False
    try:
        call()
    except InvalidEditError:
        refused = True
    usec, xadds = _stats(client)
    peak = _kb(pid, "VmHWM")
    return {
        "usec": usec,
        "readded": 0 if refused else max(0, xadds - own),
        "peak_mb": max(0, peak - before) / 1024,
        "refused": refused,
    }


def _build(client: redis.Redis, n: int, kb: int, **options: Any) -> MessageLog:
    log = MessageLog(client, f"bench-{uuid.uuid4().hex[:8]}", **options)
    body = "x" * (kb * 1024 - 16)
    step = max(1, BATCH_BYTES // (kb * 1024 + 64))
    for start in range(1, n + 1, step):
        stop = min(n, start + step - 1)
        log.append_many([{"role": "user", "content": f"m{seq:08d}" + body} for seq in
                         range(start, stop + 1)])  # fmt: skip
    return log


def _cases(client: redis.Redis, n: int, kb: int) -> list[tuple[str, dict[str, Any]]]:
    rows = []
    log = _build(client, n, kb)
    rows.append(("redact near the end", _measure(client, lambda: log.redact(n - 10))))
    rows.append(("redact the middle", _measure(client, lambda: log.redact(n // 2))))
    rows.append(("trim keeping 50", _measure(client, lambda: log.trim(n - 50))))
    client.flushall()
    log = _build(client, n, kb)
    rows.append(("trim keeping half", _measure(client, lambda: log.trim(n // 2))))
    rows.append(("erase", _measure(client, lambda: log.erase(), own=0)))
    client.flushall()
    aged = _build(client, n, kb, max_age=timedelta(seconds=1))
    time.sleep(1.1)
    # Its own XADDs: the trim entry and the message.
    rows.append(("max_age step", _measure(client, lambda: aged.add("user", "new"), own=2)))
    client.flushall()
    scope = ("bench", uuid.uuid4().hex[:8])
    _build(client, n, kb, scope=scope)
    directory = Directory(client)
    rows.append(("scope erase", _measure(client, lambda: directory.erase(scope), own=0)))
    client.flushall()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000", help="log lengths, in messages")
    parser.add_argument("--kb", default="1,32", help="message sizes, in KB")
    args = parser.parse_args()
    binary = find_server_binary("any")
    if binary is None:
        raise SystemExit("no redis-server or valkey-server found")
    with ExitStack() as stack:
        server = stack.enter_context(EphemeralServer(binary))
        client = redis.Redis.from_url(server.url)
        version = client.info("server")["redis_version"]
        print(f"server {binary} {version}; one call each, private server")
        header = ("log", "msg", "call", "server ms", "re-added", "rewritten KB", "peak +MB",
                  "µs/KB")  # fmt: skip
        print("{:>7} {:>5}  {:<20} {:>10} {:>9} {:>13} {:>9} {:>7}".format(*header))
        for kb in (int(k) for k in args.kb.split(",")):
            for n in (int(s) for s in args.sizes.split(",")):
                for label, row in _cases(client, n, kb):
                    moved = row["readded"] * (kb * 1024 + 32) / 1024
                    per_kb = f"{row['usec'] / moved:.2f}" if moved else "-"
                    shown = "refused" if row["refused"] else str(row["readded"])
                    print(
                        f"{n:>7} {kb:>3}KB  {label:<20} {row['usec'] / 1000:>10.2f} "
                        f"{shown:>9} {moved:>13.0f} {row['peak_mb']:>9.1f} {per_kb:>7}"
                    )


if __name__ == "__main__":
    main()
