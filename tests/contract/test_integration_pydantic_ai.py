"""Pydantic AI: RedisConversationStore as the ConversationStore of Agent runs, on real
servers: save and load across processes, a stale revision rejected, concurrent saves with
one winner, branch and fork on the log, entries readable as the log's messages."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import signal
import subprocess
import sys
from collections.abc import Awaitable, Callable, Iterator
from decimal import Decimal
from typing import Any, TypeVar

import pytest
import redis
import redis.asyncio
import redis.asyncio.connection
from pydantic_ai import Agent
from pydantic_ai.conversation import Conversation
from pydantic_ai.conversation_store import ConversationConflict, ConversationEntry
from pydantic_ai.messages import (
    BinaryContent,
    ImageUrl,
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel
from pydantic_ai.usage import RequestUsage

from benchmarks.run import capturing_writes
from redis_msglog import AsyncMessageLog, EditEntry, MessageLog, StoredMessage, Usage
from redis_msglog.integrations.pydantic_ai import RedisConversationStore, entry_rows, row_entry
from redis_msglog.testing import EphemeralServer

from ..conftest import new_id
from ..support.cluster import LocalCluster

pytestmark = pytest.mark.frameworks

T = TypeVar("T")


def make_agent() -> Agent[None, str]:
    agent = Agent(TestModel(), instructions="Be terse.")

    @agent.tool_plain
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    return agent


def run(main: Callable[[], Awaitable[T]]) -> T:
    async def wrapped() -> T:
        return await main()

    return asyncio.run(wrapped())


async def turn(store: RedisConversationStore, conversation_id: str, prompt: Any) -> Conversation:
    """The documented loop: load (or start), run, save."""
    conversation = await store.load(conversation_id) or Conversation(
        conversation_id=conversation_id
    )
    result = await make_agent().run(prompt, conversation=conversation)
    await store.save(result)
    return result.conversation


# -- entries as rows (pure) ---------------------------------------------------------------

MESSAGES: list[ModelMessage] = [
    ModelRequest(
        parts=[
            SystemPromptPart("sys"),
            UserPromptPart(["look", BinaryContent(b"\x89PNG", media_type="image/png")]),
            UserPromptPart([ImageUrl("https://example.com/a.png")]),
        ],
        instructions="Be terse.",
    ),
    ModelResponse(
        parts=[
            ThinkingPart("hmm", signature="sig", provider_name="anthropic"),
            TextPart("calling"),
            ToolCallPart("add", {"a": 1, "b": 2}, tool_call_id="c1"),
            ToolCallPart("neg", '{"x": 1}', tool_call_id="c2"),
        ]
    ),
    ModelRequest(
        parts=[
            ToolReturnPart("add", 3, tool_call_id="c1"),
            ToolReturnPart("neg", {"v": -1}, tool_call_id="c2"),
        ]
    ),
]


def test_an_entry_is_the_logs_messages_and_comes_back_exactly() -> None:
    parent = None
    for message in MESSAGES:
        entry = ConversationEntry(parent_id=parent, message=message)
        rows = entry_rows(entry)
        assert {row.id for row in rows} == {entry.id}
        assert [row_entry(row) for row in rows[:-1]] == [None] * (len(rows) - 1)
        # exactly what Pydantic AI's own JSON gives back (a BinaryContent of an image is
        # a BinaryImage then), with its parent and id
        native = ModelMessagesTypeAdapter.validate_json(
            ModelMessagesTypeAdapter.dump_json([message])
        )
        assert row_entry(rows[-1]) == ConversationEntry(
            id=entry.id, parent_id=parent, message=native[0]
        )
        parent = entry.id
    request, response, results = (
        entry_rows(ConversationEntry(parent_id=p, message=m))
        for p, m in zip([None, "x", "x"], MESSAGES, strict=True)
    )
    assert [r.role for r in request] == ["system", "system", "user", "user"]
    assert request[2].content[1].type == "image"  # type: ignore[union-attr]
    assert response[0].tool_calls is not None and [c.args for c in response[0].tool_calls] == [
        {"a": 1, "b": 2},
        {"x": 1},
    ]
    assert response[0].content[0].provider == "anthropic"  # type: ignore[union-attr]
    assert [(r.role, r.tool_call_id, r.content) for r in results] == [
        ("tool", "c1", "3"),
        ("tool", "c2", '{"v":-1}'),
    ]


# -- real servers -------------------------------------------------------------------------


@pytest.fixture(params=["redis", "cluster"])
def target(
    request: pytest.FixtureRequest,
    shared_server: Callable[[str], EphemeralServer],
    shared_cluster: Callable[[], LocalCluster],
) -> Iterator[tuple[Callable[[], RedisConversationStore], redis.Redis]]:
    """A store factory (call it inside the event loop) and a sync client to inspect."""
    if request.param == "cluster":
        port = shared_cluster().port
        url = f"redis://127.0.0.1:{port}"
        raw: Any = redis.cluster.RedisCluster(host="127.0.0.1", port=port)
        yield (lambda: RedisConversationStore.from_url(url, cluster=True)), raw
    else:
        url = shared_server(request.param).url
        yield (lambda: RedisConversationStore.from_url(url)), redis.Redis.from_url(url)


def test_runs_saved_and_loaded_are_the_logs_messages(
    target: tuple[Callable[[], RedisConversationStore], redis.Redis],
) -> None:
    factory, raw = target
    cid = new_id()

    async def main() -> tuple[Conversation, Conversation | None]:
        store = factory()
        await turn(store, cid, "first")
        second = await turn(store, cid, "second")
        loaded = await store.load(cid)
        window = await store.load(cid, limit=2)
        assert window is not None and window.messages == second.messages[-2:]
        await store.aclose()
        return second, loaded

    second, loaded = run(main)
    assert loaded is not None and loaded.messages == second.messages
    assert loaded.revision == second.revision and loaded.usage == second.usage
    log = MessageLog(raw, cid)
    openai = log.to_openai()  # any reader sees the conversation as messages
    assert [m["role"] for m in openai[:2]] == ["system", "user"]
    assert any(m.get("tool_calls") for m in openai) and any(m["role"] == "tool" for m in openai)
    assert [m["content"] for m in openai if m["role"] == "user"] == ["first", "second"]


def _worker_turn(url: str, cid: str, prompt: str, out: Any) -> None:
    async def main() -> None:
        store = RedisConversationStore.from_url(url)
        conversation = await turn(store, cid, prompt)
        out.put((len(conversation.messages), conversation.revision))
        await store.aclose()

    asyncio.run(main())


def test_turns_from_worker_processes(shared_server: Callable[[str], EphemeralServer]) -> None:
    url, cid = shared_server("redis").url, new_id()
    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    for prompt in ("one", "two", "three"):  # each turn in a new process: load, run, save
        process = context.Process(target=_worker_turn, args=(url, cid, prompt, out))
        process.start()
        process.join(timeout=120)
        assert process.exitcode == 0
    counts = [out.get(timeout=5)[0] for _ in range(3)]
    assert counts[0] == 4 and counts[0] < counts[1] < counts[2]  # each turn added its own

    async def main() -> Conversation | None:
        store = RedisConversationStore.from_url(url)
        try:
            return await store.load(cid)
        finally:
            await store.aclose()

    loaded = run(main)
    assert loaded is not None and len(loaded.messages) == counts[2]
    users = [m.text for m in MessageLog(redis.Redis.from_url(url), cid).all() if m.role == "user"]
    assert users == ["one", "two", "three"]


def test_a_stale_revision_is_rejected_and_concurrent_saves_have_one_winner(
    target: tuple[Callable[[], RedisConversationStore], redis.Redis],
) -> None:
    factory, raw = target
    cid = new_id()
    log = MessageLog(raw, cid)

    async def main() -> None:
        store = factory()
        await turn(store, cid, "hello")
        stale = await store.load(cid)
        fresh = await store.load(cid)
        assert stale is not None and fresh is not None
        await store.save(await make_agent().run("from A", conversation=fresh))
        before = log.count()
        with pytest.raises(ConversationConflict):
            await store.save(await make_agent().run("from B", conversation=stale))
        assert log.count() == before  # nothing written
        # two saves racing on one revision: exactly one wins, the loser writes nothing
        base = await store.load(cid)
        assert base is not None
        a = await make_agent().run("racer A", conversation=base)
        b = await make_agent().run("racer B", conversation=await store.load(cid))
        outcomes = await asyncio.gather(store.save(a), store.save(b), return_exceptions=True)
        assert sorted(type(o).__name__ for o in outcomes) == ["ConversationConflict", "list"]
        loaded = await store.load(cid)
        winner = a if isinstance(outcomes[0], list) else b
        assert loaded is not None and loaded.messages == winner.conversation.messages
        await store.aclose()

    run(main)
    users = [m.text for m in log.all() if m.role == "user"]
    assert users == ["hello", "from A", "racer A" if "racer A" in users else "racer B"]
    physical = log.all(view="physical")
    assert [m.text for m in physical if isinstance(m, StoredMessage) and m.role == "user"] == users
    assert {e.op for e in physical if isinstance(e, EditEntry)} == {"attrs"}  # no retraction
    assert not raw.exists(f"msglog:{{{cid}}}:pydantic-ai")  # the record is the attributes


def test_branch_and_fork_on_the_log(
    target: tuple[Callable[[], RedisConversationStore], redis.Redis],
) -> None:
    factory, raw = target
    cid, fid = new_id(), new_id()
    log = MessageLog(raw, cid)

    def users(conversation: str) -> list[str]:
        return [m.text for m in MessageLog(raw, conversation).all() if m.role == "user"]

    async def main() -> None:
        store = factory()
        await turn(store, cid, "one")
        two = await turn(store, cid, "two")
        # regenerate the second turn: branch back to after the first turn (4 messages)
        branched = await store.branch(cid, at=4, expected_revision=two.revision)
        assert branched.messages == two.messages[:4]
        assert users(cid) == ["one"]  # the log's view follows the head
        result = await make_agent().run("two again", conversation=branched)
        await store.save(result)
        record = await store.read_record(cid)
        assert record is not None and len(record.branches) == 1
        assert users(cid) == ["one", "two again"]
        left = record.branches[0]
        # fork the current history into a new conversation: the log's fork()
        fork = await store.fork(cid, new_conversation_id=fid)
        assert fork.messages == result.conversation.messages
        first = MessageLog(raw, fid).all(view="physical")[0]
        assert isinstance(first, EditEntry) and first.op == "fork" and first.source == cid
        await store.save(await make_agent().run("in the fork", conversation=fork))
        assert users(fid) == ["one", "two again", "in the fork"]
        assert users(cid) == ["one", "two again"]  # the source is untouched
        # switch back to the branch left: the view is put back
        current = await store.load(cid)
        assert current is not None
        back = await store.branch(cid, from_entry=left, expected_revision=current.revision)
        assert back.messages == two.messages
        assert users(cid) == ["one", "two"]
        # a fork of a branch that is not the source's view is a copy
        copy = await store.fork(cid, at=4, new_conversation_id=fid + "-b")
        assert copy.messages == two.messages[:4] and users(fid + "-b") == ["one"]
        # delete: no longer loads or lists; the physical log keeps the entries
        await store.delete(fid)
        assert await store.load(fid) is None
        listed = {r.conversation_id for r in await store.list_conversations()}
        assert {cid, fid + "-b"} <= listed and fid not in listed
        await store.aclose()

    run(main)
    physical = [e for e in log.all(view="physical") if isinstance(e, StoredMessage)]
    assert [m.text for m in physical if m.role == "user"] == [
        "one",
        "two",
        "two again",
        "one",
        "two",
    ]


def test_load_is_two_round_trips_the_history_one_and_a_save_three(
    shared_server: Callable[[str], EphemeralServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, cid = shared_server("redis").url, new_id()

    async def main() -> tuple[int, int, int]:
        store = RedisConversationStore.from_url(url)
        for prompt in ("a", "b", "c"):
            await turn(store, cid, prompt)
        conversation = await store.load(cid)
        result = await make_agent().run("d", conversation=conversation)
        client = redis.asyncio.Redis.from_url(url)
        await client.ping()  # the connection is open
        reader = RedisConversationStore(client)  # a new store: nothing cached
        # Socket writes, one per round trip (the library writes to the connection's
        # stream itself on asyncio; see benchmarks.run.capturing_writes).
        with capturing_writes() as sent:
            loaded = await reader.load(cid)
            assert loaded is not None and len(loaded.messages) == 8
            load_trips = len(sent)
            record = await reader.read_record(cid)
            assert record is not None
            before = len(sent)
            await reader.read_history(record.head_id)
            history_trips = len(sent) - before
            # the record read, the entry index, then ONE call: the entries and the record
            before = len(sent)
            await store.save(result)
            save_trips = len(sent) - before
        await store.aclose()
        await client.aclose()
        return load_trips, history_trips, save_trips

    assert run(main) == (2, 1, 3)


def think(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    return ModelResponse(
        parts=[
            ThinkingPart("deliberating", signature="sig-1", provider_name="anthropic"),
            TextPart("answer"),
        ]
    )


def test_thinking_survives_for_the_provider_that_made_it(
    shared_server: Callable[[str], EphemeralServer],
) -> None:
    url, cid = shared_server("valkey").url, new_id()

    async def main() -> Conversation | None:
        store = RedisConversationStore.from_url(url)
        result = await Agent(FunctionModel(think)).run(
            "q", conversation=Conversation(conversation_id=cid)
        )
        await store.save(result)
        loaded = await store.load(cid)
        await store.aclose()
        return loaded

    loaded = run(main)
    assert loaded is not None
    thinking = loaded.messages[1].parts[0]
    assert isinstance(thinking, ThinkingPart) and thinking.signature == "sig-1"
    turns = MessageLog(redis.Redis.from_url(url), cid).to_anthropic()
    assert turns[-1]["content"][0] == {
        "type": "thinking",
        "thinking": "deliberating",
        "signature": "sig-1",
    }


def priced(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """A model call reporting 100 tokens in (40 read from the cache), 20 out (5 of them
    reasoning), costing $0.0012: first a call of ``add``, then, with its result, the
    answer."""
    usage = RequestUsage(
        input_tokens=100,
        cache_read_tokens=40,
        output_tokens=20,
        output_reasoning_tokens=5,
        cost=Decimal("0.0012"),
    )
    last = messages[-1].parts[-1]
    if isinstance(last, ToolReturnPart):
        return ModelResponse(parts=[TextPart(f"it is {last.content}")], usage=usage)
    return ModelResponse(parts=[ToolCallPart("add", {"a": 1, "b": 2})], usage=usage)


def test_a_runs_usage_lands_in_the_conversations_totals(
    shared_server: Callable[[str], EphemeralServer],
) -> None:
    """Each model response's usage (two calls a turn: the tool call, the answer) is its
    row's usage and adds to the log's totals; the history loads back unchanged."""
    url, cid = shared_server("redis").url, new_id()
    agent = make_agent()

    async def main() -> tuple[Conversation, Conversation | None]:
        store = RedisConversationStore.from_url(url)
        with agent.override(model=FunctionModel(priced)):
            first = await agent.run("1 + 2?", conversation=Conversation(conversation_id=cid))
            await store.save(first)
            loaded = await store.load(cid)
            assert loaded is not None and loaded.messages == first.conversation.messages
            second = await agent.run("again?", conversation=loaded)
            await store.save(second)
        again = await store.load(cid)
        await store.aclose()
        return second.conversation, again

    second, loaded = run(main)
    log = MessageLog(redis.Redis.from_url(url), cid)
    totals = log.usage()
    assert totals == Usage(
        input_tokens=400,
        output_tokens=80,
        cached_tokens=160,
        reasoning_tokens=20,
        cost=0.0048,
        currency="USD",
    )
    rows = log.all()
    assert [r.role for r in rows if r.usage] == ["assistant"] * 4  # each response's own
    assert Usage.total(r.usage for r in rows if r.usage) == totals
    # Pydantic AI reads its own usage back, every response's, unchanged.
    assert loaded is not None and loaded.messages == second.messages
    responses = [m for m in loaded.messages if isinstance(m, ModelResponse)]
    assert [m.usage.input_tokens for m in responses] == [100] * 4
    assert [m.usage.cost for m in responses] == [Decimal("0.0012")] * 4


def test_a_save_that_rewrites_the_history_counts_its_new_responses_only(
    shared_server: Callable[[str], EphemeralServer],
) -> None:
    """A turn run on a history cut back (a regenerated answer) is saved with one
    ``replace``: the history's rows are copies, counted when first written; the new
    response is a model call of its own, and its usage is added."""
    url, cid = shared_server("redis").url, new_id()
    model = FunctionModel(
        lambda m, i: ModelResponse([TextPart("ok")], usage=RequestUsage(input_tokens=100))
    )
    agent = Agent(model)

    async def main() -> None:
        store = RedisConversationStore.from_url(url)
        await store.save(await agent.run("one", conversation=Conversation(conversation_id=cid)))
        loaded = await store.load(cid)
        assert loaded is not None
        await store.save(await agent.run("two", conversation=loaded))
        loaded = await store.load(cid)
        assert loaded is not None
        cut = Conversation(
            conversation_id=cid, messages=loaded.messages[:2], revision=loaded.revision
        )
        await store.save(await agent.run("two, again", conversation=cut))  # a replace
        await store.aclose()

    run(main)
    log = MessageLog(redis.Redis.from_url(url), cid)
    assert "compact" in [e.op for e in log.all(view="physical") if isinstance(e, EditEntry)]
    assert log.usage() == Usage(input_tokens=300)  # three model calls, each once


def _worker_killed(url: str, cid: str, prompt: str, when: str) -> None:
    """A turn whose process is killed (SIGKILL) just before or just after the store's one
    write call."""
    original = AsyncMessageLog.append_many

    async def killed(self: AsyncMessageLog, *args: Any, **kwargs: Any) -> int:
        if when == "after":
            await original(self, *args, **kwargs)
        os.kill(os.getpid(), signal.SIGKILL)
        raise AssertionError("unreachable")

    AsyncMessageLog.append_many = killed  # type: ignore[method-assign, assignment]

    async def main() -> None:
        await turn(RedisConversationStore.from_url(url), cid, prompt)

    asyncio.run(main())


def test_a_writer_killed_around_its_one_call_leaves_both_or_neither(
    shared_server: Callable[[str], EphemeralServer],
) -> None:
    url, cid = shared_server("redis").url, new_id()
    log = MessageLog(redis.Redis.from_url(url), cid)

    async def load() -> Conversation | None:
        store = RedisConversationStore.from_url(url)
        try:
            return await store.load(cid)
        finally:
            await store.aclose()

    def consistent() -> Conversation:
        """The record and the log agree: the view is the loaded history."""
        loaded = run(load)
        assert loaded is not None
        prompts = [
            part.content
            for message in loaded.messages
            if isinstance(message, ModelRequest)
            for part in message.parts
            if isinstance(part, UserPromptPart)
        ]
        assert [m.text for m in log.all() if m.role == "user"] == prompts
        return loaded

    run(lambda: _first_turn(url, cid))
    before, kept = log.count(), consistent()
    context = multiprocessing.get_context("spawn")
    for prompt, when in (("lost", "before"), ("landed", "after")):
        process = context.Process(target=_worker_killed, args=(url, cid, prompt, when))
        process.start()
        process.join(timeout=120)
        assert process.exitcode == -signal.SIGKILL
        loaded = consistent()
        if when == "before":  # killed before its call: neither entries nor record
            assert log.count() == before and loaded.revision == kept.revision
            assert loaded.messages == kept.messages
        else:  # killed after it: both, the record names the entries
            assert loaded.revision != kept.revision
            assert [m.text for m in log.all() if m.role == "user"] == ["kept", "landed"]
    physical = [e for e in log.all(view="physical") if isinstance(e, StoredMessage)]
    assert "lost" not in [m.text for m in physical]


async def _first_turn(url: str, cid: str) -> None:
    store = RedisConversationStore.from_url(url)
    await turn(store, cid, "kept")
    await store.aclose()


def test_another_writers_append_is_not_a_conflict_and_entries_read_back(
    target: tuple[Callable[[], RedisConversationStore], redis.Redis],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    factory, raw = target
    cid = new_id()
    log = MessageLog(raw, cid)

    async def main() -> None:
        store = factory()
        await turn(store, cid, "one")
        conversation = await store.load(cid)
        assert conversation is not None
        result = await make_agent().run("two", conversation=conversation)
        read_record = store.read_record

        async def then_another_writer(conversation_id: str) -> Any:
            record = await read_record(conversation_id)
            log.append({"role": "user", "content": "a note"})  # between the read and write
            return record

        monkeypatch.setattr(store, "read_record", then_another_writer)
        entries = await store.save(result)  # the revision is unchanged: not a conflict
        monkeypatch.undo()
        loaded = await store.load(cid)
        assert loaded is not None and loaded.messages == result.conversation.messages
        assert loaded.revision == result.conversation.revision
        # the record is the log's attributes; each entry reads back from a new store
        assert log.attrs().values["pydantic_ai.revision"] == loaded.revision
        reader = factory()
        assert [await reader.read_entry(e.id) for e in entries] == entries
        # a call that never reached the server: nothing written, its entries not found
        sent: list[Any] = []

        async def refused(self: AsyncMessageLog, rows: Any, **kwargs: Any) -> int:
            sent.extend(rows)
            raise ConnectionError("refused")

        monkeypatch.setattr(AsyncMessageLog, "append_many", refused)
        before = log.count()
        with pytest.raises(ConnectionError):
            await turn(store, cid, "three")
        assert log.count() == before and sent
        with pytest.raises(KeyError):
            await reader.read_entry(sent[-1].id)
        await store.aclose()
        await reader.aclose()

    run(main)
    assert [m.text for m in log.all() if m.role == "user"] == ["one", "a note", "two"]


def test_the_package_imports_no_framework() -> None:
    code = (
        "import sys, redis_msglog, redis_msglog.integrations, redis_msglog.adapters\n"
        "loaded = {m.split('.')[0] for m in sys.modules}\n"
        "assert not loaded & {'pydantic_ai', 'llama_index'}, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
