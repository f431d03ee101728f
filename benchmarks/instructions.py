"""Server instructions per call, counted by callgrind: steady figures that load does not
move (docs/benchmarks.md, "The floor of the append's server time").

    python -m benchmarks.instructions [--calls 2000] [--server redis-server]

Starts a private ``redis-server`` under ``valgrind --tool=callgrind``, collecting only
inside ``readQueryFromClient`` and ``writeToClient`` (a request read and run, its reply
written: not the server's cron or event loop), and counts each row: ``--calls`` calls
after 200 to warm up, the counters zeroed before them and dumped after. The rows: a raw
``XADD``, the design's floor script (``benchmarks.floor.DESIGN``: ``INCRBY``, ``TIME``,
``XADD``, ``PUBLISH``), the plain append (default: the idempotent producer) and with
``NO_RETRY``, one of a log with a lifetime, a keyed append (a new key each call) and a
conditional one (``expected_seq``, none conflicting); then each plain append over the
floor (the bound: 1.1x). Needs ``valgrind``.
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import orjson
import redis

from benchmarks.floor import DESIGN, MESSAGE
from redis_msglog import NO_RETRY, MessageLog

WARM_UP = 200
FLOOR_ROW = "floor script (INCRBY, TIME, XADD, PUBLISH)"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@contextmanager
def callgrind_server(server: str, folder: str) -> Iterator[tuple[redis.Redis, int]]:
    """A private server under callgrind: its client and its valgrind process id."""
    port = _free_port()
    command = [
        "valgrind", "--tool=callgrind", "--collect-atstart=no",
        "--toggle-collect=readQueryFromClient", "--toggle-collect=writeToClient",
        f"--callgrind-out-file={folder}/callgrind.out.%p",
        server, "--port", str(port), "--save", "", "--appendonly", "no",
    ]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    client = redis.Redis(port=port)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise RuntimeError(f"{server} under callgrind did not start") from None
                time.sleep(0.5)
        yield client, process.pid
    finally:
        client.close()
        process.terminate()
        process.wait(timeout=120)


def _control(pid: int, flag: str) -> None:
    subprocess.run(["callgrind_control", flag, str(pid)], check=True, capture_output=True)


def instructions(pid: int, folder: str, call: Callable[[int], object], calls: int) -> float:
    """Instructions per call of ``call`` (after a warm-up), from a dump of its own."""
    for i in range(WARM_UP):
        call(i)
    _control(pid, "-z")
    for i in range(calls):
        call(i)
    before = set(glob.glob(f"{folder}/callgrind.out.*"))
    _control(pid, "-d")
    dumps = sorted(set(glob.glob(f"{folder}/callgrind.out.*")) - before, key=os.path.getmtime)
    text = open(dumps[-1], encoding="utf-8").read()  # noqa: SIM115 (read whole, at once)
    found = re.search(r"^(?:totals|summary): (\d+)", text, re.MULTILINE)
    if found is None:
        raise RuntimeError(f"no totals in {dumps[-1]}")
    return int(found[1]) / calls


def rows(client: redis.Redis) -> dict[str, Callable[[int], object]]:
    body = orjson.dumps(MESSAGE)
    tag = uuid.uuid4().hex
    keys = [f"floor:{{{tag}}}:{name}" for name in ("seq", "stream", "events")]
    design = client.register_script(DESIGN)
    calls: dict[str, Callable[[int], object]] = {
        "raw XADD": lambda i: client.xadd(f"raw:{tag}", {"msg": body}),
        FLOOR_ROW: lambda i: design(keys=keys, args=[body]),
    }
    variants: dict[str, dict[str, Any]] = {"plain append (default)": {}}
    variants["plain append, NO_RETRY"] = {"retry": NO_RETRY}
    variants["append of a log with a lifetime (ttl)"] = {"ttl": timedelta(days=1)}
    for label, options in variants.items():
        calls[label] = _appending(MessageLog(client, f"calls-{uuid.uuid4().hex}", **options))
    keyed = MessageLog(client, f"calls-{uuid.uuid4().hex}")
    calls["keyed append (a new key each call)"] = lambda i: keyed.append(
        MESSAGE, idempotency_key=f"key-{i}"
    )
    calls["conditional append (expected_seq)"] = _conditional(
        MessageLog(client, f"calls-{uuid.uuid4().hex}")
    )
    return calls


def _appending(log: MessageLog) -> Callable[[int], object]:
    return lambda i: log.append(MESSAGE)


def _conditional(log: MessageLog) -> Callable[[int], object]:
    """Appends each expecting the seq the one before it returned (none conflicts)."""
    last = [0]

    def append(i: int) -> object:
        last[0] = log.append(MESSAGE, expected_seq=last[0])
        return last[0]

    return append


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.instructions")
    parser.add_argument("--calls", type=int, default=2_000, help="calls per row")
    parser.add_argument("--server", default=shutil.which("redis-server") or "redis-server")
    args = parser.parse_args(argv)
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed")
    results: dict[str, float] = {}
    with (
        tempfile.TemporaryDirectory() as folder,
        callgrind_server(args.server, folder) as (
            client,
            pid,
        ),
    ):
        for label, call in rows(client).items():
            results[label] = instructions(pid, folder, call, args.calls)
    for label in ("plain append (default)", "plain append, NO_RETRY"):
        results[f"{label} / floor"] = results[label] / results[FLOOR_ROW]
    for label, value in results.items():
        print(f"{label:48} {value:12,.2f}")
    return results


if __name__ == "__main__":
    main()
