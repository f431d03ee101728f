"""Exactly-once memory is bounded by the writers, not by the log objects.

A log object per call (the README's LangChain factory
``lambda sid: MessageLogChatHistory(sid, redis.Redis())``, one per web request) used to
be a producer of its own, leaving a record per append in the producers hash for
``generated_key_ttl``. Every log object of a process now numbers its calls with the
process's producer, and every write prunes idle producers.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from datetime import timedelta

import pytest
import redis
import redis.asyncio

from redis_msglog import AsyncMessageLog, ConversationKeys, MessageLog, RetryPolicy
from redis_msglog._core.write import producer as process_producer
from redis_msglog._core.write.producer import Producer
from redis_msglog.testing import EphemeralServer

from ..conftest import new_id
from ..support.proxy import ReplyDroppingProxy

pytestmark = pytest.mark.slow  # 10,000 short-lived log objects

FAST_RETRY = RetryPolicy(attempts=25, backoff=0.001, max_backoff=0.01)  # > the drops


def _producers_bytes(raw: redis.Redis, conversation: str) -> tuple[int, int]:
    """The producers hash's ``MEMORY USAGE`` (every field sampled) and its field count."""
    key = ConversationKeys.build("msglog", conversation).producers
    usage = raw.execute_command("MEMORY", "USAGE", key, "SAMPLES", "0")
    return int(usage or 0), int(raw.hlen(key))


def _sync_writers(url: str, conversation: str, count: int, fresh_clients: int) -> None:
    """``count`` short-lived log objects appending once each; the first ``fresh_clients``
    of them each on a client of its own (closed after), the rest on one client."""
    shared = redis.Redis.from_url(url)
    for i in range(count):
        client = redis.Redis.from_url(url) if i < fresh_clients else shared
        MessageLog(client, conversation).add("user", str(i))
        if client is not shared:
            client.close()
    shared.close()


async def _async_writers(url: str, conversation: str, count: int, fresh_clients: int) -> None:
    """The same with asyncio log objects, 50 at a time (``asyncio.gather``)."""
    shared = redis.asyncio.Redis.from_url(url)

    async def one(i: int) -> None:
        if i < fresh_clients:
            async with redis.asyncio.Redis.from_url(url) as client:
                await AsyncMessageLog(client, conversation).add("user", str(i))
        else:
            await AsyncMessageLog(shared, conversation).add("user", str(i))

    for start in range(0, count, 50):
        await asyncio.gather(*(one(i) for i in range(start, min(start + 50, count))))
    await AsyncMessageLog(shared, conversation).add("user", "settled")  # nothing in flight
    await shared.aclose()


