"""agent-framework-redis's ``RedisHistoryProvider`` tests, the ones that assert on the
Redis commands of its mock client (``LRANGE`` seeding, ``RPUSH`` counts, ``LTRIM``,
``DEL``), restated as what they check that a user can observe, against
``MessageLogHistoryProvider`` (source: microsoft/agent-framework,
python/packages/redis/tests/test_providers.py at b64a2e2f, MIT licence). The tests that
assert no command but behaviour run unchanged out of tree (docs/integrations.md)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, cast

import pytest
from agent_framework import AgentResponse, Message
from agent_framework._sessions import AgentSession, SessionContext

from redis_msglog import MessageLog
from redis_msglog.integrations.agent_framework import MessageLogHistoryProvider
from redis_msglog.testing import EphemeralServer

from ..conftest import Env, make_env, new_id

pytestmark = pytest.mark.frameworks


@pytest.fixture
def env(shared_server: Callable[[str], EphemeralServer]) -> Iterator[Env]:
    environment = make_env("redis", "async", shared_server("redis"))
    yield environment
    environment.close()


def make(env: Env, **options: Any) -> MessageLogHistoryProvider:
    client = env.make_async_client()
    env._async_clients.append(client)
    return MessageLogHistoryProvider("mem", redis=client, **options)


def rows(env: Env, provider: MessageLogHistoryProvider, session: str) -> int:
    """How many entries the session's log has (the mock's ``RPUSH`` count)."""
    return MessageLog(env.make_sync_client(), provider.conversation(session)).count()


def test_returns_deserialized_messages(env: Env) -> None:
    provider, sid = make(env), new_id()  # seeded by a save, not by a mocked LRANGE
    seed = [Message(role="user", contents=["Hello"]), Message(role="assistant", contents=["Hi!"])]
    env.loop.run_until_complete(provider.save_messages(sid, seed))
    messages = env.loop.run_until_complete(provider.get_messages(sid))
    assert [(m.role, m.text) for m in messages] == [("user", "Hello"), ("assistant", "Hi!")]


def test_saves_serialized_messages(env: Env) -> None:
    provider, sid = make(env), new_id()
    msgs = [Message(role="user", contents=["Hello"]), Message(role="assistant", contents=["Hi"])]
    env.loop.run_until_complete(provider.save_messages(sid, msgs))
    assert rows(env, provider, sid) == 2  # two messages, in one atomic call


def test_empty_messages_noop(env: Env) -> None:
    provider, sid = make(env), new_id()
    env.loop.run_until_complete(provider.save_messages(sid, []))
    assert rows(env, provider, sid) == 0


@pytest.mark.parametrize("stored", [15, 3])
def test_max_messages_window(env: Env, stored: int) -> None:
    """The Redis provider trims to ``max_messages`` with ``LTRIM``; here it is a window:
    the provider loads the newest 10 and nothing is deleted."""
    provider, sid = make(env, max_messages=10), new_id()
    msgs = [Message(role="user", contents=[f"msg{n}"]) for n in range(stored)]
    env.loop.run_until_complete(provider.save_messages(sid, msgs))
    loaded = env.loop.run_until_complete(provider.get_messages(sid))
    assert [m.text for m in loaded] == [m.text for m in msgs[-10:]]
    assert rows(env, provider, sid) == stored


def test_clear(env: Env) -> None:
    provider, sid = make(env), new_id()
    env.loop.run_until_complete(provider.save_messages(sid, [Message("user", ["x"])]))
    env.loop.run_until_complete(provider.clear(sid))
    assert env.loop.run_until_complete(provider.get_messages(sid)) == []


def test_before_run_loads_history(env: Env) -> None:
    provider, sid = make(env), new_id()
    env.loop.run_until_complete(provider.save_messages(sid, [Message("user", ["old msg"])]))
    session = AgentSession(session_id="test")
    ctx = SessionContext(
        input_messages=[Message(role="user", contents=["new msg"])], session_id=sid
    )
    state = session.state.setdefault(provider.source_id, {})
    run = provider.before_run(agent=cast(Any, None), session=session, context=ctx, state=state)
    env.loop.run_until_complete(run)
    assert [m.text for m in ctx.context_messages["mem"]] == ["old msg"]


@pytest.mark.parametrize("store", [True, False])
def test_after_run_stores_input_and_response(env: Env, store: bool) -> None:
    provider, sid = make(env, store_inputs=store, store_outputs=store), new_id()
    session = AgentSession(session_id="test")
    ctx = SessionContext(input_messages=[Message(role="user", contents=["hi"])], session_id=sid)
    ctx._response = AgentResponse(messages=[Message(role="assistant", contents=["hello"])])
    state = session.state.setdefault(provider.source_id, {})
    run = provider.after_run(agent=cast(Any, None), session=session, context=ctx, state=state)
    env.loop.run_until_complete(run)
    assert rows(env, provider, sid) == (2 if store else 0)
