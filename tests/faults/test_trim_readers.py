"""trim() under concurrent readers and writers, across processes: a reader never sees a
CorruptLogError, and once a trim has committed no read started after it returns a row
of a trimmed seq (docs/lifecycle.md, "Trimming and retention")."""

from __future__ import annotations

import multiprocessing
import time
from typing import Any

import pytest
import redis

from redis_msglog import MessageLog

from ..conftest import new_id

pytestmark = pytest.mark.slow  # readers in threads while the log is trimmed

ROUNDS = 40


def _read_while_trimming(url: str, conversation: str, stop: Any, out: Any) -> None:
    """Read every way, over and over; report each read's smallest seq against the first
    seq that was committed before the read started (or the error)."""
    log = MessageLog(redis.Redis.from_url(url), conversation, page_size=4)
    raw = redis.Redis.from_url(url)
    reads = 0
    try:
        while not stop.is_set():
            floor = int(raw.hget(log.keys.view, "first") or 1)  # committed before the reads
            for rows in (
                log.all(),
                log.read(after=0),
                log.last(7),
                log.all(view="physical"),
                log.last(9, view="physical"),
            ):
                if rows and rows[0].seq < floor:
                    out.put(f"seq {rows[0].seq} read after the trim to {floor} committed")
                    return
            log.count()
            reads += 1
            if reads == 1:
                out.put("ready")
    except Exception as exc:  # reported to the test
        out.put(f"{type(exc).__name__}: {exc}")
        return
    out.put(reads)


def test_readers_never_fail_nor_see_trimmed_rows_while_the_log_is_trimmed(
    shared_server: Any,
) -> None:
    url = shared_server("redis").url
    conversation = new_id()
    log = MessageLog(redis.Redis.from_url(url), conversation)
    log.append_many([{"role": "user", "content": f"m{i}"} for i in range(30)])
    context = multiprocessing.get_context("spawn")
    stop, out = context.Event(), context.Queue()
    readers = [
        context.Process(target=_read_while_trimming, args=(url, conversation, stop, out))
        for _ in range(3)
    ]
    for reader in readers:
        reader.start()
    assert [out.get(timeout=60) for _ in readers] == ["ready"] * len(readers)  # reading
    for _ in range(ROUNDS):
        log.append_many([{"role": "user", "content": "more"}] * 3)
        messages = [row.seq for row in log.all()]
        log.retract([messages[-1]])
        log.trim(messages[2])  # a message: trims forward every round
        time.sleep(0.01)
    stop.set()
    results = [out.get(timeout=60) for _ in readers]
    for reader in readers:
        reader.join(timeout=30)
    assert all(isinstance(r, int) and r > 0 for r in results), results
    assert MessageLog(redis.Redis.from_url(url), conversation).count() == log.count()
