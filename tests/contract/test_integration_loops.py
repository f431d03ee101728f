"""Every integration works from any number of event loops.

A ``redis.asyncio`` connection belongs to the loop that opened it, so an integration that
kept one client failed on a second loop (``Event loop is closed``, ``attached to a
different loop``, or a hang): two ``asyncio.run(Runner.run(...))`` calls with one
session, a framework's sync entry point, a thread with a loop of its own. Each test here
builds one integration object outside any loop, with a client given (and from a URL),
and drives it with the framework's own runtime from two loops one after the other, then
from two threads each running its own loop at once.
"""

from __future__ import annotations

import asyncio
import gc
import threading
import warnings
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest
import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.cluster

from redis_msglog import MessageLog
from redis_msglog.testing import EphemeralServer

from ..conftest import new_id
from ..support.cluster import LocalCluster

pytestmark = pytest.mark.frameworks

TAGS = ["first-run", "second-run", "thread-0", "thread-1"]


@pytest.fixture(autouse=True)
def _collect_the_loops_clients() -> Iterator[None]:
    """These tests end event loops on purpose with clients still open on them (a client
    per loop, as a user's ``asyncio.run`` calls leave them). Their sockets are reclaimed
    here, in this module's teardown, not by a garbage collection that happens to run in
    a later test (where the unclosed-socket warning would be charged to that test)."""
    yield
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()


def across_loops(step: Callable[[str], Awaitable[Any]]) -> None:
    """``step(tag)`` in two ``asyncio.run`` calls one after the other, then in two threads
    at once, each with its own loop (a hang fails instead of blocking the suite)."""
    for tag in TAGS[:2]:
        asyncio.run(_awaited(step(tag)))
    failures: list[BaseException] = []
    together = threading.Barrier(2)

    def in_thread(tag: str) -> None:
        async def main() -> None:
            together.wait(timeout=30)  # both loops are running before either goes on
            await step(tag)

        try:
            asyncio.run(main())
        except BaseException as exc:  # reported below, with the thread's tag
            failures.append(exc)

    threads = [threading.Thread(target=in_thread, args=(tag,), daemon=True) for tag in TAGS[2:]]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads), "a loop hung"
    if failures:
        raise failures[0]


async def _awaited(awaitable: Awaitable[Any]) -> Any:
    return await awaitable


class Backend:
    """A server (or the local cluster) and its clients."""

    def __init__(self, name: str, server: EphemeralServer | LocalCluster) -> None:
        self.name = name
        self.cluster = isinstance(server, LocalCluster)
        port = server.port
        self.url = f"redis://127.0.0.1:{port}"
        self.raw: Any = (
            redis.cluster.RedisCluster(host="127.0.0.1", port=port)
            if self.cluster
            else redis.Redis.from_url(self.url)
        )

    def async_client(self) -> Any:
        if self.cluster:
            return redis.asyncio.cluster.RedisCluster.from_url(self.url)
        return redis.asyncio.Redis.from_url(self.url)

    def texts(self, conversation: str, role: str = "user", **options: Any) -> list[str]:
        rows = MessageLog(self.raw, conversation, **options).all()
        return [row.text for row in rows if row.role == role]


@pytest.fixture(params=["redis", "cluster"])
def backend(
    request: pytest.FixtureRequest,
    shared_server: Callable[[str], EphemeralServer],
    shared_cluster: Callable[[], LocalCluster],
) -> Backend:
    if request.param == "cluster":
        return Backend("cluster", shared_cluster())
    return Backend("redis", shared_server("redis"))


# -- the OpenAI Agents SDK ---------------------------------------------------------------


@pytest.mark.parametrize("made", ["client", "from_url"])
def test_an_agents_session_runs_on_any_event_loop(backend: Backend, made: str) -> None:
    """``asyncio.run(Runner.run(agent, ..., session=session))`` with one session, twice
    and then from two threads at once: every turn in the session, once."""
    pytest.importorskip("agents")
    from redis_msglog.integrations.openai_agents import MessageLogSession

    from .test_integration_openai_agents import ScriptedModel, agent, run_turns

    session_id = new_id()
    session = (
        MessageLogSession(session_id, backend.async_client())
        if made == "client"
        else MessageLogSession.from_url(session_id, url=backend.url, cluster=backend.cluster)
    )

    async def step(tag: str) -> None:
        await run_turns(session, [f"{tag}: Paris"], ScriptedModel())
        assert any(item.get("content") == f"{tag}: Paris" for item in await session.get_items())
        await session.close()

    across_loops(step)
    assert sorted(backend.texts(session_id)) == sorted(f"{tag}: Paris" for tag in TAGS)
    assert agent is not None


