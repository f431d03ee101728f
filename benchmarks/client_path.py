"""What a single append costs the client process and the server, next to raw redis-py.

    python -m benchmarks.client_path [--url redis://...] [--appends 2000] [--rounds 5]

Client CPU is ``time.process_time`` per append (it leaves out waiting for the server, so
it is steadier on a shared machine than wall time); server CPU is the server main
thread's ``INFO cpu`` per append. For an A/B of two versions, run this once per version
in alternation (pinning the client and the server to different cores with ``taskset``
makes the figures steadier still); compare within one run, not across machines.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable
from contextlib import ExitStack
from typing import Any, cast

import hiredis
import orjson
import redis
import redis.asyncio

from benchmarks.server import server_url
from redis_msglog import NO_RETRY, AsyncMessageLog, MessageLog

from .run import _server_counters, messages

Figures = dict[str, list[tuple[float, float, float]]]  # (client CPU, wall, server CPU) µs


def _measure(admin: redis.Redis, items: list[Any], call: Callable[[Any], Any]) -> tuple[
    float, float, float
]:  # fmt: skip
    _, server_before = _server_counters(admin)
    cpu, wall = time.process_time(), time.perf_counter()
    for item in items:
        call(item)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    _, server_after = _server_counters(admin)
    n = len(items) / 1e6
    return cpu / n, wall / n, (server_after - server_before) / n


async def _measure_async(
    admin: redis.Redis, items: list[Any], call: Callable[[Any], Awaitable[Any]]
) -> tuple[float, float, float]:
    _, server_before = _server_counters(admin)
    cpu, wall = time.process_time(), time.perf_counter()
    for item in items:
        await call(item)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    _, server_after = _server_counters(admin)
    n = len(items) / 1e6
    return cpu / n, wall / n, (server_after - server_before) / n


def sync_figures(url: str, appends: int, rounds: int) -> Figures:
    admin, client = redis.Redis.from_url(url), redis.Redis.from_url(url)
    msgs = messages(appends)
    payloads = [orjson.dumps(m) for m in msgs]
    key = f"raw:{{{uuid.uuid4().hex}}}:stream"
    logs = {
        "msglog sync": MessageLog(client, uuid.uuid4().hex),
        "msglog sync, NO_RETRY": MessageLog(client, uuid.uuid4().hex, retry=NO_RETRY),
        # A scope costs the first write of a log object (its registration), nothing after.
        "msglog sync, scoped": MessageLog(client, uuid.uuid4().hex, scope=("bench", "user")),
    }
    client.xadd(key, {"msg": payloads[0]})
    for log in logs.values():
        log.append(msgs[0])  # connect and load the script first
    alone = MessageLog(client, uuid.uuid4().hex)
    alone.append(msgs[0])
    checked = _checked_appends(client, msgs)
    figures: Figures = {
        "raw redis-py XADD": [], **{name: [] for name in logs}, ALONE: [],
        **{name: [] for name in checked},
    }  # fmt: skip
    for round_ in range(rounds):
        figures["raw redis-py XADD"].append(
            _measure(admin, payloads, lambda p: client.xadd(key, {"msg": p}))
        )
        for name, log in logs.items():
            figures[name].append(_measure(admin, msgs, log.append))
        send, commands = _script_alone(client, alone, msgs)
        figures[ALONE].append(_measure(admin, commands, send))
        for name, (items, call) in checked.items():
            figures[name].append(_measure(admin, items(round_), call))
    return figures


def _checked_appends(
    client: redis.Redis, msgs: list[Any]
) -> dict[str, tuple[Callable[[int], list[Any]], Callable[[Any], Any]]]:
    """The appends a caller's check makes: a new idempotency key each call, and
    ``expected_seq`` (each the seq the one before it returned: none conflicts). Each
    row: a round's items, made before it is timed, and the call that takes one."""
    keyed = MessageLog(client, uuid.uuid4().hex)
    keyed.append(msgs[0], idempotency_key="warm")
    conditional = MessageLog(client, uuid.uuid4().hex)
    last = [conditional.append(msgs[0], expected_seq=0)]

    def expecting(msg: Any) -> None:
        last[0] = conditional.append(msg, expected_seq=last[0])

    def keyed_items(round_: int) -> list[Any]:
        return [(f"key-{round_}-{i}", msg) for i, msg in enumerate(msgs)]

    return {
        "msglog sync, keyed (a new idempotency key each call)": (
            keyed_items,
            lambda item: keyed.append(item[1], idempotency_key=item[0]),
        ),
        "msglog sync, conditional (expected_seq)": (lambda round_: msgs, expecting),
    }


ALONE = "the append script alone (floor: no client work)"


def _script_alone(
    client: redis.Redis, log: MessageLog, msgs: list[Any]
) -> tuple[Callable[[bytes], object], list[bytes]]:
    """The floor of the client path: each message's append command, made and packed
    beforehand (a call of its own, as ``log.append`` would send it), and a call sending
    one on a held connection and reading the reply. What an append costs with no client
    work but the socket's: the script's share of the gap to raw ``XADD``."""
    core, commands = log._core, []
    for msg in msgs:
        prepared = core.prepare(core.batch((msg,)), None, None)
        commands.append(hiredis.pack_command(cast(Any, prepared.first_try.command)))
        prepared.settle()
    conn = client.connection_pool.get_connection()
    client.connection_pool.release(conn)  # held: nothing else uses the client meanwhile

    def send(packed: bytes) -> object:
        conn.send_packed_command([packed], check_health=False)
        return conn.read_response()

    return send, commands


async def async_figures(url: str, appends: int, rounds: int) -> Figures:
    admin, client = redis.Redis.from_url(url), redis.asyncio.Redis.from_url(url)
    msgs = messages(appends)
    payloads = [orjson.dumps(m) for m in msgs]
    key = f"raw:{{{uuid.uuid4().hex}}}:stream"
    log = AsyncMessageLog(client, uuid.uuid4().hex)
    await client.xadd(key, {"msg": payloads[0]})
    await log.append(msgs[0])

    async def raw(payload: bytes) -> None:
        await client.xadd(key, {"msg": payload})

    figures: Figures = {"raw redis.asyncio XADD": [], "msglog async": []}
    for _ in range(rounds):
        figures["raw redis.asyncio XADD"].append(await _measure_async(admin, payloads, raw))
        figures["msglog async"].append(await _measure_async(admin, msgs, log.append))
    await client.aclose()
    return figures


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.client_path", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--url", help="an existing server (default: start a private one)")
    parser.add_argument("--appends", type=int, default=2000, help="appends per round")
    parser.add_argument("--rounds", type=int, default=5, help="rounds (medians are shown)")
    args = parser.parse_args(argv)
    with ExitStack() as stack:
        url = server_url(stack, args.url)
        figures = sync_figures(url, args.appends, args.rounds)
        figures |= asyncio.run(async_figures(url, args.appends, args.rounds))
    print("| per append, µs (median) | client CPU | wall | server CPU |")
    print("|---|---:|---:|---:|")
    for name, samples in figures.items():
        cpu, wall, server = (statistics.median(s[i] for s in samples) for i in range(3))
        print(f"| {name} | {cpu:.1f} | {wall:.1f} | {server:.1f} |")


if __name__ == "__main__":
    main()
