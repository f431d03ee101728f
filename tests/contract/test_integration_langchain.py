"""LangChain on the log: ``MessageLogChatHistory`` (lossless, sync and asyncio; one
snapshot per ``RunnableWithMessageHistory`` invocation, proven with two workers
interleaving) and ``MessageLogMiddleware`` on ``create_agent`` with langchain-core's
fake chat model (each message mirrored once, keyed by its id; ``hydrate``)."""

from __future__ import annotations

import asyncio
import base64
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.runnables import RunnableLambda
from langchain_core.runnables.history import RunnableWithMessageHistory
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from pydantic import Field

from redis_msglog import Usage
from redis_msglog.integrations.langchain import MessageLogChatHistory, MessageLogMiddleware
from redis_msglog.testing import EphemeralServer

from ..conftest import Env, backend_server, make_env
from ..support.cluster import LocalCluster

BACKENDS = ["redis", "valkey", "fakeredis", "cluster", "acl"]  # acl: a restricted user
# BaseChatMessageHistory's users still run RunnableWithMessageHistory (deprecated in 1.3.3).
pytestmark = [
    pytest.mark.frameworks,
    pytest.mark.filterwarnings(
        "ignore:RunnableWithMessageHistory is deprecated:DeprecationWarning"
    ),
]
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(range(24))).decode()


@pytest.fixture(params=BACKENDS)
def lc_env(
    request: pytest.FixtureRequest,
    shared_server: Callable[[str], EphemeralServer],
    shared_cluster: Callable[[], LocalCluster],
) -> Iterator[Env]:
    backend = str(request.param)
    server = backend_server(backend, shared_server, shared_cluster)
    env = make_env(backend, "async", server)
    yield env
    env.close()


def new_id() -> str:
    return f"lc-{uuid.uuid4().hex[:12]}"


def history(env: Env, session_id: str) -> MessageLogChatHistory:
    client = env.make_async_client()
    env._async_clients.append(client)
    return MessageLogChatHistory(session_id, env.make_sync_client(), async_redis=client)


def dumps(messages: Sequence[BaseMessage]) -> list[dict[str, Any]]:
    return [m.model_dump() for m in messages]


MESSAGES: list[BaseMessage] = [
    SystemMessage("Be terse.", id="s1"),
    HumanMessage(
        [
            {"type": "text", "text": "What is this?"},
            {"type": "image", "base64": PNG, "mime_type": "image/png"},
        ],
        id="h1",
    ),
    AIMessage(
        "",
        id="a1",
        tool_calls=[{"id": "c1", "name": "look", "args": {"at": "image"}, "type": "tool_call"}],
        usage_metadata={"input_tokens": 3, "output_tokens": 2, "total_tokens": 5},
        response_metadata={"model_name": "fake"},
    ),
    ToolMessage("a square", tool_call_id="c1", id="t1"),
    AIMessage(
        [
            {"type": "reasoning", "reasoning": "it has four sides"},
            {"type": "text", "text": "A square."},
        ],
        id="a2",
    ),
]


# -- the chat history --------------------------------------------------------------------


def test_history_lossless_sync_and_async(lc_env: Env) -> None:
    session_id = new_id()
    h = history(lc_env, session_id)
    h.add_messages(MESSAGES[:3])
    lc_env.loop.run_until_complete(h.aadd_messages(MESSAGES[3:]))
    for reader in (history(lc_env, session_id), history(lc_env, session_id)):
        assert dumps(reader.messages) == dumps(MESSAGES)
        assert dumps(lc_env.loop.run_until_complete(reader.aget_messages())) == dumps(MESSAGES)
    h.add_user_message("and now?")
    assert h.messages[-1].content == "and now?"  # sees its own appends
    # One append per add_messages call: 3 + 2 + 1 messages, gap-free seqs.
    assert h.log is not None and h.log.count() == 6


def test_snapshot_pinned_until_write(lc_env: Env) -> None:
    session_id = new_id()
    mine, other = history(lc_env, session_id), history(lc_env, session_id)
    mine.add_messages([HumanMessage("one", id="1")])
    first = mine.messages
    other.add_messages([HumanMessage("two", id="2")])
    assert dumps(mine.messages) == dumps(first)  # the same snapshot
    assert dumps(lc_env.loop.run_until_complete(mine.aget_messages())) == dumps(first)
    mine.add_messages([HumanMessage("three", id="3")])
    assert [m.content for m in mine.messages] == ["one", "two", "three"]
    mine.refresh()
    assert [m.content for m in mine.messages] == ["one", "two", "three"]


class Rereading(MessageLogChatHistory):
    """A history without the pinned snapshot (what other stores do): every read re-reads."""

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        self.refresh()
        return super().messages

    async def aget_messages(self) -> list[BaseMessage]:
        self.refresh()
        return await super().aget_messages()


