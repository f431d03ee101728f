"""A log's write filter (``before_append``) reaches the framework copies the integrations
keep in ``extras``: with the docs' card-number scrubber, each framework's own runtime
(the scripted models of its integration tests) and a user message holding a card
number, no key holds the number afterwards and what the framework reads back holds
``[card]``. Each test runs on a server of this module's own, emptied first, and reads
every key on it (DUMP, and the values by type)."""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import AsyncGenerator, Callable, Iterator
from typing import Any

import pytest
import redis
import redis.asyncio

from redis_msglog.models import AgentMessage
from redis_msglog.testing import EphemeralServer

from ..conftest import SERVER_ARGS, require_binary

pytestmark = pytest.mark.frameworks

CARD = "4111 1111 1111 1111"
_CARD = re.compile(r"\d{4}(?: \d{4}){3}")


def scrub(messages: list[AgentMessage]) -> list[AgentMessage]:
    """The docs' scrubber (docs/lifecycle.md, "Filtering writes")."""
    return [
        m.model_copy(update={"content": _CARD.sub("[card]", m.content)})
        if isinstance(m.content, str)
        else m
        for m in messages
    ]


@pytest.fixture(scope="module")
def server() -> Iterator[EphemeralServer]:
    # No compression in DUMP payloads: a number in them is there as text.
    started = EphemeralServer(require_binary("redis"), [*SERVER_ARGS, "--rdbcompression", "no"])
    started.start()
    yield started
    started.stop()


@pytest.fixture
def raw(server: EphemeralServer) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(server.url)
    client.flushall()
    yield client
    client.close()


def holding(raw: Any, needle: str) -> list[str]:
    """The keys of the module's server whose DUMP or value holds ``needle``."""
    found = []
    for key in raw.scan_iter(count=1000):
        kind = raw.type(key).decode()
        read: dict[str, Callable[[Any], Any]] = {
            "stream": raw.xrange,
            "hash": raw.hgetall,
            "zset": lambda k: raw.zrange(k, 0, -1),
            "string": raw.get,
        }
        value = read[kind](key)
        if needle.encode() in (raw.dump(key) or b"") + repr(value).encode():
            found.append(key.decode())
    return found


def assert_scrubbed(raw: redis.Redis, read_back: str) -> None:
    assert raw.dbsize() > 0
    assert holding(raw, CARD) == []
    assert holding(raw, "[card]") != []
    assert "[card]" in read_back and CARD not in read_back


# -- Google ADK --------------------------------------------------------------------------


def test_google_adk(raw: redis.Redis, server: EphemeralServer) -> None:
    from google.adk.agents import LlmAgent
    from google.adk.models.base_llm import BaseLlm
    from google.adk.models.llm_request import LlmRequest
    from google.adk.models.llm_response import LlmResponse
    from google.adk.runners import Runner
    from google.genai import types

    from redis_msglog.integrations.google_adk import MessageLogSessionService

    seen: list[str] = []

    class Recording(BaseLlm):
        model: str = "recording"

        async def generate_content_async(
            self, llm_request: LlmRequest, stream: bool = False
        ) -> AsyncGenerator[LlmResponse, None]:
            texts = [p.text or "" for c in llm_request.contents for p in c.parts or []]
            seen.append(" | ".join(texts))
            reply = types.Part(text=f"noted: {texts[-1]}")
            yield LlmResponse(content=types.Content(role="model", parts=[reply]))

    async def scenario() -> str:
        client = redis.asyncio.Redis.from_url(server.url)
        service = MessageLogSessionService(client, before_append=scrub)
        run = Runner(
            app_name="app", agent=LlmAgent(name="bot", model=Recording()), session_service=service
        )
        await service.create_session(app_name="app", user_id="u", session_id="s")
        for text in (f"my card is {CARD}", "and then?"):
            message = types.Content(role="user", parts=[types.Part(text=text)])
            async for _ in run.run_async(user_id="u", session_id="s", new_message=message):
                pass
        session = await service.get_session(app_name="app", user_id="u", session_id="s")
        await client.aclose()
        assert session is not None
        return repr([e.model_dump() for e in session.events])

    read_back = asyncio.run(scenario())
    assert_scrubbed(raw, read_back)
    assert "[card]" in seen[-1] and CARD not in seen[-1]  # the next turn's context


# -- Microsoft Agent Framework -----------------------------------------------------------


def test_agent_framework(raw: redis.Redis, server: EphemeralServer) -> None:
    from agent_framework import Agent, AgentSession

    from redis_msglog.integrations.agent_framework import MessageLogHistoryProvider

    from ..support.agent_framework_client import ScriptedClient

    model = ScriptedClient()

    async def scenario() -> str:
        client = redis.asyncio.Redis.from_url(server.url)
        history = MessageLogHistoryProvider(redis=client, before_append=scrub)
        agent = Agent(model, context_providers=[history])
        for question in (f"my card is {CARD}", "and then?"):
            fresh = AgentSession(session_id="s")  # each turn a new worker: reads the log
            await agent.run(question, session=fresh)
        messages = await MessageLogHistoryProvider(redis=client).get_messages("s")
        await client.aclose()
        return repr([m.to_dict() for m in messages])

    read_back = asyncio.run(scenario())
    assert_scrubbed(raw, read_back)
    context = repr([m.to_dict() for m in model.seen[-1]])
    assert "[card]" in context and CARD not in context


