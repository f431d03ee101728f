"""Many Server-Sent Event clients on one conversation: the app of
``redis_msglog.web`` under uvicorn in a process of its own, N clients in this process
(plain asyncio sockets, one loop) all following one conversation while messages are
appended; the time from commit to delivery, p50 and p99 over every (client, message),
and the server process's memory, idle and with the N clients connected.

    python -m benchmarks.web_stream [--url redis://...] [--clients 1000] [--messages 50]

Commit time is the entry's ``at`` (the Redis server's clock at commit; same machine, so
the same clock as this process's ``time.time()``). The baseline, in the same loop and
run: one raw ``XREAD BLOCK`` reader of the conversation's stream (Redis's own delivery,
no app, no HTTP), so the ratio says what the app and its fan-out add. Every client must
see every message exactly once and in order, else the run fails.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import socket
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

import redis
import redis.asyncio

from benchmarks.server import server_url
from redis_msglog import AsyncMessageLog
from redis_msglog._core.stored.keys import ConversationKeys


@dataclass
class Client:
    """One SSE client: the seqs it received, in order, and when."""

    seqs: list[int] = field(default_factory=list)
    times: list[float] = field(default_factory=list)


def serve(url: str) -> None:
    """The server process: the app under uvicorn on a free loopback port; prints it."""
    import uvicorn

    from redis_msglog.web import create_app

    _raise_file_limit()

    def allow(request: Any, conversation: str, action: str) -> bool:
        return True  # a benchmark on loopback

    app = create_app(redis.asyncio.Redis.from_url(url), authorize=allow, heartbeat=60.0)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))  # a free port, chosen by the kernel
    listener.listen(4096)  # connections wait in the backlog until uvicorn accepts them
    print(f"port {listener.getsockname()[1]}", flush=True)
    uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[listener])


def _raise_file_limit() -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def _memory_kib(pid: int) -> dict[str, int]:
    """Resident set now (VmRSS) and at its peak (VmHWM), KiB, from /proc."""
    with open(f"/proc/{pid}/status") as status:
        fields = dict(line.split(":", 1) for line in status)
    return {name: int(fields[name].split()[0]) for name in ("VmRSS", "VmHWM")}


async def open_events(port: int, path: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """An event stream of the server on ``port``, once it answered 200 (its status line
    read; the headers and events follow on the reader)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        f"GET {path} HTTP/1.1\r\nHost: bench\r\nAccept: text/event-stream\r\n\r\n".encode()
    )
    status = await reader.readline()
    if b" 200 " not in status:
        raise RuntimeError(f"{path} answered {status!r}")
    return reader, writer


async def follow(
    port: int, conversation: str, client: Client, connected: asyncio.Event, progress: asyncio.Event
) -> None:
    """Read one event stream to its end: record each event's seq (``id:``) on arrival."""
    reader, writer = await open_events(port, f"/conversations/{conversation}/events?after=0")
    connected.set()
    try:
        while line := await reader.readline():
            # chunked transfer: the event lines arrive whole inside a chunk
            if line.startswith(b"id: "):
                client.times.append(time.time())
                client.seqs.append(int(line[4:]))
                progress.set()
    finally:
        writer.close()


async def raw_follower(
    url: str,
    stream: str,
    committed: dict[int, float],
    arrivals: dict[int, float],
    progress: asyncio.Event,
) -> None:
    """The baseline: one XREAD BLOCK reader of the stream. Its entry ids
    (``<seq>-<at µs>``) also give every entry's commit time."""
    reader = redis.asyncio.Redis.from_url(url)
    last = "0-0"
    try:
        while True:
            answer: Any = await reader.xread({stream: last}, block=1000)
            now = time.time()
            for _, entries in answer:
                for entry_id, _ in entries:
                    last = entry_id.decode()
                    seq, at = map(int, last.split("-"))
                    committed[seq], arrivals[seq] = at / 1e6, now
                    progress.set()
    finally:
        await reader.aclose()


