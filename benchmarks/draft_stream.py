"""One answer streamed to many browsers (docs/drafts.md, "Cost"): a writer at ``--rate``
tokens a second into a draft, ``--clients`` SSE clients of the web app (a process of its
own) receiving it; beside it, one raw ``XREAD BLOCK`` reader of the draft's own stream
(Redis's delivery of the same deltas, no app, no HTTP), and the same workload on Vercel's
``resumable-stream`` (Node, node-redis, the same Redis; benchmarks/js).

    python -m benchmarks.draft_stream [--url redis://...] [--clients 1000] [--tokens 1000]
        [--rate 100] [--contenders msglog,resumable-stream]

Per contender: the delay from a token's write to each client's receipt, p50 and p99,
over every (client, token) written once all clients were connected; the commands Redis
ran per 1,000 tokens (``INFO commandstats``, those scripts run included: the work the
fan-out costs the server); the Redis memory the open answer held at its last token.
Both contenders' clients are the same asyncio sockets in this process; every client
must receive every token exactly once, else the run fails. Node (and npm, for its first
``npm ci``) must be on the PATH for the contender.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import redis
import redis.asyncio

from benchmarks.server import server_url
from benchmarks.web_stream import _raise_file_limit, open_events
from redis_msglog import MessageLog
from redis_msglog._core.stored.keys import ConversationKeys

JS = Path(__file__).parent / "js"
Parse = Callable[[bytes, bytes], "str | None"]


@dataclass
class Client:
    """When one client received each token (its first time), and any repeat."""

    arrivals: dict[int, float] = field(default_factory=dict)
    repeats: int = 0

    def got(self, text: str, now: float) -> None:
        for token in text.split():
            if int(token) in self.arrivals:
                self.repeats += 1
            else:
                self.arrivals[int(token)] = now


def msglog_text(event: bytes, data: bytes) -> str | None:
    """The text of a ``draft-delta`` event (docs/drafts.md, "On the web")."""
    return str(orjson.loads(data)["text"]) if event == b"draft-delta" else None


def chunk_text(event: bytes, data: bytes) -> str | None:
    """A resumable-stream chunk, sent as one JSON string."""
    return str(orjson.loads(data))


async def sse_client(
    port: int, path: str, client: Client, connected: asyncio.Event, parse: Parse
) -> None:
    """Read one event stream until cancelled: each token's arrival, by ``parse``."""
    reader, writer = await open_events(port, path)
    connected.set()
    event = b""
    try:
        while line := await reader.readline():  # chunked: each event's lines whole in one chunk
            if line.startswith(b"event: "):
                event = line[7:].strip()
            elif line.startswith(b"data: "):
                text = parse(event, line[6:])
                if text:
                    client.got(text, time.time())
    finally:
        writer.close()


async def connect(port: int, path: str, count: int, parse: Parse) -> tuple[list[Client], Any]:
    """``count`` clients of ``path``, once each is connected: (clients, their tasks)."""
    clients = [Client() for _ in range(count)]
    events = [asyncio.Event() for _ in range(count)]
    tasks = [
        asyncio.create_task(sse_client(port, path, c, e, parse))
        for c, e in zip(clients, events, strict=True)
    ]
    for event in events:
        await event.wait()
    return clients, tasks


async def received(clients: list[Client], tokens: int, within: float = 120.0) -> None:
    deadline = time.monotonic() + within
    while any(len(c.arrivals) < tokens for c in clients):
        if time.monotonic() > deadline:
            raise SystemExit("the clients did not receive every token within two minutes")
        await asyncio.sleep(0.05)


def commands(client: redis.Redis) -> int:
    """Every command the server ran so far (``INFO commandstats``, scripts' too)."""
    stats: dict[str, Any] = client.info("commandstats")
    return sum(int(v["calls"]) for v in stats.values())


def paced(tokens: int, rate: float, write: Callable[[int], object]) -> list[float]:
    """Call ``write(i)`` for each token at ``rate`` a second; the time of each."""
    started, times = time.perf_counter(), []
    for i in range(tokens):
        pause = started + i / rate - time.perf_counter()
        if pause > 0:
            time.sleep(pause)
        times.append(time.time())
        write(i)
    return times


@contextmanager
def process(args: list[str], cwd: Path | None = None) -> Iterator[int]:
    """A server process that prints ``port N`` first: its port, until the block ends."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    server = subprocess.Popen(args, stdout=subprocess.PIPE, text=True, env=env, cwd=cwd)
    try:
        assert server.stdout is not None
        yield int(server.stdout.readline().split()[1])
    finally:
        server.terminate()
        server.wait(timeout=30)


# -- this library -----------------------------------------------------------------------


async def raw_reader(url: str, key: str, client: Client, tokens: int) -> None:
    """The floor: one ``XREAD BLOCK`` reader of the draft's own stream."""
    reader = redis.asyncio.Redis.from_url(url)
    last = "0-0"
    try:
        while len(client.arrivals) < tokens:
            answer: Any = await reader.xread({key: last}, block=1000)
            now = time.time()
            for _, entries in answer or []:
                for entry_id, fields in entries:
                    last = entry_id
                    client.got(orjson.loads(fields[b"d"])["v"], now)
    finally:
        await reader.aclose()


