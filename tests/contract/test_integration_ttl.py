"""Every integration takes ``ttl`` as the framework's own Redis store takes it (int seconds:
``RedisSession(ttl=...)``, ``RedisChatMessageHistory(ttl=...)``, ``RedisChatStore(ttl=...)``)
as well as a ``timedelta``; nonsense is a typed error, raised before anything is written."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
import redis
import redis.asyncio
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.messages import HumanMessage
from llama_index.core.base.llms.types import ChatMessage

from redis_msglog import MessageLog
from redis_msglog._io.shell import check_log_options
from redis_msglog.errors import InvalidArgumentError
from redis_msglog.integrations._log_options import framework_ttl
from redis_msglog.integrations.langchain import MessageLogChatHistory, MessageLogMiddleware
from redis_msglog.integrations.llama_index import MessageLogBaseChatStore, MessageLogChatStore
from redis_msglog.integrations.openai_agents import MessageLogSession
from redis_msglog.integrations.pydantic_ai import RedisConversationStore
from redis_msglog.testing import EphemeralServer

from ..conftest import new_id

pytestmark = pytest.mark.frameworks


async def _agents(url: str, key: str, ttl: Any) -> None:
    session = MessageLogSession.from_url(key, url=url, ttl=ttl)
    await session.add_items([{"role": "user", "content": "hi"}])
    await session.close()


async def _langchain(url: str, key: str, ttl: Any) -> None:
    history = MessageLogChatHistory.from_url(key, url=url, ttl=ttl)
    await history.aadd_messages([HumanMessage("hi")])
    await history.aclose()


async def _llama_db(url: str, key: str, ttl: Any) -> None:
    store = MessageLogChatStore.from_url(url, ttl=ttl)
    await store.add_message(key, ChatMessage(role="user", content="hi"))
    await store.aclose()


async def _llama_base(url: str, key: str, ttl: Any) -> None:
    store = MessageLogBaseChatStore.from_url(url, ttl=ttl)
    await store.async_add_message(key, ChatMessage(role="user", content="hi"))
    await store.aclose()


async def _pydantic_ai(url: str, key: str, ttl: Any) -> None:
    store = RedisConversationStore.from_url(url, ttl=ttl)
    await store.log(key).add("user", "hi")
    await store.aclose()


async def _agent_framework(url: str, key: str, ttl: Any) -> str:
    from agent_framework import Message

    from redis_msglog.integrations.agent_framework import MessageLogHistoryProvider

    provider = MessageLogHistoryProvider.from_url(url=url, ttl=ttl)
    await provider.save_messages(key, [Message("user", ["hi"])])
    await provider.aclose()
    return provider.conversation(key)


async def _google_adk(url: str, key: str, ttl: Any) -> str:
    from google.adk.events import Event
    from google.genai import types

    from redis_msglog.integrations._google_adk_codec import encode_id
    from redis_msglog.integrations.google_adk import MessageLogSessionService

    service = MessageLogSessionService.from_url(url=url, ttl=ttl)
    session = await service.create_session(app_name="app", user_id="u", session_id=key)
    said = types.Content(role="user", parts=[types.Part(text="hi")])
    await service.append_event(session, Event(author="user", content=said))
    await service.close()
    return ":".join(encode_id(what, v) for what, v in (("app", "app"), ("user", "u"), ("s", key)))


async def _strands(url: str, key: str, ttl: Any) -> str:
    from strands.types.session import Session, SessionAgent, SessionMessage, SessionType

    from redis_msglog.integrations.strands import MessageLogSessionRepository

    repo = MessageLogSessionRepository.from_url(url=url, ttl=ttl)
    repo.create_session(Session(session_id=key, session_type=SessionType.AGENT))
    repo.create_agent(key, SessionAgent("a", {}, {}))
    said = {"role": "user", "content": [{"text": "hi"}]}
    repo.create_message(key, "a", SessionMessage(said, 0))  # type: ignore[arg-type]
    repo.close()
    return f"strands.{key}:agent:a"


WRITERS: dict[str, Callable[[str, str, Any], Any]] = {
    "strands": _strands,
    "agent_framework": _agent_framework,
    "google_adk": _google_adk,
    "openai_agents": _agents,
    "langchain": _langchain,
    "llama_index": _llama_db,
    "llama_index_base": _llama_base,
    "pydantic_ai": _pydantic_ai,
}


@pytest.mark.parametrize("ttl", [120, 120.0, timedelta(seconds=120)], ids=["int", "float", "td"])
@pytest.mark.parametrize("integration", sorted(WRITERS))
def test_the_log_expires_as_the_frameworks_ttl_says(
    integration: str, ttl: Any, shared_server: Callable[[str], EphemeralServer]
) -> None:
    url, key = shared_server("redis").url, new_id()
    conversation = asyncio.run(WRITERS[integration](url, key, ttl)) or key
    raw = redis.Redis.from_url(url)
    log = MessageLog(raw, conversation)
    assert [r.text for r in log.all()] == ["hi"]
    assert 0 < raw.ttl(log._core.keys.stream) <= 120  # int seconds = timedelta(seconds=)


BAD = [-1, 0, 0.5, True, False, math.nan, math.inf, -math.inf, "60", 10**20, [60]]


@pytest.mark.parametrize("ttl", BAD, ids=repr)
def test_nonsense_ttl_is_a_typed_error_at_construction(ttl: Any) -> None:
    with pytest.raises(InvalidArgumentError):
        framework_ttl(ttl)
    client, aclient = redis.Redis(), redis.asyncio.Redis()  # never connected: nothing sent
    makers: list[Callable[[], Any]] = [
        lambda: MessageLogSession("s", aclient, ttl=ttl),
        lambda: MessageLogChatHistory("s", client, ttl=ttl),
        lambda: MessageLogMiddleware(client, ttl=ttl),
        lambda: MessageLogChatStore(aclient, ttl=ttl),
        lambda: MessageLogBaseChatStore(client, ttl=ttl),
        lambda: RedisConversationStore(aclient, ttl=ttl),
        lambda: _agent_framework_provider(aclient, ttl),
        lambda: _adk_service(aclient, ttl),
        lambda: _strands_repository(client, ttl),
    ]
    for make in makers:
        with pytest.raises(InvalidArgumentError, match="ttl"):
            make()


def _agent_framework_provider(client: Any, ttl: Any) -> Any:
    from redis_msglog.integrations.agent_framework import MessageLogHistoryProvider

    return MessageLogHistoryProvider(redis=client, ttl=ttl)


def _adk_service(client: Any, ttl: Any) -> Any:
    from redis_msglog.integrations.google_adk import MessageLogSessionService

    return MessageLogSessionService(client, ttl=ttl)


def _strands_repository(client: Any, ttl: Any) -> Any:
    from redis_msglog.integrations.strands import MessageLogSessionRepository

    return MessageLogSessionRepository(client, ttl=ttl)


def test_ttl_none_and_timedelta_pass_through() -> None:
    assert framework_ttl(None) is None
    assert framework_ttl(timedelta(minutes=5)) == timedelta(minutes=5)
    assert framework_ttl(3600) == timedelta(hours=1)


@settings(max_examples=200, derandomize=True, database=None, deadline=None)
@given(
    ttl=st.one_of(
        st.integers(),
        st.floats(allow_nan=True, allow_infinity=True),
        st.booleans(),
        st.text(max_size=5),
        st.timedeltas(),
        st.none(),
    )
)
def test_any_ttl_is_taken_whole_or_refused_typed(ttl: Any) -> None:
    """Never another exception: a ttl the log takes (None, or at least a second), or
    InvalidArgumentError (which the log itself raises for a timedelta under 1 s)."""
    try:
        made = framework_ttl(ttl)
        check_log_options({"ttl": made})
    except InvalidArgumentError:
        return
    assert made is None or made >= timedelta(seconds=1)
    if isinstance(ttl, (int, float)) and not isinstance(ttl, bool):
        assert made == timedelta(seconds=ttl)
