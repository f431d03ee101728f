"""Strands Agents on the log: ``MessageLogSessionRepository`` call by call on every
backend: the records, the index-exact appends, the seq-range reads and what they cost,
``update_message`` as a redaction, and the session's erasure. A real ``Agent`` on it:
test_integration_strands_agent.py."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
import redis.cluster
from strands.types.exceptions import SessionException
from strands.types.session import Session, SessionAgent, SessionType

from redis_msglog import (
    ConversationErasedError,
    MessageLog,
    PermissionDeniedError,
    acl_rules,
    to_openai,
)
from redis_msglog.integrations.strands import (
    MessageIdConflictError,
    MessageLogSessionRepository,
    StrandsSessionError,
)
from redis_msglog.testing import EphemeralServer

from ..conftest import ACL_PASSWORD, ACL_USER, acl_server, server_version
from ..support.cluster import LocalCluster
from ..support.strands_env import BACKENDS, keys_of, message, new_id, sync_client

pytestmark = pytest.mark.frameworks


@pytest.fixture(params=BACKENDS)
def client(
    request: pytest.FixtureRequest,
    shared_server: Callable[[str], EphemeralServer],
    shared_cluster: Callable[[], LocalCluster],
) -> Iterator[Any]:
    with sync_client(str(request.param), shared_server, shared_cluster) as made:
        yield made


@pytest.fixture(params=[b for b in BACKENDS if b != "acl"])
def deleting_client(
    request: pytest.FixtureRequest,
    shared_server: Callable[[str], EphemeralServer],
    shared_cluster: Callable[[], LocalCluster],
) -> Iterator[Any]:
    """A client whose user may redact (the ACL user's case: ``test_redaction_needs_...``)."""
    with sync_client(str(request.param), shared_server, shared_cluster) as made:
        yield made


# -- the repository, call by call ------------------------------------------------------


def test_sessions_agents_and_multi_agents_are_records(client: Any) -> None:
    repo = MessageLogSessionRepository(client)
    sid = new_id()
    assert repo.read_session(sid) is None
    session = Session(session_id=sid, session_type=SessionType.AGENT)
    assert repo.create_session(session) is session
    assert repo.read_session(sid) == session
    with pytest.raises(StrandsSessionError, match="already exists"):
        repo.create_session(session)
    with pytest.raises(SessionException):  # Strands' own error type too
        repo.create_agent(new_id(), SessionAgent("a", {}, {}))  # no such session

    agent = SessionAgent("a", {"k": [1, "two", None]}, {"removed_message_count": 0})
    repo.create_agent(sid, agent)
    assert repo.read_agent(sid, "a") == agent
    assert repo.read_agent(sid, "b") is None
    changed = SessionAgent("a", {"k": 2}, {}, created_at="later")
    repo.update_agent(sid, changed)
    back = repo.read_agent(sid, "a")
    assert back is not None and back.state == {"k": 2} and back.created_at == agent.created_at
    with pytest.raises(StrandsSessionError, match="does not exist"):
        repo.update_agent(sid, SessionAgent("b", {}, {}))

    class Multi:
        id = "graph"

        def __init__(self, state: dict[str, Any]) -> None:
            self.state = state

        def serialize_state(self) -> dict[str, Any]:
            return {"id": self.id, "state": self.state}

    assert repo.read_multi_agent(sid, "graph") is None
    repo.create_multi_agent(sid, Multi({"node": "a"}))  # type: ignore[arg-type]
    repo.update_multi_agent(sid, Multi({"node": "b"}))  # type: ignore[arg-type]
    assert repo.read_multi_agent(sid, "graph") == {"id": "graph", "state": {"node": "b"}}
    missing = Multi({})
    missing.id = "other"
    with pytest.raises(StrandsSessionError):
        repo.update_multi_agent(sid, missing)  # type: ignore[arg-type]


def test_messages_are_a_log_whose_seq_is_the_index(client: Any) -> None:
    repo = MessageLogSessionRepository(client)
    sid = new_id()
    repo.create_session(Session(session_id=sid, session_type=SessionType.AGENT))
    repo.create_agent(sid, SessionAgent("a", {}, {}))
    sent = [message(f"m{i}", i, "user" if i % 2 == 0 else "assistant") for i in range(12)]
    for m in sent:
        repo.create_message(sid, "a", m)
    assert repo.list_messages(sid, "a") == sent
    assert repo.list_messages(sid, "a", limit=3, offset=4) == sent[4:7]
    assert repo.list_messages(sid, "a", offset=10) == sent[10:]
    assert repo.list_messages(sid, "a", limit=0) == []
    assert repo.list_messages(sid, "a", offset=99) == []
    assert repo.read_message(sid, "a", 11) == sent[11]
    assert repo.read_message(sid, "a", 12) is None
    assert repo.list_messages(sid, "nobody") == []

    # The log, for every other reader: seq = index + 1, neutral messages.
    log = MessageLog(client, f"strands.{sid}:agent:a")
    rows = log.all()
    assert [r.seq for r in rows] == list(range(1, 13))
    assert [r.text for r in rows] == [f"m{i}" for i in range(12)]
    assert to_openai(rows)[1] == {"role": "assistant", "content": "m1"}


def test_an_index_that_is_not_the_next_one_writes_nothing(client: Any) -> None:
    """Two workers holding the session at the same point: the second append of index 2
    is refused, typed, and the log keeps the first; a skipped or repeated index too."""
    first, second = MessageLogSessionRepository(client), MessageLogSessionRepository(client)
    sid = new_id()
    first.create_session(Session(session_id=sid, session_type=SessionType.AGENT))
    first.create_agent(sid, SessionAgent("a", {}, {}))
    for i in range(2):
        first.create_message(sid, "a", message(f"m{i}", i))
    second.create_message(sid, "a", message("from the second worker", 2))
    with pytest.raises(MessageIdConflictError) as refused:
        first.create_message(sid, "a", message("from the first worker", 2))
    assert refused.value.current_seq == 3
    assert isinstance(refused.value, SessionException)
    for bad in (5, 1, 0):
        with pytest.raises(MessageIdConflictError):
            first.create_message(sid, "a", message("stray", bad))
    first.create_message(sid, "a", message("m3", 3))  # the first worker caught up
    texts = [m.message["content"][0]["text"] for m in first.list_messages(sid, "a")]
    assert texts == ["m0", "m1", "from the second worker", "m3"]
    assert MessageLog(client, f"strands.{sid}:agent:a").count() == 4


def test_bad_arguments_are_typed_and_write_nothing(client: Any) -> None:
    repo = MessageLogSessionRepository(client)
    sid = new_id()
    repo.create_session(Session(session_id=sid, session_type=SessionType.AGENT))
    for bad in (-1, "3", 1.0, True, None):
        with pytest.raises(ValueError):
            repo.read_message(sid, "a", bad)  # type: ignore[arg-type]
        with pytest.raises(ValueError):
            repo.list_messages(sid, "a", limit=bad if bad is not None else -2)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        repo.create_message(sid, "a", message("x", -1))
    with pytest.raises(ValueError):
        MessageLogSessionRepository(client, namespace="a:b")
    with pytest.raises(ValueError):
        MessageLogSessionRepository(client, max_age=None)
    assert MessageLog(client, f"strands.{sid}:agent:a").count() == 0


def test_delete_session_erases_everything_it_had(client: Any) -> None:
    repo = MessageLogSessionRepository(client)
    sid = new_id()
    repo.create_session(Session(session_id=sid, session_type=SessionType.AGENT))
    for agent_id in ("a", "b"):
        repo.create_agent(sid, SessionAgent(agent_id, {"secret": "s3cr3t"}, {}))
        for i in range(3):
            repo.create_message(sid, agent_id, message(f"s3cr3t {i}", i))
    other = new_id()
    repo.create_session(Session(session_id=other, session_type=SessionType.AGENT))
    worker = MessageLogSessionRepository(client)
    worker.list_messages(sid, "a")  # it holds the agent: its next message is 3
    assert worker.read_agent(sid, "a") is not None
    repo.delete_session(sid)
    left = keys_of(client, f"strands.{sid}")
    assert left and all(k.endswith(":seq") or ":erased:" in k for k in left), left  # tombstones
    assert all(b"s3cr3t" not in (client.get(k) or b"") for k in left)
    assert repo.read_session(sid) is None
    assert repo.read_agent(sid, "a") is None
    assert repo.list_messages(sid, "a") == []
    assert repo.read_session(other) is not None  # another session is untouched
    with pytest.raises(StrandsSessionError, match="does not exist"):
        repo.delete_session(sid)
    # A worker still holding it: its next index is gone with the log, and index 0 meets
    # the tombstone.
    with pytest.raises(MessageIdConflictError):
        worker.create_message(sid, "a", message("late", 3))
    with pytest.raises(ConversationErasedError):
        worker.create_message(sid, "a", message("late", 0))
    with pytest.raises(StrandsSessionError, match="does not exist"):
        repo.create_message(sid, "a", message("late", 0))
    assert keys_of(client, f"strands.{sid}") == left


# -- update_message: a real redaction ------------------------------------------------


def test_update_message_redacts_and_the_indexes_stay_exact(deleting_client: Any) -> None:
    client = deleting_client
    repo = MessageLogSessionRepository(client)
    sid = new_id()
    repo.create_session(Session(session_id=sid, session_type=SessionType.AGENT))
    repo.create_agent(sid, SessionAgent("a", {}, {}))
    sent = [message(f"m{i}", i) for i in range(6)]
    for m in sent:
        repo.create_message(sid, "a", m)
    for index in (1, 2, 4):  # three redactions: three edit entries among the messages
        update = message(f"m{index}", index)
        update.redact_message = {"role": "user", "content": [{"text": f"r{index}"}]}
        repo.update_message(sid, "a", update)
    fresh = MessageLogSessionRepository(client)  # no memory of the writes
    for i in range(6, 9):
        fresh.create_message(sid, "a", message(f"m{i}", i))
    texts = [m.to_message()["content"][0]["text"] for m in fresh.list_messages(sid, "a")]
    assert texts == ["m0", "r1", "r2", "m3", "r4", "m5", "m6", "m7", "m8"]
    for offset in range(10):
        for limit in (None, 1, 2, 5):
            got = fresh.list_messages(sid, "a", limit=limit, offset=offset)
            end = None if limit is None else offset + limit
            assert [m.message_id for m in got] == list(range(9))[offset:end]
    redacted = fresh.read_message(sid, "a", 2)
    assert redacted is not None and redacted.message == redacted.redact_message
    assert redacted.created_at == sent[2].created_at  # kept, as Strands' repositories
    with pytest.raises(StrandsSessionError, match="does not exist"):
        fresh.update_message(sid, "a", message("x", 9))
    with pytest.raises(MessageIdConflictError):
        repo.create_message(sid, "a", message("stale worker", 6))


def test_redaction_needs_the_deletions_acl(
    shared_server: Callable[[str], EphemeralServer],
) -> None:
    """A user of ``acl_rules()`` may not redact (``XDEL``): ``update_message`` raises
    ``PermissionDeniedError`` and writes nothing; with ``acl_rules(deletions=True)`` it
    redacts."""
    server = acl_server(shared_server)
    admin = redis.Redis.from_url(server.url)
    rules = acl_rules(redis_version=server_version(admin), deletions=True)
    admin.execute_command("ACL", "SETUSER", "strands-del", "reset", "on", ">pw", *rules)
    plain = redis.Redis.from_url(server.url, username=ACL_USER, password=ACL_PASSWORD)
    deleting = redis.Redis.from_url(server.url, username="strands-del", password="pw")
    sid = new_id()
    repo = MessageLogSessionRepository(plain)
    repo.create_session(Session(session_id=sid, session_type=SessionType.AGENT))
    repo.create_agent(sid, SessionAgent("a", {}, {}))
    repo.create_message(sid, "a", message("SECRET", 0))
    update = message("SECRET", 0)
    update.redact_message = {"role": "user", "content": [{"text": "gone"}]}
    before = MessageLog(admin, f"strands.{sid}:agent:a").all(view="physical")
    with pytest.raises(PermissionDeniedError):
        repo.update_message(sid, "a", update)
    assert MessageLog(admin, f"strands.{sid}:agent:a").all(view="physical") == before
    MessageLogSessionRepository(deleting).update_message(sid, "a", update)
    back = repo.read_message(sid, "a", 0)
    assert back is not None and back.to_message()["content"] == [{"text": "gone"}]
    repo.create_message(sid, "a", message("next", 1))
    for made in (admin, plain, deleting):
        made.close()


# -- costs, and a stale worker -------------------------------------------------------


def calls(client: Any) -> dict[str, int]:
    """Calls per command so far (``INFO commandstats``)."""
    stats = client.info("commandstats")
    return {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()}


def spent(client: Any, action: Callable[[], Any]) -> dict[str, int]:
    """The commands ``action`` sent, by name (the INFO calls themselves left out)."""
    before = calls(client)
    action()
    after = calls(client)
    used = {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}
    used["info"] -= 1
    return {k: v for k, v in used.items() if v}


def costs(client: Any, n: int) -> tuple[dict[str, int], ...]:
    """What the last append, a window of 5 and one read cost on an agent of ``n``
    messages."""
    repo = MessageLogSessionRepository(client)
    sid = new_id()
    repo.create_session(Session(session_id=sid, session_type=SessionType.AGENT))
    repo.create_agent(sid, SessionAgent("a", {}, {}))
    for i in range(n - 1):
        repo.create_message(sid, "a", message(f"m{i}", i))
    append = spent(client, lambda: repo.create_message(sid, "a", message("last", n - 1)))
    window = spent(client, lambda: repo.list_messages(sid, "a", limit=5, offset=n - 10))
    one = spent(client, lambda: repo.read_message(sid, "a", n // 2))
    got = repo.list_messages(sid, "a", limit=5, offset=n - 10)
    assert [m.message_id for m in got] == [*range(n - 10, n - 5)]
    return append, window, one


def test_reads_and_appends_cost_the_same_at_any_history_length(
    shared_server: Callable[[str], EphemeralServer],
) -> None:
    """``list_messages(limit, offset)`` and ``read_message`` run the same commands on the
    server at 20 messages as at 2,000; an append by the process that wrote the previous
    message is one script call."""
    client = redis.Redis.from_url(shared_server("redis").url)
    short, long = costs(client, 20), costs(client, 2000)
    assert short == long
    # One script call (commandstats also counts the commands the script runs), and no
    # read before it.
    assert short[0]["evalsha"] == 1 and "xrange" not in short[0]
    client.close()