def two_workers(
    make: Callable[[str], BaseChatMessageHistory], session_id: str, env: Env, use_async: bool
) -> Any:
    """Worker A's invocation; while its chain runs, worker B runs a whole one."""
    replies = iter(["reply to B", "reply to A"])

    def respond(messages: list[BaseMessage]) -> AIMessage:
        return AIMessage(next(replies))

    inner = RunnableWithMessageHistory(RunnableLambda(respond), make)  # worker B
    config: Any = {"configurable": {"session_id": session_id}}

    def chain(messages: list[BaseMessage]) -> AIMessage:
        inner.invoke([HumanMessage("question from B")], config)
        return respond(messages)

    async def achain(messages: list[BaseMessage]) -> AIMessage:
        await inner.ainvoke([HumanMessage("question from B")], config)
        return respond(messages)

    outer = RunnableWithMessageHistory(RunnableLambda(chain, afunc=achain), make)  # worker A
    question = [HumanMessage("question from A")]
    if use_async:
        return env.loop.run_until_complete(outer.ainvoke(question, config))
    return outer.invoke(question, config)


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
def test_runnable_with_message_history_two_workers(lc_env: Env, use_async: bool) -> None:
    """Worker B appends its turn while worker A's chain runs: A's input and output are
    both recorded. A history that re-reads instead drops A's input (the bug pinned)."""

    def texts(session_id: str) -> list[str]:
        return [str(m.content) for m in history(lc_env, session_id).messages]

    def factory(cls: type[MessageLogChatHistory]) -> Callable[[str], BaseChatMessageHistory]:
        def make(session_id: str) -> BaseChatMessageHistory:
            # A fresh history per invocation, as get_session_history usually makes.
            client = lc_env.make_async_client()
            lc_env._async_clients.append(client)
            return cls(session_id, lc_env.make_sync_client(), async_redis=client)

        return make

    ours = new_id()
    two_workers(factory(MessageLogChatHistory), ours, lc_env, use_async)
    assert texts(ours) == ["question from B", "reply to B", "question from A", "reply to A"]

    theirs = new_id()
    two_workers(factory(Rereading), theirs, lc_env, use_async)
    assert texts(theirs) == ["question from B", "reply to B", "reply to A"]  # A's input lost


def test_history_from_url_and_clear(shared_server: Callable[[str], EphemeralServer]) -> None:
    h = MessageLogChatHistory.from_url(new_id(), url=shared_server("redis").url, prefix="lc")
    h.add_messages(MESSAGES)
    assert dumps(h.messages) == dumps(MESSAGES)
    h.clear()
    assert h.messages == []
    assert h.log is not None and h.log.keys.stream.startswith("lc:")

    async def go() -> None:
        await h.aadd_messages(MESSAGES[:1])
        assert dumps(await h.aget_messages()) == dumps(MESSAGES[:1])
        await h.aclear()
        assert await h.aget_messages() == []
        await h.aclose()

    asyncio.run(go())


# -- the agent middleware ----------------------------------------------------------------


class FakeToolModel(GenericFakeChatModel):
    """langchain-core's fake chat model, with tools bound (ignored) and inputs kept."""

    inputs: list[list[BaseMessage]] = Field(default_factory=list)

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> Any:
        self.inputs.append(list(messages))
        return super()._generate(messages, *args, **kwargs)


@tool
def weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


def script(tag: str) -> list[AIMessage]:
    """A turn: two parallel calls, then the answer."""
    calls = [
        {"id": f"{tag}-c{n}", "name": "weather", "args": {"city": city}, "type": "tool_call"}
        for n, city in enumerate(["Paris", "Rome"])
    ]
    return [AIMessage("", tool_calls=calls), AIMessage(f"{tag}: sunny")]


def make_agent(middleware: MessageLogMiddleware, replies: list[AIMessage]) -> Any:
    model = FakeToolModel(messages=iter(replies))
    agent = create_agent(model, [weather], middleware=[middleware], checkpointer=InMemorySaver())
    return agent, model


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
def test_middleware_mirrors_each_message_once(lc_env: Env, use_async: bool) -> None:
    """Two turns on one thread: the log holds the thread's messages, equal and in order,
    each once; a second middleware (another worker, its memory cold) on the same state
    adds nothing."""
    thread = new_id()
    config: Any = {"configurable": {"thread_id": thread}}

    def run(agent: Any, text: str) -> Any:
        payload = {"messages": [HumanMessage(text)]}
        if use_async:
            return lc_env.loop.run_until_complete(agent.ainvoke(payload, config))
        return agent.invoke(payload, config)

    client = lc_env.make_async_client()
    lc_env._async_clients.append(client)
    middleware = MessageLogMiddleware(lc_env.make_sync_client(), async_redis=client)
    agent, _ = make_agent(middleware, script("t1") + script("t2"))
    run(agent, "weather?")
    state = run(agent, "and again?")
    log = middleware.log(thread)
    assert dumps(log.to_langchain_messages()) == dumps(state["messages"])
    assert log.count() == len(state["messages"]) == 2 * (1 + 1 + 2 + 1)

    cold = MessageLogMiddleware(lc_env.make_sync_client(), async_redis=client)
    cold_agent, _ = make_agent(cold, [AIMessage("t3: noted")])
    state_copy = {"messages": state["messages"] + [HumanMessage("t3", id="h-t3")]}
    if use_async:
        lc_env.loop.run_until_complete(cold_agent.ainvoke(state_copy, config))
    else:
        cold_agent.invoke(state_copy, config)
    texts = [m.text for m in log.all()]
    assert texts[-2:] == ["t3", "t3: noted"]
    assert log.count() == 12  # nothing twice


