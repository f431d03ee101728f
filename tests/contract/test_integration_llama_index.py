"""LlamaIndex: MessageLogChatStore as Memory's AsyncDBChatStore, on real servers.

The conversions round-trip every kind of ChatMessage block; the store keeps the
AsyncDBChatStore contract (statuses as the log's archive watermark, deletions as
retractions); LlamaIndex's own Memory, driven by a chat engine on MockLLM with a small
token limit, archives through it, alone and from several worker processes on one key."""

from __future__ import annotations

import asyncio
import multiprocessing
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import pytest
import redis
from llama_index.core.base.llms.types import (
    AudioBlock,
    CacheControl,
    CachePoint,
    ChatMessage,
    CitableBlock,
    DocumentBlock,
    ImageBlock,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    VideoBlock,
)
from llama_index.core.chat_engine import SimpleChatEngine
from llama_index.core.llms import MockLLM
from llama_index.core.memory import Memory
from llama_index.core.storage.chat_store.base_db import MessageStatus

from redis_msglog import EditEntry, MessageLog, StoredMessage
from redis_msglog.integrations.llama_index import (
    MessageLogChatStore,
    from_llama_index,
    to_llama_index,
)
from redis_msglog.testing import EphemeralServer

from ..conftest import new_id
from ..support.cluster import LocalCluster

pytestmark = pytest.mark.frameworks

T = TypeVar("T")
ACTIVE, ARCHIVED = MessageStatus.ACTIVE, MessageStatus.ARCHIVED


def words(text: str) -> list[str]:
    """A tokenizer that needs no download (LlamaIndex's default fetches tiktoken's)."""
    return text.split()


MESSAGES = [
    ChatMessage(role="user", content="hi"),
    ChatMessage(role="user", blocks=[]),
    ChatMessage(role="developer", content="be terse"),
    ChatMessage(
        role="user",
        blocks=[
            TextBlock(text="what is this?"),
            ImageBlock(image=b"\x89PNG\r\n", image_mimetype="image/png"),
            ImageBlock(url="https://example.com/a.png", detail="low"),
        ],
    ),
    ChatMessage(
        role="assistant",
        blocks=[
            ThinkingBlock(content="hmm", additional_information={"signature": "sig"}),
            TextBlock(text="calling"),
            ToolCallBlock(tool_call_id="c1", tool_name="add", tool_kwargs={"a": 1}),
            ToolCallBlock(tool_call_id="c2", tool_name="neg", tool_kwargs='{"b": 2}'),
        ],
    ),
    ChatMessage(role="tool", content="3", additional_kwargs={"tool_call_id": "c1"}),
    ChatMessage(
        role="user",
        blocks=[
            AudioBlock(audio=b"\x00\x01RIFF", format="wav"),
            DocumentBlock(data=b"%PDF-1.4", document_mimetype="application/pdf", title="a.pdf"),
            VideoBlock(url="https://example.com/v.mp4"),
            CachePoint(cache_control=CacheControl(type="ephemeral")),
        ],
    ),
    ChatMessage(role="chatbot", content="yo", additional_kwargs={"k": [1, {"n": None}]}),
    ChatMessage(
        role="assistant",
        blocks=[CitableBlock(content=[TextBlock(text="c")], title="T", source="S")],
    ),
]


@pytest.mark.parametrize("message", MESSAGES, ids=lambda m: str(m.role.value))
def test_every_block_round_trips_through_the_neutral_message(message: ChatMessage) -> None:
    stored = from_llama_index(message)
    assert to_llama_index(stored).model_dump(mode="json") == message.model_dump(mode="json")


def test_neutral_fields_hold_what_other_readers_need() -> None:
    call, result, image = (from_llama_index(MESSAGES[i]) for i in (4, 5, 3))
    assert call.role == "assistant" and [c.id for c in call.tool_calls or []] == ["c1", "c2"]
    assert call.tool_calls is not None and call.tool_calls[1].args == {"b": 2}
    assert (result.role, result.tool_call_id, result.content) == ("tool", "c1", "3")
    assert isinstance(image.content, list) and image.content[1].type == "image"
    assert image.extras is None  # nothing left over: text and images map exactly
    assert from_llama_index(MESSAGES[2]).role == "system"  # developer, restored by the patch


# -- real servers -------------------------------------------------------------------------

BACKENDS = ["redis", "valkey", "cluster"]


@pytest.fixture(params=BACKENDS)
def make_store(
    request: pytest.FixtureRequest,
    shared_server: Callable[[str], EphemeralServer],
    shared_cluster: Callable[[], LocalCluster],
) -> Iterator[tuple[Callable[[], MessageLogChatStore], redis.Redis]]:
    """A store factory (call it inside the event loop) and a sync client to inspect."""
    if request.param == "cluster":
        cluster = shared_cluster()
        url = f"redis://127.0.0.1:{cluster.port}"
        raw: Any = redis.cluster.RedisCluster(host="127.0.0.1", port=cluster.port)
        yield (lambda: MessageLogChatStore.from_url(url, cluster=True)), raw
    else:
        url = shared_server(request.param).url
        yield (lambda: MessageLogChatStore.from_url(url)), redis.Redis.from_url(url)


def run(main: Callable[[], Awaitable[T]]) -> T:
    async def wrapped() -> T:
        return await main()

    return asyncio.run(wrapped())


def texts(messages: list[ChatMessage]) -> list[str | None]:
    return [m.content for m in messages]


