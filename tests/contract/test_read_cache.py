"""The warm-read cache (``_core.read.cache``): a repeat ``all()`` reads only what is new, and never
serves a log the server does not confirm (rewound, recreated, edited, damaged)."""

from __future__ import annotations

import asyncio
import gc
import tracemalloc
from collections.abc import Callable
from typing import Any

import pytest
import redis
import redis.asyncio

from redis_msglog import (
    AsyncMessageLog,
    CorruptLogError,
    MessageLog,
    MessageLogError,
    configure_read_cache,
)
from redis_msglog._core.read.cache import read_cache
from redis_msglog.testing import EphemeralServer

from ..conftest import entry_id, new_id

pytestmark = pytest.mark.slow  # tracemalloc over every row shape's budget


def _msgs(tag: str, n: int) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"{tag}{i}"} for i in range(n)]


@pytest.fixture
def url(shared_server: Callable[[str], EphemeralServer]) -> str:
    return shared_server("redis").url


def _reads(log: MessageLog, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts full (uncached) reads of ``log``: ranges from the start of the stream."""
    calls: list[int] = []
    original = log._core._reads.range_plan

    def counted(after: int, *args: Any, **kwargs: Any) -> Any:
        if after == 0:
            calls.append(1)
        return original(after, *args, **kwargs)

    monkeypatch.setattr(log._core._reads, "range_plan", counted)
    return calls


def test_a_repeat_read_fetches_only_what_is_new(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    reader, writer = MessageLog(redis.Redis.from_url(url), new_id()), None
    writer = MessageLog(redis.Redis.from_url(url), reader.conversation)
    writer.append_many(_msgs("a", 5))
    full = _reads(reader, monkeypatch)
    first = reader.all()
    assert [m.content for m in first] == [f"a{i}" for i in range(5)] and full == [1]
    first.append(first[0])  # the caller's list: the cache keeps its own
    writer.add("assistant", "new")
    rows = reader.all()
    assert [m.seq for m in rows] == [1, 2, 3, 4, 5, 6] and rows[-1].content == "new"
    assert rows == MessageLog(redis.Redis.from_url(url), reader.conversation).all()
    assert reader.all() == rows and full == [1]  # served from memory, checked each time


@pytest.mark.parametrize("same_text", [True, False])
def test_a_rewound_or_recreated_log_is_read_again(
    url: str, monkeypatch: pytest.MonkeyPatch, same_text: bool
) -> None:
    client = redis.Redis.from_url(url)
    log = MessageLog(client, new_id())
    log.append_many(_msgs("a", 4))
    cached = log.all()
    client.delete(log.keys.seq, log.keys.stream)  # a failover lost it all, or a restore
    log.append_many(_msgs("a" if same_text else "b", 4))  # the same seqs again
    full = _reads(log, monkeypatch)
    rows = log.all()
    assert full == [1]
    assert [m.at for m in rows] != [m.at for m in cached]
    assert rows == MessageLog(redis.Redis.from_url(url), log.conversation).all()
    # rewound below the cached tail, then not as far
    client.delete(log.keys.seq, log.keys.stream)
    log.append_many(_msgs("c", 2))
    assert [m.content for m in log.all()] == ["c0", "c1"]
    client.delete(log.keys.seq, log.keys.stream)
    assert log.all() == []


def test_an_edit_is_never_served_from_the_cache(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    client = redis.Redis.from_url(url)
    log = MessageLog(client, new_id())
    log.append_many(_msgs("a", 3))
    log.all()
    full = _reads(log, monkeypatch)
    log.all()
    assert full == []  # cached
    # Another worker's edit: its entry is a miss in the same round trip, the view is read.
    MessageLog(redis.Redis.from_url(url), log.conversation).retract([1])
    assert [m.seq for m in log.all()] == [2, 3]
    assert full == [1]
    MessageLog(redis.Redis.from_url(url), log.conversation).compact(
        [_msgs("s", 1)[0]], through_seq=2
    )
    assert [m.content for m in log.all()] == ["s0", "a2"]
    log.add("user", "after")
    assert [m.content for m in log.all()] == ["s0", "a2", "after"]  # the view, each time
    assert [m.content for m in log.all()] == [
        m.content for m in MessageLog(redis.Redis.from_url(url), log.conversation).all()
    ]


def test_damage_after_caching_is_still_an_error(url: str) -> None:
    client = redis.Redis.from_url(url)
    log = MessageLog(client, new_id())
    log.append_many(_msgs("a", 5))
    log.all()
    # A gap: the counter check sees it.
    client.xdel(log.keys.stream, entry_id(client, log.keys.stream, 3))
    with pytest.raises(CorruptLogError):
        log.all()
    other = MessageLog(client, new_id())
    other.append_many(_msgs("a", 2))
    other.all()
    client.xadd(other.keys.stream, {"foo": "bar"}, id="3-0")  # a foreign entry at the end
    with pytest.raises(MessageLogError):
        other.all()


def test_the_budget_is_shared_per_client_and_can_be_turned_off(url: str) -> None:
    client = redis.Redis.from_url(url)
    logs = [MessageLog(client, new_id()) for _ in range(3)]
    for log in logs:
        log.append_many(_msgs("x", 5))
    logs[0].all()
    one = read_cache(client).size  # type: ignore[union-attr]
    budget = 2 * one + one // 2  # two of these conversations
    configure_read_cache(client, budget)
    for log in logs:
        log.all()
    cache = read_cache(client)
    assert cache is not None and 0 < cache.size <= budget
    assert cache.get(logs[0].keys.stream) is None  # least recently read: evicted
    assert cache.get(logs[2].keys.stream) is not None
    configure_read_cache(client, 0)
    assert read_cache(client) is None
    assert [m.content for m in logs[0].all()] == [f"x{i}" for i in range(5)]
    with pytest.raises(ValueError):
        configure_read_cache(client, -1)


def test_blobs_are_cached_as_references_and_put_back_per_call(url: str) -> None:
    client = redis.Redis.from_url(url)
    log = MessageLog(client, new_id(), blob_threshold=16)
    image = {"type": "image", "data": b"\x89PNG" + bytes(64), "media_type": "image/png"}
    log.append({"role": "user", "content": [image]})
    for _ in range(2):
        (row,) = log.all()
        assert row.content[0].data == image["data"]  # type: ignore[union-attr]
        (ref,) = log.all(blobs="refs")
        assert ref.content[0].data is None and ref.content[0].blob  # type: ignore[union-attr]


def test_the_async_client_shares_the_cache_logic(url: str) -> None:
    async def scenario() -> None:
        client = redis.asyncio.Redis.from_url(url)
        log = AsyncMessageLog(client, new_id())
        await log.append_many(_msgs("a", 3))
        assert len(await log.all()) == 3
        await log.add("user", "b")
        assert [m.content for m in await log.all()] == ["a0", "a1", "a2", "b"]
        cache = read_cache(client)
        assert cache is not None and cache.get(log.keys.stream) is not None
        await client.aclose()

    asyncio.run(scenario())


def test_many_warm_reads_keep_every_row_in_order(url: str) -> None:
    client = redis.Redis.from_url(url)
    log = MessageLog(client, new_id())
    for i in range(70):  # more reads with new rows than chunks kept before compaction
        log.add("user", f"m{i}")
        assert [m.content for m in log.all()] == [f"m{j}" for j in range(i + 1)]
    entry = read_cache(client).get(log.keys.stream)  # type: ignore[union-attr]
    assert entry is not None and len(entry.chunks) <= 64


def test_the_active_view_is_cached_until_an_archive(url: str) -> None:
    client = redis.Redis.from_url(url)
    log = MessageLog(client, new_id())
    log.append_many(_msgs("a", 4))
    assert log.all(view="active") == log.all()  # no edits: the same rows, cached
    MessageLog(redis.Redis.from_url(url), log.conversation).archive(2)  # another worker
    assert [m.seq for m in log.all(view="active")] == [3, 4]
    assert [m.seq for m in log.all(view="archived")] == [1, 2]
    fresh = MessageLog(client, log.conversation)  # a new log object on the same client
    assert [m.seq for m in fresh.all(view="active")] == [3, 4]


# -- the budget holds for every row shape ----------------------------

_BIG = 200_000


def _huge_arguments(i: int) -> list[dict[str, Any]]:  # the case
    calls = [
        {"id": f"c{k}", "name": "f", "arguments": f'{{"q": "{"y" * _BIG}"}}'} for k in range(5)
    ]
    return [{"role": "assistant", "content": "", "toolCalls": calls}]


def _huge_metadata(i: int) -> list[dict[str, Any]]:
    table = [{"a": k, "b": [k, k + 0.5], "c": {}} for k in range(8_000)]
    return [{"role": "user", "content": "m", "metadata": {"rows": table}}]


def _huge_extras(i: int) -> list[dict[str, Any]]:
    lists: list[list[int]] = [[] for _ in range(30_000)]  # 3 bytes of JSON, 64 of memory each
    return [{"role": "assistant", "content": "x", "extras": {"openai": {"l": lists}}}]


def _huge_args(i: int) -> list[dict[str, Any]]:
    nested: Any = [1.5] * 1_000
    for _ in range(30):
        nested = {"k": nested, "o": [{}] * 100}
    return [
        {
            "role": "assistant",
            "content": "",
            "toolCalls": [{"id": "c", "name": "f", "args": nested}],
        }
    ]


def _many_tiny(i: int) -> list[dict[str, Any]]:
    return [{"role": "user", "content": "x"} for _ in range(3_000)]


def _unicode_names_ids(i: int) -> list[dict[str, Any]]:
    return [
        {
            "role": "tool",
            "content": "ok",
            "name": "😀" * 2_000,
            "id": "é" * 3_000 + "😀",
            "toolCallId": "\u4e2d" * 2_000,
        }
        for _ in range(60)
    ]


def _many_parts(i: int) -> list[dict[str, Any]]:
    part = {"type": "text", "text": "a", "extras": {"anthropic": {"cache_control": {"type": "x"}}}}
    return [{"role": "user", "content": [part] * 200} for _ in range(10)]


SHAPES = [
    _huge_arguments,
    _huge_metadata,
    _huge_extras,
    _huge_args,
    _many_tiny,
    _unicode_names_ids,
    _many_parts,
]
BUDGET = 1024 * 1024
SLACK = 256 * 1024  # the client's connection and reply buffers, the log objects


def _cache_memory(client: redis.Redis, logs: list[MessageLog]) -> tuple[int, int]:
    """The memory the reads leave behind (tracemalloc), and the cache's own account."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(2):  # cold, then warm
            for log in logs:
                log.all()
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    return held, read_cache(client).size  # type: ignore[union-attr]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda f: f.__name__.strip("_"))
def test_the_cache_budget_holds_for_every_row_shape(url: str, shape: Callable[[int], Any]) -> None:
    writer = redis.Redis.from_url(url)
    names = [new_id() for _ in range(6)]
    for i, name in enumerate(names):
        MessageLog(writer, name).append_many(shape(i))
    client = redis.Redis.from_url(url)
    configure_read_cache(client, BUDGET)
    logs = [MessageLog(client, name) for name in names]
    logs[0].count()  # connect and load the scripts before measuring
    held, accounted = _cache_memory(client, logs)
    assert held <= BUDGET + SLACK, f"{held} bytes held under a budget of {BUDGET}"
    assert held <= accounted + SLACK, f"{held} bytes held, {accounted} accounted"
    assert accounted <= BUDGET


def test_the_cache_accounts_a_row_by_what_it_really_takes(url: str) -> None:
    """Each shape alone, with a budget that holds it: the estimate is at least what the
    rows take (tracemalloc), and not wildly more (the cache stays useful)."""
    for shape in SHAPES:
        writer = redis.Redis.from_url(url)
        name = new_id()
        MessageLog(writer, name).append_many(shape(0))
        client = redis.Redis.from_url(url)
        configure_read_cache(client, 64 * BUDGET)
        log = MessageLog(client, name)
        log.count()
        held, accounted = _cache_memory(client, [log])
        assert accounted > 0, shape.__name__
        assert held <= accounted + SLACK // 4, (shape.__name__, held, accounted)
        assert accounted <= 8 * held, (shape.__name__, held, accounted)
