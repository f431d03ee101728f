"""Hostile input to the Strands repository (hypothesis): any session id, agent id and
message content either comes back exactly or is refused with a typed error, and a
refused call writes nothing."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from strands.types.session import Session, SessionAgent, SessionMessage, SessionType

from redis_msglog import MessageLogError
from redis_msglog.integrations.strands import MessageLogSessionRepository
from redis_msglog.testing import EphemeralServer

pytestmark = [pytest.mark.hostile, pytest.mark.frameworks]

# Any code point, lone surrogates included; ids as short as one character.
CHARS = st.characters(codec=None, exclude_categories=())
IDS = st.one_of(
    st.text(CHARS, min_size=1, max_size=40),
    st.sampled_from(
        ["a/../b", "{x}", "%7B", "*", "a:b|c", " ", "\x00", "~" + "f" * 40, "\ud800", "x\udfff"]
    ),
    st.text(CHARS, min_size=300, max_size=400),  # longer than a scope part or an attribute
)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(CHARS, max_size=20),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(CHARS, max_size=8), inner, max_size=3)
    ),
    max_leaves=12,
)
BLOCKS = st.one_of(
    st.builds(lambda t: {"text": t}, st.text(CHARS, max_size=50)),
    st.builds(
        lambda i, n, a: {"toolUse": {"toolUseId": i, "name": n, "input": a}},
        st.text(CHARS, max_size=10),
        st.text(CHARS, max_size=10),
        JSON,
    ),
    st.builds(
        lambda i, t: {
            "toolResult": {"toolUseId": i, "status": "success", "content": [{"text": t}]}
        },
        st.text(CHARS, max_size=10),
        st.text(CHARS, max_size=20),
    ),
    st.builds(
        lambda b: {"image": {"format": "png", "source": {"bytes": b}}}, st.binary(max_size=64)
    ),
    st.dictionaries(st.text(CHARS, min_size=1, max_size=8), JSON, min_size=1, max_size=2),
)
MESSAGES = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant"]), "content": st.lists(BLOCKS, max_size=4)},
    optional={"tracking_id": st.text(CHARS, max_size=10), "metadata": JSON},
)


@pytest.fixture(scope="module")
def client(shared_server: Callable[[str], EphemeralServer]) -> Iterator[Any]:
    made = redis.Redis.from_url(shared_server("redis").url)
    yield made
    made.close()


def keys(client: Any, namespace: str) -> set[bytes]:
    return set(client.scan_iter(match=f"{'msglog'}:*{namespace}*", count=1000))


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(session_id=IDS, agent_id=IDS, content=st.lists(MESSAGES, min_size=1, max_size=3))
def test_any_ids_and_content_round_trip_or_are_refused_writing_nothing(
    client: Any, session_id: str, agent_id: str, content: list[dict[str, Any]]
) -> None:
    namespace = f"h{uuid.uuid4().hex[:10]}"
    repo = MessageLogSessionRepository(client, namespace=namespace)
    session = Session(session_id=session_id, session_type=SessionType.AGENT)
    try:
        repo.create_session(session)
    except MessageLogError as refused:
        event(f"session refused: {type(refused).__name__}")
        assert keys(client, namespace) == set()
        return
    assert repo.read_session(session_id) == session
    agent = SessionAgent(agent_id, {"v": content[0].get("metadata")}, {})
    before_agent = repo._log(repo._names(session_id).records, ()).count()
    try:
        repo.create_agent(session_id, agent)
    except MessageLogError:
        assert repo.read_agent(session_id, agent_id) is None
        assert repo._log(repo._names(session_id).records, ()).count() == before_agent
    else:
        assert repo.read_agent(session_id, agent_id) == agent
    written: list[SessionMessage] = []
    for message in content:
        sent = SessionMessage.from_message(message, len(written))  # type: ignore[arg-type]
        before = {k: client.dump(k) for k in keys(client, namespace)}
        try:
            repo.create_message(session_id, agent_id, sent)
        except MessageLogError:
            assert {k: client.dump(k) for k in keys(client, namespace)} == before
            event("a message refused")
            continue
        event("a message written")
        written.append(sent)
        assert repo.read_message(session_id, agent_id, sent.message_id) == sent
    if written:
        assert repo.list_messages(session_id, agent_id) == written