def test_the_chat_store_contract_on_the_log(
    make_store: tuple[Callable[[], MessageLogChatStore], redis.Redis],
) -> None:
    factory, raw = make_store
    key = new_id()
    log = MessageLog(raw, key)

    async def main() -> None:
        store = factory()
        await store.add_message(key, ChatMessage(role="user", content="m1"))
        await store.add_messages(
            key, [ChatMessage(role="assistant", content=f"m{i}") for i in (2, 3, 4, 5)]
        )
        assert await store.count_messages(key) == 5
        assert texts(await store.get_messages(key, limit=2, offset=1)) == ["m2", "m3"]
        # archive the oldest two: one call moving the watermark; nothing is deleted
        assert texts(await store.archive_oldest_messages(key, 2)) == ["m1", "m2"]
        assert texts(await store.get_messages(key, status=ARCHIVED)) == ["m1", "m2"]
        assert texts(await store.get_messages(key)) == ["m3", "m4", "m5"]
        assert texts(await store.get_messages(key, status=None)) == [f"m{i}" for i in range(1, 6)]
        assert (
            await store.count_messages(key, ARCHIVED),
            await store.count_messages(key, None),
        ) == (2, 5)
        assert [r.content for r in log.all(view="archived")] == ["m1", "m2"]
        # another writer's message is a ChatMessage for the store
        log.append_openai([{"role": "user", "content": [{"type": "text", "text": "m6"}]}])
        assert texts(await store.get_messages(key))[-1] == "m6"
        # deletions are retractions (the physical log keeps everything)
        deleted = await store.delete_message(key, 3)
        assert deleted is not None and deleted.content == "m3"
        assert await store.delete_message(key, 3) is None  # already retracted
        assert await store.delete_message(key, 99) is None
        assert texts(await store.delete_oldest_messages(key, 1)) == ["m4"]
        assert texts(await store.get_messages(key)) == ["m5", "m6"]
        await store.delete_messages(key, status=ARCHIVED)
        assert texts(await store.get_messages(key, status=None)) == ["m5", "m6"]
        await store.set_messages(key, [ChatMessage(role="user", content="new")])
        assert texts(await store.get_messages(key, status=None)) == ["new"]
        assert key in await store.get_keys()
        await store.delete_messages(key)
        assert await store.count_messages(key, None) == 0
        await store.aclose()

    run(main)
    physical = [r.text for r in log.all(view="physical") if isinstance(r, StoredMessage)]
    assert physical[:6] == [f"m{i}" for i in range(1, 7)]  # nothing deleted


def test_memory_archives_through_the_store(
    make_store: tuple[Callable[[], MessageLogChatStore], redis.Redis],
) -> None:
    factory, raw = make_store
    key = new_id()

    async def main() -> list[ChatMessage]:
        store = factory()
        memory = Memory.from_defaults(
            session_id=key, chat_store=store, token_limit=40, tokenizer_fn=words
        )
        engine = SimpleChatEngine.from_defaults(llm=MockLLM(max_tokens=4), memory=memory)
        for turn in range(8):
            await engine.achat(f"question number {turn} please")
        active = await memory.aget()
        await store.aclose()
        return active

    active = run(main)
    log = MessageLog(raw, key)
    everything = log.all()
    archived = log.all(view="archived")
    assert len(everything) == 16 and archived  # 8 turns, every one kept, the oldest archived
    assert everything[: len(archived)] == archived  # the archived rows are the oldest
    assert [r.content for r in log.all(view="active")] == [m.content for m in active]
    assert sum(len(words(m.content or "")) for m in active) <= 40 * 0.7
    assert active[0].role == "user"  # Memory keeps whole turns


def _memory_worker(url: str, key: str, worker: int, turns: int) -> None:
    async def main() -> None:
        store = MessageLogChatStore.from_url(url)
        memory = Memory.from_defaults(
            session_id=key, chat_store=store, token_limit=60, tokenizer_fn=words
        )
        engine = SimpleChatEngine.from_defaults(llm=MockLLM(max_tokens=3), memory=memory)
        for turn in range(turns):
            await engine.achat(f"w{worker} t{turn}")
        await store.aclose()

    asyncio.run(main())


def test_worker_processes_share_one_memory(shared_server: Callable[[str], EphemeralServer]) -> None:
    url, key, workers, turns = shared_server("redis").url, new_id(), 3, 6
    context = multiprocessing.get_context("spawn")
    processes = [
        context.Process(target=_memory_worker, args=(url, key, w, turns)) for w in range(workers)
    ]
    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout=120)
        assert process.exitcode == 0
    log = MessageLog(redis.Redis.from_url(url), key)
    rows = log.all()
    assert len(rows) == workers * turns * 2  # no message lost or doubled
    for w in range(workers):  # each worker's turns in its order
        mine = [r.text for r in rows if r.role == "user" and r.text.startswith(f"w{w} ")]
        assert mine == [f"w{w} t{t}" for t in range(turns)]
    archived, active = log.all(view="archived"), log.all(view="active")
    assert archived and rows == archived + active  # the watermark: a prefix, moved forward
    # archive_oldest_messages raced between workers: every archive entry moved it forward
    physical = log.all(view="physical")
    marks = [e.through_seq or 0 for e in physical if isinstance(e, EditEntry) and e.op == "archive"]
    assert marks == sorted(marks) and len(set(marks)) == len(marks)


def test_the_sync_chat_api(shared_server: Callable[[str], EphemeralServer]) -> None:
    """LlamaIndex's sync methods run the store on an event loop of their own."""
    url, key = shared_server("valkey").url, new_id()
    store = MessageLogChatStore.from_url(url)
    memory = Memory.from_defaults(session_id=key, chat_store=store, tokenizer_fn=words)
    engine = SimpleChatEngine.from_defaults(llm=MockLLM(max_tokens=2), memory=memory)
    engine.chat("one")
    engine.chat("two")
    assert [m.content for m in memory.get_all()] == ["one", "text text", "two", "text text"]
    assert [r.text for r in MessageLog(redis.Redis.from_url(url), key).all()][::2] == ["one", "two"]
