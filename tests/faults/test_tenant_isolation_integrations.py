"""Two tenants in one prefix, the integrations (issue 34's isolation suite, continued from
``test_tenant_isolation.py``): each framework's store, built on tenant ``acme``'s Redis
user, reads, writes, lists and deletes at ids that land in tenant ``beta``'s
conversations (generated tails with glob characters, ``:``, ``/``, braces and unicode).
Each call is refused with a typed error (a :class:`MessageLogError`); nothing of
``beta``'s is written (``DUMP`` of its keys unchanged), and its secret is in no error.

A server of the sibling module's own (its ``tenants`` fixture), emptied before every
example. Fixed budget, ``derandomize=True``: hypothesis prints the failing example.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import redis
import redis.asyncio
from hypothesis import given
from hypothesis import strategies as st

from redis_msglog import MessageLogError

from ..conftest import require_frameworks
from .test_tenant_isolation import PASSWORD, SECRET, TEXT, Tenants, budget, tenants

pytestmark = [pytest.mark.hostile, pytest.mark.frameworks]
__all__ = ["tenants"]  # the module's server, shared with the sibling module's fixture

Call = Callable[[Any, str], Any]  # (acme's sync or asyncio client, beta's tail) -> a result


def _openai_agents(client: Any, tail: str) -> list[Callable[[], Any]]:
    from redis_msglog.integrations.openai_agents import MessageLogSession

    session = MessageLogSession(f"beta:{tail}", client)
    return [
        session.get_items,
        lambda: session.add_items([{"role": "user", "content": "x"}]),
        session.pop_item,
        session.clear_session,
    ]


def _langchain(client: Any, tail: str) -> list[Callable[[], Any]]:
    from langchain_core.messages import HumanMessage

    from redis_msglog.integrations.langchain import MessageLogChatHistory

    history = MessageLogChatHistory(f"beta:{tail}", async_redis=client)
    return [
        history.aget_messages,
        lambda: history.aadd_messages([HumanMessage("x")]),
        history.aclear,
    ]


def _llama_index(client: Any, tail: str) -> list[Callable[[], Any]]:
    from llama_index.core.llms import ChatMessage

    from redis_msglog.integrations.llama_index import MessageLogChatStore

    store, key = MessageLogChatStore(client), f"beta:{tail}"
    return [
        lambda: store.get_messages(key),
        lambda: store.count_messages(key),
        lambda: store.add_message(key, ChatMessage(role="user", content="x")),
        lambda: store.set_messages(key, [ChatMessage(role="user", content="x")]),
        lambda: store.delete_message(key, 1),
        lambda: store.delete_messages(key),
        lambda: store.delete_oldest_messages(key, 1),
        store.get_keys,  # SCAN, which a tenant's user may not
    ]


def _pydantic_ai(client: Any, tail: str) -> list[Callable[[], Any]]:
    from redis_msglog.integrations.pydantic_ai import RedisConversationStore

    store, cid = RedisConversationStore(client), f"beta:{tail}"
    return [
        lambda: store.load(cid),
        lambda: store.read_record(cid),
        lambda: store.delete_record(cid, expected_revision="r"),
    ]


def _agent_framework(client: Any, tail: str) -> list[Callable[[], Any]]:
    from agent_framework import Message

    from redis_msglog.integrations.agent_framework import MessageLogHistoryProvider

    provider = MessageLogHistoryProvider("beta", redis=client)
    return [
        lambda: provider.get_messages(tail),
        lambda: provider.save_messages(tail, [Message("user", ["x"])]),
        lambda: provider.clear(tail),
    ]


def _google_adk(client: Any, tail: str) -> list[Callable[[], Any]]:
    from redis_msglog.integrations.google_adk import MessageLogSessionService

    service = MessageLogSessionService(client)
    ids: dict[str, Any] = {"app_name": "beta", "user_id": tail}
    return [
        lambda: service.get_session(**ids, session_id="s"),
        lambda: service.create_session(**ids, session_id="s", state={"user:k": 1}),
        lambda: service.list_sessions(app_name="beta"),
        lambda: service.list_sessions(**ids),
        lambda: service.delete_session(**ids, session_id="s"),
        lambda: service.get_user_state(**ids),
    ]


def _strands(client: Any, tail: str) -> list[Callable[[], Any]]:
    from strands.types.session import Session, SessionAgent, SessionType

    from redis_msglog.integrations.strands import MessageLogSessionRepository

    repo = MessageLogSessionRepository(client, namespace="beta")
    return [
        lambda: repo.read_session(tail),
        lambda: repo.create_session(Session(session_id=tail, session_type=SessionType.AGENT)),
        lambda: repo.read_agent(tail, "a"),
        lambda: repo.create_agent(tail, SessionAgent("a", {}, {})),
        lambda: repo.list_messages(tail, "a"),
        lambda: repo.delete_session(tail),
    ]


INTEGRATIONS: dict[str, tuple[bool, Callable[[Any, str], list[Callable[[], Any]]]]] = {
    # name: (takes a sync client, the calls)
    "openai_agents": (False, _openai_agents),
    "langchain": (False, _langchain),
    "llama_index": (False, _llama_index),
    "pydantic_ai": (False, _pydantic_ai),
    "agent_framework": (False, _agent_framework),
    "google_adk": (False, _google_adk),
    "strands": (True, _strands),
}


def _attempt(port: int, name: str, tail: str, index: int) -> None:
    """acme's call ``index`` of the integration ``name``, on a client made for it (and
    an event loop of its own, for the asyncio ones)."""
    sync, calls_of = INTEGRATIONS[name]
    if sync:
        with redis.Redis(port=port, username="acme", password=PASSWORD) as client:
            calls = calls_of(client, tail)
            calls[index % len(calls)]()
        return

    async def attempt() -> None:
        client = redis.asyncio.Redis(port=port, username="acme", password=PASSWORD)
        try:
            calls = calls_of(client, tail)
            result = calls[index % len(calls)]()
            if isinstance(result, Awaitable):
                await result
        finally:
            await client.aclose()

    asyncio.run(attempt())


@budget(300)
@given(tail=TEXT, name=st.sampled_from(sorted(INTEGRATIONS)), index=st.integers(0, 7))
def test_an_integration_at_another_tenants_ids_is_refused(
    tenants: Tenants, tail: str, name: str, index: int
) -> None:
    require_frameworks()
    before = tenants.seed(f"beta:{tail}", ("beta",))
    with pytest.raises(MessageLogError) as refused:
        _attempt(tenants.server.port, name, tail, index)
    assert SECRET not in str(refused.value)
    assert tenants.beta_keys() == before
