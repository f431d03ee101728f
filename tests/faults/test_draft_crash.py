"""A worker killed mid-answer (docs/drafts.md, "Crashes"): a writer process streams an
answer into a draft and is SIGKILLed at a random point; followers in this process, one
from the start and one resumed from the middle of what the first saw, end with the same
deltas in the same order, none lost or repeated, then exactly one interrupted message
holding exactly those deltas' text. The same through the web stream: SSE clients in
processes of their own that reconnect at random points to either of two web apps."""

from __future__ import annotations

import multiprocessing
import random
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack
from datetime import timedelta
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from redis_msglog import DraftDelta, DraftEnded, MessageLog, StoredMessage
from redis_msglog.testing import EphemeralServer
from redis_msglog.web import create_app

from ..conftest import new_id
from ..contract.test_web import allow, serving
from ..contract.test_web_drafts import events_until

pytestmark = pytest.mark.slow
TOKENS = 2000


def _stream_an_answer(url: str, conversation: str) -> None:
    log = MessageLog(redis.Redis.from_url(url), conversation)
    with log.draft(lease=timedelta(seconds=1)) as draft:
        for i in range(TOKENS):
            draft.write(f"t{i} ")
            time.sleep(0.001)  # a fast model: the writer's flushes coalesce these


def _kill_a_writer_mid_answer(url: str, conversation: str, seed: int) -> None:
    """A writer process streaming an answer, SIGKILLed at a random point once it has
    written a delta (so a message is due: interrupted, with what was written)."""
    writer = multiprocessing.get_context("spawn").Process(
        target=_stream_an_answer, args=(url, conversation)
    )
    writer.start()
    log = MessageLog(redis.Redis.from_url(url), conversation)
    deadline = time.monotonic() + 30
    while not any(d.position for d in log.drafts()):
        assert time.monotonic() < deadline and writer.is_alive()
        time.sleep(0.01)
    time.sleep(random.Random(seed).uniform(0.0, 0.8))
    writer.kill()
    writer.join()


def _follow(url: str, conversation: str, after: int | str, sink: list[tuple[Any, str]]) -> None:
    client = redis.Redis.from_url(url, socket_timeout=1)  # waits of 0.5 s: lapses noticed
    follower = MessageLog(client, conversation).follow(after=after, drafts=True)
    for item in follower:
        sink.append((item, follower.resume))
        if isinstance(item, StoredMessage):
            return


def _deltas(items: list[tuple[Any, str]]) -> list[tuple[int, str]]:
    return [(i.pos, i.text) for i, _ in items if isinstance(i, DraftDelta)]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_writer_killed_mid_answer_leaves_one_interrupted_message_every_reader_agrees_on(
    shared_server: Callable[[str], EphemeralServer], seed: int
) -> None:
    url, conversation = shared_server("redis").url, new_id()
    first: list[tuple[Any, str]] = []
    follower = threading.Thread(target=_follow, args=(url, conversation, 0, first))
    follower.start()
    log = MessageLog(redis.Redis.from_url(url), conversation)
    _kill_a_writer_mid_answer(url, conversation, seed)
    follower.join(30)
    assert not follower.is_alive()
    [message] = log.all()
    assert isinstance(message, StoredMessage) and message.interrupted
    deltas = _deltas(first)
    assert [pos for pos, _ in deltas] == list(range(1, len(deltas) + 1))
    assert "".join(text for _, text in deltas) == message.text
    assert first[-2][0] == DraftEnded(message.draft or "", "interrupted", message.seq)
    # A reader resumed from the middle of what the first saw gets exactly the rest.
    cut = len(first) // 2
    rest: list[tuple[Any, str]] = []
    _follow(url, conversation, first[cut][1], rest)
    assert [item for item, _ in rest] == [item for item, _ in first[cut + 1 :]]


def _sse_reader(bases: list[str], conversation: str, seed: int, sink: list[Any]) -> None:
    """An SSE client reading a few events at a time, reconnecting with its last id to
    either web app each time, until the interrupted message (for a minute at most)."""
    chunk, last = random.Random(seed), ""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        want = chunk.randint(1, 40)

        def enough(got: list[Any], want: int = want) -> bool:
            return len(got) >= want or _ended(got)

        headers = {"Last-Event-ID": last} if last else {}
        got = events_until(bases[chunk.randrange(2)], conversation, enough, headers=headers)
        sink += got
        last = got[-1]["id"]
        if _ended(got):
            return


def _sse_reader_process(bases: list[str], conversation: str, seed: int, results: Any) -> None:
    """:func:`_sse_reader` in a process of its own: its events onto ``results``."""
    sink: list[Any] = []
    try:
        _sse_reader(bases, conversation, seed, sink)
    finally:
        results.put((seed, sink))


def _ended(got: list[Any]) -> bool:
    """At the message, or at an end with none (which the test then refuses)."""
    last = got[-1] if got else {}
    return last.get("event") == "message" or (
        last.get("event") == "draft-end" and last["data"]["seq"] == 0
    )


@settings(max_examples=3, deadline=None, suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 2**32 - 1))
def test_sse_clients_on_two_apps_agree_on_a_killed_writers_answer(
    shared_server: Callable[[str], EphemeralServer], seed: int
) -> None:
    url, conversation = shared_server("redis").url, new_id()
    with ExitStack() as stack:
        bases = [
            stack.enter_context(serving(create_app(redis.Redis.from_url(url), authorize=allow)))
            for _ in range(2)
        ]
        spawn = multiprocessing.get_context("spawn")
        results = spawn.Queue()
        readers = [
            spawn.Process(
                target=_sse_reader_process,
                args=(bases, conversation, seed + n, results),
                daemon=True,
            )
            for n in range(2)
        ]
        for reader in readers:
            reader.start()
        log = MessageLog(redis.Redis.from_url(url), conversation)
        _kill_a_writer_mid_answer(url, conversation, seed)
        sinks = [sink for _, sink in sorted(results.get(timeout=90) for _ in readers)]
        for reader in readers:
            reader.join(30)
    [message] = log.all()
    assert isinstance(message, StoredMessage) and message.interrupted
    seen = []
    for sink in sinks:
        deltas = [
            (e["data"]["pos"], e["data"]["text"]) for e in sink if e["event"] == "draft-delta"
        ]
        assert [pos for pos, _ in deltas] == list(range(1, len(deltas) + 1))
        assert "".join(text for _, text in deltas) == message.text
        ends = [e["data"] for e in sink if e["event"] == "draft-end"]
        assert ends == [{"draft": message.draft, "outcome": "interrupted", "seq": message.seq}]
        seen.append(deltas)
    assert seen[0] == seen[1]