# -- Strands -----------------------------------------------------------------------------


def test_strands(raw: redis.Redis, server: EphemeralServer) -> None:
    from strands import Agent

    from redis_msglog.integrations.strands import MessageLogSessionManager

    from ..support.strands_model import ScriptedModel

    client = redis.Redis.from_url(server.url)
    sid = f"st-{uuid.uuid4().hex[:8]}"

    def agent() -> Agent:
        manager = MessageLogSessionManager(sid, client, before_append=scrub)
        return Agent(model=ScriptedModel(), session_manager=manager, callback_handler=None)

    agent()(f"my card is {CARD}")
    again = agent()  # another worker: its history read from the log
    read_back = repr(again.messages)
    client.close()
    assert_scrubbed(raw, read_back)


# -- OpenAI Agents SDK -------------------------------------------------------------------


def test_openai_agents(raw: redis.Redis, server: EphemeralServer) -> None:
    from agents import Runner

    from redis_msglog.integrations.openai_agents import MessageLogSession

    from .test_integration_openai_agents import ScriptedModel, agent

    model = ScriptedModel()

    async def scenario() -> str:
        client = redis.asyncio.Redis.from_url(server.url)
        session = MessageLogSession("s", client, before_append=scrub)
        await Runner.run(agent(model), f"t1 my card is {CARD}", session=session)
        await Runner.run(agent(model), "t2 and then", session=session)
        items = await MessageLogSession("s", client).get_items()
        await client.aclose()
        return repr(items)

    read_back = asyncio.run(scenario())
    assert_scrubbed(raw, read_back)
    assert "[card]" in repr(model.inputs[-1]) and CARD not in repr(model.inputs[-1])


# -- LangChain ---------------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore:RunnableWithMessageHistory is deprecated")
def test_langchain(raw: redis.Redis, server: EphemeralServer) -> None:
    from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
    from langchain_core.runnables import RunnableLambda
    from langchain_core.runnables.history import RunnableWithMessageHistory

    from redis_msglog.integrations.langchain import MessageLogChatHistory

    client = redis.Redis.from_url(server.url)
    seen: list[list[BaseMessage]] = []

    def respond(messages: list[BaseMessage]) -> AIMessage:
        seen.append(messages)
        return AIMessage(f"noted: {messages[-1].content}")

    def history(session_id: str) -> MessageLogChatHistory:
        return MessageLogChatHistory(session_id, redis=client, before_append=scrub)

    chain = RunnableWithMessageHistory(RunnableLambda(respond), history)
    config: Any = {"configurable": {"session_id": "s"}}
    for text in (f"my card is {CARD}", "and then?"):
        chain.invoke([HumanMessage(text)], config)
    read_back = repr(MessageLogChatHistory("s", redis=client).messages)
    client.close()
    assert_scrubbed(raw, read_back)
    assert "[card]" in repr(seen[-1]) and CARD not in repr(seen[-1])


# -- LlamaIndex --------------------------------------------------------------------------


def test_llama_index(raw: redis.Redis, server: EphemeralServer) -> None:
    from llama_index.core.chat_engine import SimpleChatEngine
    from llama_index.core.llms import MockLLM
    from llama_index.core.memory import Memory

    from redis_msglog.integrations.llama_index import MessageLogChatStore

    async def scenario() -> str:
        store = MessageLogChatStore.from_url(server.url, before_append=scrub)
        memory = Memory.from_defaults(session_id="s", chat_store=store)
        engine = SimpleChatEngine.from_defaults(llm=MockLLM(max_tokens=4), memory=memory)
        await engine.achat(f"my card is {CARD}")
        again = Memory.from_defaults(session_id="s", chat_store=store)  # another worker
        context = await again.aget()
        await store.aclose()
        return repr([m.model_dump() for m in context])

    assert_scrubbed(raw, asyncio.run(scenario()))


# -- Pydantic AI -------------------------------------------------------------------------


def test_pydantic_ai(raw: redis.Redis, server: EphemeralServer) -> None:
    from redis_msglog.integrations.pydantic_ai import RedisConversationStore

    from .test_integration_pydantic_ai import turn

    async def scenario() -> str:
        store = RedisConversationStore.from_url(server.url, before_append=scrub)
        await turn(store, "s", f"my card is {CARD}")
        loaded = await RedisConversationStore.from_url(server.url).load("s")
        await store.aclose()
        assert loaded is not None
        return repr(loaded.messages)

    assert_scrubbed(raw, asyncio.run(scenario()))