# -- LangChain ----------------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore:RunnableWithMessageHistory is deprecated:DeprecationWarning")
@pytest.mark.parametrize("made", ["client", "from_url"])
def test_a_langchain_history_runs_on_any_event_loop(backend: Backend, made: str) -> None:
    """``RunnableWithMessageHistory.ainvoke`` with the README's factory (a history per
    call, one asyncio client for all), or one ``from_url`` history for every loop. (Two
    invocations at once must not share one history object, loops or not: its pinned
    snapshot is the object's. So the shared one is written directly from the threads.)"""
    pytest.importorskip("langchain_core")
    from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
    from langchain_core.runnables import RunnableLambda
    from langchain_core.runnables.history import RunnableWithMessageHistory

    from redis_msglog.integrations.langchain import MessageLogChatHistory

    session_id = new_id()
    client = backend.async_client()
    shared = MessageLogChatHistory.from_url(session_id, url=backend.url, cluster=backend.cluster)

    def make(sid: str) -> MessageLogChatHistory:
        if made == "client":
            return MessageLogChatHistory(sid, async_redis=client)
        return shared

    def respond(messages: list[BaseMessage]) -> AIMessage:
        return AIMessage(f"seen {len(messages)}")

    chain = RunnableWithMessageHistory(RunnableLambda(respond), make)
    config: Any = {"configurable": {"session_id": session_id}}

    async def step(tag: str) -> None:
        if made == "from_url" and tag.startswith("thread"):
            await shared.aadd_messages([HumanMessage(tag), AIMessage("seen")])
        else:
            await chain.ainvoke([HumanMessage(tag)], config)
        history = make(session_id)
        assert history.alog is not None  # the log itself: the snapshot is the object's
        assert tag in [row.text for row in await history.alog.all()]
        await shared.aclose()

    across_loops(step)
    assert sorted(backend.texts(session_id)) == sorted(TAGS)
    assert len(backend.texts(session_id, role="assistant")) == 4


def test_a_langchain_middleware_runs_on_any_event_loop(backend: Backend) -> None:
    """One ``MessageLogMiddleware`` in ``create_agent`` agents run with ``ainvoke``."""
    pytest.importorskip("langchain")
    from langchain_core.messages import HumanMessage

    from redis_msglog.integrations.langchain import MessageLogMiddleware

    from .test_integration_langchain import make_agent, script

    middleware = MessageLogMiddleware(async_redis=backend.async_client())
    thread = new_id()

    async def step(tag: str) -> None:
        agent, _ = make_agent(middleware, script(tag))
        config: Any = {"configurable": {"thread_id": f"{thread}-{tag}"}}
        await agent.ainvoke({"messages": [HumanMessage(tag)]}, config)

    across_loops(step)
    for tag in TAGS:
        assert backend.texts(f"{thread}-{tag}") == [tag]
        assert backend.texts(f"{thread}-{tag}", role="assistant")[-1] == f"{tag}: sunny"


# -- LlamaIndex ---------------------------------------------------------------------------


def test_a_llama_index_store_given_a_client_runs_on_any_event_loop(backend: Backend) -> None:
    """One ``MessageLogChatStore`` (a client given) behind ``Memory`` and a chat engine's
    ``achat``."""
    pytest.importorskip("llama_index.core")
    from llama_index.core.chat_engine import SimpleChatEngine
    from llama_index.core.llms import MockLLM
    from llama_index.core.memory import Memory

    from redis_msglog.integrations.llama_index import MessageLogChatStore

    store = MessageLogChatStore(backend.async_client())
    key = new_id()

    async def step(tag: str) -> None:
        memory = Memory.from_defaults(session_id=f"{key}-{tag}", chat_store=store)
        engine = SimpleChatEngine.from_defaults(llm=MockLLM(max_tokens=2), memory=memory)
        await engine.achat(tag)
        await store.aclose()

    across_loops(step)
    for tag in TAGS:
        assert backend.texts(f"{key}-{tag}") == [tag]


def test_a_llama_index_base_chat_store_runs_on_any_event_loop(backend: Backend) -> None:
    """One ``MessageLogBaseChatStore`` (an asyncio client given) behind a
    ``ChatMemoryBuffer``'s ``aput``/``aget_all``, from every loop."""
    from llama_index.core.llms import ChatMessage
    from llama_index.core.memory import ChatMemoryBuffer

    from redis_msglog.integrations.llama_index import MessageLogBaseChatStore

    store = MessageLogBaseChatStore(async_redis=backend.async_client())
    key = new_id()

    async def step(tag: str) -> None:
        memory = ChatMemoryBuffer.from_defaults(chat_store=store, chat_store_key=f"{key}-{tag}")
        await memory.aput(ChatMessage(role="user", content=tag))
        assert [m.content for m in await memory.aget_all()] == [tag]
        await store.aclose()

    across_loops(step)
    for tag in TAGS:
        assert backend.texts(f"{key}-{tag}") == [tag]


# -- Pydantic AI ---------------------------------------------------------------------------


def test_a_pydantic_ai_store_given_a_client_runs_on_any_event_loop(backend: Backend) -> None:
    """One ``RedisConversationStore`` (a client given): load, ``Agent.run``, save."""
    pytest.importorskip("pydantic_ai")
    from redis_msglog.integrations.pydantic_ai import RedisConversationStore

    from .test_integration_pydantic_ai import turn

    store = RedisConversationStore(backend.async_client())
    conversation = new_id()

    async def step(tag: str) -> None:
        await turn(store, f"{conversation}-{tag}", tag)
        await store.aclose()

    across_loops(step)
    for tag in TAGS:
        assert backend.texts(f"{conversation}-{tag}") == [tag]