def _count_retirements(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The ids of the process's producers retired from now on (each call of
    ``producer.retire``, which every retirement of the process's producer goes through)."""
    retired: list[str] = []
    retire = process_producer.retire

    def counted(producer: Producer) -> None:
        if producer is process_producer.current():
            retired.append(producer.id)
        retire(producer)

    monkeypatch.setattr(process_producer, "retire", counted)
    return retired


@pytest.mark.parametrize("flavor", ["sync", "async"])
def test_producer_records_stay_flat_over_10_000_short_lived_log_objects(
    real_backend: str,
    flavor: str,
    shared_server: Callable[[str], EphemeralServer],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The producers hash after 1,000 and after 10,000 log objects appending once each
    holds one producer (this process) and the same bytes but a digit: a log object per
    call costs nothing there. (Before: one field per object, ~85 B each, for 2 minutes.)

    A call whose reply is lost retires the process's producer (its result must stay in
    the old one's window): a writer more. On a loaded CI machine that happened once in
    this test (4 fields: two producers), so the bounds are per writer, counted here."""
    retired = _count_retirements(monkeypatch)
    server = shared_server(real_backend)
    raw = redis.Redis.from_url(server.url)
    conversation = new_id()

    def write(count: int, fresh_clients: int) -> None:
        if flavor == "sync":
            _sync_writers(server.url, conversation, count, fresh_clients)
        else:
            asyncio.run(_async_writers(server.url, conversation, count, fresh_clients))

    key = ConversationKeys.build("msglog", conversation).producers
    write(1_000, fresh_clients=100)  # the README's pattern: a client per call too
    after_1k, fields_1k = _producers_bytes(raw, conversation)
    encoding_1k = raw.object("encoding", key)
    write(9_000, fresh_clients=0)
    after_10k, fields_10k = _producers_bytes(raw, conversation)
    writers = 1 + len(retired)
    print(f"producers hash ({real_backend}, {flavor}): {after_1k} B after 1,000 log objects, "
          f"{after_10k} B after 10,000; {len(retired)} producer(s) retired")  # fmt: skip
    names = [n.decode() if isinstance(n, bytes) else n for n in raw.hkeys(key)]
    assert len({name.rstrip("+") for name in names}) <= writers
    if flavor == "sync":
        # One field per writer, whatever the number of objects: each call the lowest in
        # flight replaces it (lua/producer_lib.lua, the sequential field). A retried call
        # (its reply lost) writes its old producer's concurrent field too.
        assert fields_1k <= 2 * writers - 1 and fields_10k <= 2 * writers - 1
        assert after_1k <= 400 * writers and after_10k <= 400 * writers
        if not retired and raw.object("encoding", key) == encoding_1k:
            # 10x the objects adds a digit to its call number and to its last seq: at
            # most one allocator size class (16 bytes).
            assert after_1k <= after_10k <= after_1k + 16
    else:
        # asyncio, 50 calls in flight at once: the process's producer has a second field
        # for the calls made while an older one was in flight, holding at most WINDOW (64)
        # results, whatever the number of objects (measured: 752-944 B).
        assert fields_1k <= 2 * writers and fields_10k <= 2 * writers
        assert after_1k <= 2_000 * writers and after_10k <= 2_000 * writers
    expected = 10_000 + (0 if flavor == "sync" else 2)
    assert raw.get(ConversationKeys.build("msglog", conversation).seq) == str(expected).encode()


def test_log_objects_in_threads_and_tasks_losing_replies_write_once(
    real_backend: str, shared_server: Callable[[str], EphemeralServer]
) -> None:
    """Log objects made per call in 4 threads and 40 asyncio tasks at once share the
    process's producer; lost replies are re-sent and answered from its results, so each
    message is written exactly once, whichever object or thread sent it."""
    server = shared_server(real_backend)
    conversation = new_id()
    MessageLog(redis.Redis.from_url(server.url), new_id()).add("user", "x")  # script cached
    seqs: list[int] = []
    lock = threading.Lock()

    def thread_writer(proxy_url: str, name: str) -> None:
        client = redis.Redis.from_url(proxy_url)
        for i in range(25):
            seq = MessageLog(client, conversation, retry=FAST_RETRY).add("user", f"{name}-{i}")
            with lock:
                seqs.append(seq)

    async def task_writers(proxy_url: str) -> list[int]:
        client = redis.asyncio.Redis.from_url(proxy_url, max_connections=100)
        try:
            calls = (
                AsyncMessageLog(client, conversation, retry=FAST_RETRY).add("user", f"a-{i}")
                for i in range(40)
            )
            return list(await asyncio.gather(*calls))
        finally:
            await client.aclose()

    with ReplyDroppingProxy(server.port) as proxy:
        proxy.drops = 20
        threads = [
            threading.Thread(target=thread_writer, args=(proxy.url, f"t{n}")) for n in range(4)
        ]
        for thread in threads:
            thread.start()
        async_seqs = asyncio.run(task_writers(proxy.url))
        for thread in threads:
            thread.join()
        assert proxy.dropped == 20
    rows = MessageLog(redis.Redis.from_url(server.url), conversation).all()
    assert sorted(seqs + async_seqs) == list(range(1, 141)) == [m.seq for m in rows]
    expected = {f"t{n}-{i}" for n in range(4) for i in range(25)} | {f"a-{i}" for i in range(40)}
    assert sorted(m.content for m in rows) == sorted(expected)  # each once


def test_a_producer_is_kept_for_the_longest_window_of_its_calls(
    real_backend: str, shared_server: Callable[[str], EphemeralServer]
) -> None:
    """Log objects of one process with different ``generated_key_ttl`` share its producer:
    while an older call is in flight, a call with a short window must not cut the time
    the server keeps a longer one's result. A call with none in flight below it holds only
    its own result, kept for its own window."""
    server = shared_server(real_backend)
    raw = redis.Redis.from_url(server.url)
    conversation = new_id()
    key = ConversationKeys.build("msglog", conversation).producers
    producer = Producer()
    producer.begin()  # call 1, in flight throughout: the calls below are concurrent
    short = RetryPolicy(generated_key_ttl=timedelta(seconds=1))
    logs = [MessageLog(raw, conversation), MessageLog(raw, conversation, retry=short)]
    for log in logs:
        log._core._own_producer = producer
        log.add("user", "a")  # windows: 2 minutes, then 1 second
    seconds, micros = raw.time()
    now_ms = int(seconds) * 1000 + int(micros) // 1000
    (name, value), *others = raw.hgetall(key).items()
    assert name == f"{producer.id}+".encode() and not others
    assert int(value.split()[0]) > now_ms + 60_000
    sequential = MessageLog(raw, new_id(), retry=short)
    sequential.add("user", "a")
    (value,) = raw.hgetall(sequential.keys.producers).values()
    assert now_ms < int(value.split()[0]) <= now_ms + 5_000