async def measure(url: str, port: int, clients: int, messages: int, interval: float) -> Any:
    conversation = f"bench-web-{uuid.uuid4().hex[:8]}"
    log = AsyncMessageLog(redis.asyncio.Redis.from_url(url), conversation)
    followers = [Client() for _ in range(clients)]
    connected = [asyncio.Event() for _ in range(clients)]
    progress = asyncio.Event()
    tasks = [
        asyncio.create_task(follow(port, conversation, c, e, progress))
        for c, e in zip(followers, connected, strict=True)
    ]
    for event in connected:
        await event.wait()
    committed: dict[int, float] = {}
    raw: dict[int, float] = {}
    stream = ConversationKeys.build("msglog", conversation).stream
    raw_task = asyncio.create_task(raw_follower(url, stream, committed, raw, progress))
    # seq 1 warms every stream up: all N clients are then live followers
    await log.add("user", "warm-up")
    await until(progress, lambda: all(c.seqs for c in followers))
    for n in range(messages):
        last = await log.add("assistant", f"message {n} " + "x" * 200)
        await asyncio.sleep(interval)
    await until(progress, lambda: last in raw and all(c.seqs[-1] >= last for c in followers))
    for task in [*tasks, raw_task]:
        task.cancel()
    await asyncio.gather(*tasks, raw_task, return_exceptions=True)
    return followers, committed, raw


async def until(progress: asyncio.Event, done: Callable[[], bool]) -> None:
    """Wait until ``done()``, checked again whenever a reader received something."""
    while not done():
        progress.clear()
        await progress.wait()


def _check_exactly_once(followers: list[Client], last: int) -> None:
    expected = list(range(1, last + 1))
    for index, client in enumerate(followers):
        if client.seqs != expected:
            raise SystemExit(f"client {index} received {client.seqs}, expected {expected}")


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run(url: str, clients: int, messages: int, interval: float) -> dict[str, float]:
    """Start the server process, measure, and return the figures (ms, KiB, ratios)."""
    server = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.web_stream", "--serve", url],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline().split()[1])
        idle = _memory_kib(server.pid)
        followers, committed, raw = asyncio.run(measure(url, port, clients, messages, interval))
        loaded = _memory_kib(server.pid)
    finally:
        server.terminate()
        server.wait(timeout=30)
    _check_exactly_once(followers, max(committed))
    measured = [seq for seq in committed if seq > 1]  # seq 1 was the warm-up
    delays = [
        (at - committed[seq]) * 1000
        for client in followers
        for seq, at in zip(client.seqs, client.times, strict=True)
        if seq > 1
    ]
    raw_delays = [(raw[seq] - committed[seq]) * 1000 for seq in measured]
    # when each message reached its first client: the fan-out's start, without the
    # time this one process takes to read N sockets
    first = {
        seq: min(at for c in followers for s, at in zip(c.seqs, c.times, strict=True) if s == seq)
        for seq in measured
    }
    first_delays = [(first[seq] - committed[seq]) * 1000 for seq in measured]
    results = {
        "commit to delivery p50, SSE clients (ms)": statistics.median(delays),
        "commit to delivery p99, SSE clients (ms)": _percentile(delays, 0.99),
        "commit to first client p50, SSE (ms)": statistics.median(first_delays),
        "commit to delivery p50, raw XREAD BLOCK (ms)": statistics.median(raw_delays),
        "server RSS idle (KiB)": idle["VmRSS"],
        "server RSS with the clients (KiB)": loaded["VmRSS"],
        "server peak RSS (KiB)": loaded["VmHWM"],
        "server KiB per client": (loaded["VmHWM"] - idle["VmRSS"]) / clients,
    }
    results["p50 SSE / p50 raw XREAD"] = results["commit to delivery p50, SSE clients (ms)"] / max(
        results["commit to delivery p50, raw XREAD BLOCK (ms)"], 1e-3
    )
    return results


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="an existing server (default: start a private one)")
    parser.add_argument("--clients", type=int, default=1000)
    parser.add_argument("--messages", type=int, default=50)
    parser.add_argument("--interval", type=float, default=0.05, help="seconds between appends")
    parser.add_argument("--serve", metavar="URL", help=argparse.SUPPRESS)  # the server process
    args = parser.parse_args(argv)
    if args.serve:
        serve(args.serve)
        return {}
    _raise_file_limit()
    with ExitStack() as stack:
        url = server_url(stack, args.url)
        results = run(url, args.clients, args.messages, args.interval)
    print(f"{args.clients} SSE clients, one conversation, {args.messages} messages")
    print("| measure | value |")
    print("|---|---:|")
    for name, value in results.items():
        print(f"| {name} | {value:.2f} |")
    return results


if __name__ == "__main__":
    main()