@pytest.mark.parametrize("made", ["client", "from_url"])
def test_an_agent_framework_provider_runs_on_any_event_loop(backend: Backend, made: str) -> None:
    """One ``MessageLogHistoryProvider``: ``Agent.run`` with a scripted chat client."""
    from agent_framework import Agent, AgentSession

    from redis_msglog.integrations.agent_framework import MessageLogHistoryProvider

    from ..support.agent_framework_client import ScriptedClient

    history = (
        MessageLogHistoryProvider(redis=backend.async_client())
        if made == "client"
        else MessageLogHistoryProvider.from_url(url=backend.url, cluster=backend.cluster)
    )
    agent = Agent(ScriptedClient(), context_providers=[history])
    session = new_id()

    async def step(tag: str) -> None:
        await agent.run(tag, session=AgentSession(session_id=f"{session}-{tag}"))
        await history.aclose()

    across_loops(step)
    for tag in TAGS:
        assert backend.texts(history.conversation(f"{session}-{tag}")) == [tag]


# -- Google ADK ----------------------------------------------------------------------------


@pytest.mark.parametrize("made", ["client", "from_url"])
def test_an_adk_session_service_runs_on_any_event_loop(backend: Backend, made: str) -> None:
    """One ``MessageLogSessionService``: a session and a ``Runner`` turn on each loop."""
    pytest.importorskip("google.adk")
    from redis_msglog.integrations.google_adk import MessageLogSessionService

    from .test_integration_google_adk_runner import history, runner, turn

    service = (
        MessageLogSessionService(backend.async_client())
        if made == "client"
        else MessageLogSessionService.from_url(url=backend.url, cluster=backend.cluster)
    )
    user = new_id()

    async def step(tag: str) -> None:
        await service.create_session(app_name="app", user_id=user, session_id=tag)
        await turn(runner(service), user, tag, tag)
        assert await history(service, user, tag) == [("user", tag), ("bot", f"echo {tag}")]
        await service.close()

    across_loops(step)


# -- the client derived for another loop ---------------------------------------------------


def test_a_derived_client_has_the_given_clients_connection_settings(
    shared_server: Callable[[str], EphemeralServer],
) -> None:
    """The client an integration uses on a loop other than the given client's: the same
    connection arguments and pool size, a pool of its own, working on that loop."""
    from redis_msglog.integrations._clients import derived_client

    url = shared_server("redis").url
    given = redis.asyncio.Redis.from_url(
        url, decode_responses=True, client_name="mine", max_connections=7
    )
    made = derived_client(given)
    assert isinstance(made, redis.asyncio.Redis)
    assert made.connection_pool is not given.connection_pool

    def settings(client: Any) -> dict[str, Any]:  # each pool has its own handler
        kwargs = dict(client.connection_pool.connection_kwargs)
        return {k: v for k, v in kwargs.items() if k != "maint_notifications_pool_handler"}

    assert settings(made) == settings(given) and settings(made)["client_name"] == "mine"
    assert made.connection_pool.max_connections == 7

    async def use() -> tuple[Any, Any]:
        await made.set("k", "v")
        name = await made.client_getname()
        await made.aclose()
        return name, await given.get("k")

    name, value = asyncio.run(use())
    assert (name, value) == ("mine", "v")  # decoded: decode_responses carried over
    assert redis.Redis.from_url(url).get("k") == b"v"


def test_closing_one_history_leaves_the_others_on_that_loop_working(backend: Backend) -> None:
    """The README's factory makes a history per request, all given one asyncio client; on
    a loop other than the client's own they share the client derived for that loop. One
    request's ``aclose()`` must not close it under the others still working there."""
    pytest.importorskip("langchain_core")
    from langchain_core.messages import HumanMessage

    from redis_msglog.integrations.langchain import MessageLogChatHistory

    client = backend.async_client()
    first_id, second_id = new_id(), new_id()

    async def on_the_clients_loop() -> None:
        await MessageLogChatHistory(first_id, async_redis=client).aadd_messages(
            [HumanMessage("claims the client for this loop")]
        )

    async def on_another_loop() -> None:
        one = MessageLogChatHistory(first_id, async_redis=client)
        other = MessageLogChatHistory(second_id, async_redis=client)
        await one.aadd_messages([HumanMessage("one")])
        await other.aadd_messages([HumanMessage("other, before")])
        assert other.alog is not None
        shared: Any = other.alog._redis  # the client derived for this loop
        waiting = asyncio.create_task(shared.xread({f"{{{second_id}}}:idle": "$"}, block=500))
        await asyncio.sleep(0.1)  # the read is in flight on the shared client
        await one.aclose()  # must not close the client under the other history's read
        assert await waiting in ([], {}, None)  # timed out as asked, not cut off
        await other.aadd_messages([HumanMessage("other, after")])
        await other.aclose()  # the last user: closes it

    asyncio.run(on_the_clients_loop())
    asyncio.run(on_another_loop())
    assert backend.texts(second_id) == ["other, before", "other, after"]