async def msglog_run(url: str, port: int, clients: int, tokens: int, rate: float) -> Any:
    conversation = f"bench-drafts-{uuid.uuid4().hex[:8]}"
    sync = redis.Redis.from_url(url)
    path = f"/conversations/{conversation}/events?after=0"
    browsers, tasks = await connect(port, path, clients, msglog_text)
    ready, opened = time.time(), threading.Event()
    result: dict[str, Any] = {}

    def write() -> None:
        with MessageLog(sync, conversation).draft() as draft:
            result["draft"] = draft.id
            opened.set()
            result["times"] = paced(tokens, rate, lambda i: draft.write(f"{i} "))
            draft.flush()
            keys = ConversationKeys.build("msglog", conversation)
            held = (keys.draft(draft.id), keys.drafts, keys.draft_feed)
            result["memory"] = sum(int(sync.memory_usage(key) or 0) for key in held)

    before = commands(sync)
    writer = asyncio.create_task(asyncio.to_thread(write))
    await asyncio.to_thread(opened.wait, 30)
    floor = Client()
    key = ConversationKeys.build("msglog", conversation).draft(result["draft"])
    await asyncio.gather(raw_reader(url, key, floor, tokens), received(browsers, tokens), writer)
    ran = commands(sync) - before
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return browsers, floor, result["times"], ready, ran, result["memory"]


# -- resumable-stream -------------------------------------------------------------------


def node_server(url: str) -> list[str]:
    """The Node contender's command, its packages installed first (``npm ci``)."""
    if not (JS / "node_modules" / "resumable-stream").is_dir():
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund", "--silent"], cwd=JS, check=True)
    return ["node", str(JS / "resumable_stream_server.mjs"), url]


async def resumable_run(url: str, port: int, clients: int, tokens: int, rate: float) -> Any:
    stream = f"bench-rs-{uuid.uuid4().hex[:8]}"
    sync = redis.Redis.from_url(url)
    before, memory = commands(sync), int(sync.info("memory")["used_memory"])
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        f"POST /start?id={stream}&tokens={tokens}&rate={rate} HTTP/1.1\r\n"
        "Host: bench\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".encode()
    )
    await reader.read()
    browsers, tasks = await connect(port, f"/stream?id={stream}", clients, chunk_text)
    ready = time.time()
    # Its answer's text is in the producer's memory; in Redis, a channel per client.
    held = int(sync.info("memory")["used_memory"]) - memory
    await received(browsers, tokens)
    ran = commands(sync) - before
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        f"GET /times?id={stream} HTTP/1.1\r\nHost: b\r\nConnection: close\r\n\r\n".encode()
    )
    reply = await reader.read()
    times = [t / 1000 for t in orjson.loads(reply.split(b"\r\n\r\n", 1)[1])]
    return browsers, None, times, ready, ran, held


# -- the run ----------------------------------------------------------------------------


def _delays(clients: list[Client], times: list[float], ready: float, tokens: int) -> list[float]:
    for n, client in enumerate(clients):
        if client.repeats or len(client.arrivals) != tokens:
            raise SystemExit(f"client {n}: {len(client.arrivals)} tokens, {client.repeats} repeats")
    counted = [i for i, at in enumerate(times) if at >= ready]
    return [(c.arrivals[i] - times[i]) * 1000 for c in clients for i in counted]


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def figures(name: str, run: Any, tokens: int) -> dict[str, float]:
    browsers, floor, times, ready, ran, held = run
    delays = _delays(browsers, times, ready, tokens)
    out = {
        f"{name}: token to client p50 (ms)": statistics.median(delays),
        f"{name}: token to client p99 (ms)": _percentile(delays, 0.99),
        f"{name}: Redis commands per 1,000 tokens": ran * 1000 / tokens,
        f"{name}: Redis memory held by the open answer (KiB)": held / 1024,
    }
    if floor is not None:
        raw = _delays([floor], times, ready, tokens)
        out[f"{name}: raw XREAD BLOCK of the draft p50 (ms)"] = statistics.median(raw)
        out[f"{name}: raw XREAD BLOCK of the draft p99 (ms)"] = _percentile(raw, 0.99)
    return out


def run(
    url: str, clients: int, tokens: int, rate: float, contenders: list[str]
) -> dict[str, float]:
    results: dict[str, float] = {}
    if "msglog" in contenders:
        with process([sys.executable, "-m", "benchmarks.web_stream", "--serve", url]) as port:
            found = asyncio.run(msglog_run(url, port, clients, tokens, rate))
        results |= figures("msglog", found, tokens)
        p50 = results["msglog: raw XREAD BLOCK of the draft p50 (ms)"]
        results["msglog p50 / raw XREAD p50"] = results["msglog: token to client p50 (ms)"] / max(
            p50, 1e-3
        )
    if "resumable-stream" in contenders:
        with process(node_server(url), cwd=JS) as port:
            found = asyncio.run(resumable_run(url, port, clients, tokens, rate))
        results |= figures("resumable-stream", found, tokens)
    return results


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="an existing server (default: start a private one)")
    parser.add_argument("--clients", type=int, default=1000)
    parser.add_argument("--tokens", type=int, default=1000)
    parser.add_argument("--rate", type=float, default=100.0, help="tokens a second")
    parser.add_argument("--contenders", default="msglog,resumable-stream")
    args = parser.parse_args(argv)
    _raise_file_limit()
    with ExitStack() as stack:
        url = server_url(stack, args.url)
        contenders = args.contenders.split(",")
        results = run(url, args.clients, args.tokens, args.rate, contenders)
    width = max(map(len, results))
    for label, value in results.items():
        print(f"{label:<{width}}  {value:12.2f}")
    return results


if __name__ == "__main__":
    main()
