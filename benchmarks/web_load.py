"""Many event streams on distinct conversations beside a JSON reader and writer: the app
of ``redis_msglog.web`` under uvicorn in a process of its own (``max_followers`` raised
to the number of streams), and in this process (one asyncio loop) a reader fetching a
page of one conversation in a loop and a writer appending to another, first with no
streams open, then with N streams open on N distinct conversations (N followers, each
in a blocking ``XREAD`` on the followers' own pool).

    python -m benchmarks.web_load [--url redis://...] [--streams 1000] [--seconds 10]
        [--client asyncio|sync]

Reports the reader's and the writer's p50 and p99 (ms) in both phases and the server's
memory per open stream (resident set with the streams minus idle, over N).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import subprocess
import sys
import time
import uuid
from contextlib import ExitStack
from typing import Any

import httpx
import redis
import redis.asyncio

from benchmarks.server import server_url
from benchmarks.web_stream import _memory_kib, _percentile, _raise_file_limit, open_events


def serve(url: str, streams: int, kind: str) -> None:
    """The server process: the app on a free loopback port, printed."""
    import uvicorn

    from redis_msglog.web import create_app

    _raise_file_limit()

    def allow(request: Any, conversation: str, action: str) -> bool:
        return True  # a benchmark on loopback

    client = (redis.Redis if kind == "sync" else redis.asyncio.Redis).from_url(url)
    app = create_app(
        client, authorize=allow, allow_appends=True, heartbeat=60.0, max_followers=streams
    )
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4096)
    print(f"port {listener.getsockname()[1]}", flush=True)
    uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[listener])


async def open_stream(port: int, conversation: str) -> asyncio.StreamWriter:
    """One event stream, open once the app answered 200 (its follower joined)."""
    _, writer = await open_events(port, f"/conversations/{conversation}/events")
    return writer


async def load(base: str, seconds: float) -> tuple[list[float], list[float]]:
    """A reader (a page of 20 rows, in a loop) and a writer (an append every 10 ms) for
    ``seconds``: their latencies, ms."""
    tag = uuid.uuid4().hex[:8]
    read_id, write_id = f"bench-load-r-{tag}", f"bench-load-w-{tag}"
    reads: list[float] = []
    writes: list[float] = []
    async with httpx.AsyncClient(base_url=base, timeout=60) as http:
        for i in range(20):
            await http.post(
                f"/conversations/{read_id}/messages",
                json={"role": "user", "content": f"row {i} " + "x" * 200},
            )
        end = time.perf_counter() + seconds

        async def reader() -> None:
            while time.perf_counter() < end:
                start = time.perf_counter()
                answer = await http.get(f"/conversations/{read_id}/messages?limit=20")
                answer.raise_for_status()
                reads.append((time.perf_counter() - start) * 1000)

        async def writer() -> None:
            while time.perf_counter() < end:
                start = time.perf_counter()
                answer = await http.post(
                    f"/conversations/{write_id}/messages", json={"role": "user", "content": "w"}
                )
                answer.raise_for_status()
                writes.append((time.perf_counter() - start) * 1000)
                await asyncio.sleep(0.01)

        await asyncio.gather(reader(), writer())
    return reads, writes


async def measure(base: str, port: int, pid: int, streams: int, seconds: float) -> dict[str, float]:
    quiet_reads, quiet_writes = await load(base, seconds)
    idle = _memory_kib(pid)["VmRSS"]
    tag = uuid.uuid4().hex[:8]
    writers: list[asyncio.StreamWriter] = []
    for start in range(0, streams, 100):  # in batches: the listen backlog stays short
        writers += await asyncio.gather(
            *(
                open_stream(port, f"bench-stream-{tag}-{n}")
                for n in range(start, min(start + 100, streams))
            )
        )
    await asyncio.sleep(1)  # every follower in its XREAD
    loaded = _memory_kib(pid)["VmRSS"]
    busy_reads, busy_writes = await load(base, seconds)
    for writer in writers:
        writer.close()
    results: dict[str, float] = {}
    for phase, reads, writes in (
        ("no streams", quiet_reads, quiet_writes),
        (f"{streams} streams", busy_reads, busy_writes),
    ):
        results[f"reader p50, {phase} (ms)"] = statistics.median(reads)
        results[f"reader p99, {phase} (ms)"] = _percentile(reads, 0.99)
        results[f"writer p99, {phase} (ms)"] = _percentile(writes, 0.99)
        results[f"reader pages, {phase}"] = len(reads)
    results["server RSS idle (KiB)"] = idle
    results["server RSS with the streams (KiB)"] = loaded
    results["server KiB per stream"] = (loaded - idle) / streams
    return results


def run(url: str, streams: int, seconds: float, kind: str) -> dict[str, float]:
    command = [sys.executable, "-m", "benchmarks.web_load", "--serve", url]
    server = subprocess.Popen(
        [*command, "--streams", str(streams), "--client", kind],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline().split()[1])
        base = f"http://127.0.0.1:{port}"
        return asyncio.run(measure(base, port, server.pid, streams, seconds))
    finally:
        server.terminate()
        server.wait(timeout=30)


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="an existing server (default: start a private one)")
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=10.0, help="each phase's length")
    parser.add_argument("--client", choices=("asyncio", "sync"), default="asyncio")
    parser.add_argument("--serve", metavar="URL", help=argparse.SUPPRESS)  # the server process
    args = parser.parse_args(argv)
    if args.serve:
        serve(args.serve, args.streams, args.client)
        return {}
    _raise_file_limit()
    with ExitStack() as stack:
        url = server_url(stack, args.url)
        results = run(url, args.streams, args.seconds, args.client)
    print(f"{args.streams} event streams on distinct conversations, {args.client} client")
    print("| measure | value |")
    print("|---|---:|")
    for name, value in results.items():
        print(f"| {name} | {value:.2f} |")
    return results


if __name__ == "__main__":
    main()