SPENT: Any = {  # each model call's usage_metadata
    "input_tokens": 100,
    "output_tokens": 20,
    "total_tokens": 120,
    "input_token_details": {"cache_read": 40},
    "output_token_details": {"reasoning": 5},
}


@pytest.mark.parametrize("lc_env", ["redis"], indirect=True)  # not a per-backend behaviour
def test_a_runs_usage_lands_in_the_conversations_totals(lc_env: Env) -> None:
    """Two turns (a tool call, then the answer: two model calls each), the first sync,
    the second asyncio: each AIMessage's usage_metadata is its row's usage and adds to
    the log's totals, once (another worker mirroring the same state adds nothing); the
    thread reads back from the log unchanged, usage_metadata included."""
    thread = new_id()
    config: Any = {"configurable": {"thread_id": thread}}
    client = lc_env.make_async_client()
    lc_env._async_clients.append(client)
    middleware = MessageLogMiddleware(lc_env.make_sync_client(), async_redis=client)
    replies = [
        AIMessage(m.content, tool_calls=m.tool_calls[:1], usage_metadata=SPENT)
        for m in script("t1") + script("t2")
    ]
    agent, _ = make_agent(middleware, replies)
    agent.invoke({"messages": [HumanMessage("weather?")]}, config)
    payload = {"messages": [HumanMessage("and again?")]}
    state = lc_env.loop.run_until_complete(agent.ainvoke(payload, config))
    log = middleware.log(thread)
    totals = log.usage()
    assert totals == Usage(
        input_tokens=400, output_tokens=80, cached_tokens=160, reasoning_tokens=20
    )
    rows = log.all()
    assert [r.role for r in rows if r.usage] == ["assistant"] * 4
    assert Usage.total(r.usage for r in rows if r.usage) == totals
    # LangChain reads its messages back unchanged, their usage_metadata too.
    assert dumps(log.to_langchain_messages()) == dumps(state["messages"])
    assert [m.usage_metadata for m in state["messages"] if isinstance(m, AIMessage)] == [SPENT] * 4
    cold = MessageLogMiddleware(lc_env.make_sync_client())
    cold_agent, _ = make_agent(cold, [AIMessage("t3: noted")])
    cold_agent.invoke({"messages": state["messages"]}, config)  # its model adds no usage
    assert log.usage() == totals and log.count() == len(state["messages"]) + 1


def test_middleware_hydrates_an_empty_thread(lc_env: Env) -> None:
    """A worker without the thread's checkpoint: hydrate puts the log's history first
    (messages other writers logged without ids included), and only the new messages
    are appended."""
    thread = new_id()
    config: Any = {"configurable": {"thread_id": thread}}
    first = MessageLogMiddleware(lc_env.make_sync_client())
    agent, _ = make_agent(first, script("t1"))
    agent.invoke({"messages": [HumanMessage("weather?")]}, config)
    first.log(thread).add("user", "a note from another writer")
    before = first.log(thread).count()

    other = MessageLogMiddleware(lc_env.make_sync_client(), hydrate=True)
    agent, model = make_agent(other, [AIMessage("t2: noted"), AIMessage("t3: bye")])
    state = agent.invoke({"messages": [HumanMessage("and now?")]}, config)
    seen = [m.text for m in model.inputs[0]]
    assert seen[0] == "weather?" and seen[-2:] == ["a note from another writer", "and now?"]
    assert len(state["messages"]) == before + 2
    log = other.log(thread)
    assert log.count() == before + 2
    assert [m.text for m in log.last(2)] == ["and now?", "t2: noted"]
    # Not hydrated again: the thread has its history now.
    agent.invoke({"messages": [HumanMessage("bye")]}, config)
    assert len(model.inputs[1]) == before + 3
    assert log.count() == before + 4


def test_middleware_needs_a_thread_id(lc_env: Env) -> None:
    middleware = MessageLogMiddleware(lc_env.make_sync_client())
    model = FakeToolModel(messages=iter([AIMessage("hi")]))
    agent = create_agent(model, [], middleware=[middleware])
    with pytest.raises(ValueError, match="thread id"):
        agent.invoke({"messages": [HumanMessage("hello")]})


def test_middleware_from_url(shared_server: Callable[[str], EphemeralServer]) -> None:
    middleware = MessageLogMiddleware.from_url(url=shared_server("redis").url, prefix="mw")
    thread = new_id()
    agent, _ = make_agent(middleware, [AIMessage("hello")])
    agent.invoke({"messages": [HumanMessage("hi")]}, {"configurable": {"thread_id": thread}})
    assert [m.text for m in middleware.log(thread).all()] == ["hi", "hello"]
    assert middleware.log(thread).keys.stream.startswith("mw:")
