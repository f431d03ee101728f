"""Strands Agents on the log with a real Strands ``Agent`` (a scripted model: tool calls,
a guardrail intervention) on ``MessageLogSessionManager``: the history across managers,
in several worker processes sharing one session, a stale worker, a graph's state, and
the guardrail's redaction leaving nothing of the prompt in Redis."""

from __future__ import annotations

import multiprocessing
import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
import redis.cluster
from strands import Agent
from strands.types.exceptions import EventLoopException

from redis_msglog import MessageLog, Usage, to_openai
from redis_msglog.integrations.strands import (
    MessageIdConflictError,
    MessageLogSessionManager,
    MessageLogSessionRepository,
)
from redis_msglog.testing import EphemeralServer

from ..support.cluster import LocalCluster
from ..support.strands_env import BACKENDS, contents, keys_of, new_id, sync_client
from ..support.strands_model import REDACTED_PROMPT, REFUSAL, ScriptedModel, weather

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
    with sync_client(str(request.param), shared_server, shared_cluster) as made:
        yield made


def make_agent(
    manager: MessageLogSessionManager,
    agent_id: str = "assistant",
    usage: dict[str, int] | None = None,
) -> Agent:
    return Agent(
        model=ScriptedModel(usage),
        agent_id=agent_id,
        tools=[weather],
        session_manager=manager,
        callback_handler=None,
    )


def test_an_agent_keeps_its_history_across_managers(client: Any) -> None:
    sid = new_id()
    agent = make_agent(MessageLogSessionManager(sid, client))
    agent("hello")
    agent("weather? tool:paris")
    agent.state.set("turns", 2)
    agent("bye")
    assert len(agent.messages) == 8  # 3 turns, the tool turn has 4 messages

    again = make_agent(MessageLogSessionManager(sid, client))  # another worker, say
    assert again.messages == agent.messages
    assert again.state.get("turns") == 2
    rows = MessageLog(client, f"strands.{sid}:agent:assistant").all()
    assert [r.seq for r in rows] == list(range(1, 9))
    chat = to_openai(rows)
    assert chat[3]["tool_calls"][0]["function"]["name"] == "weather"
    assert chat[4] == {"role": "tool", "tool_call_id": "call-paris", "content": "sunny in paris"}


SPENT = {"inputTokens": 100, "outputTokens": 20, "totalTokens": 120, "cacheReadInputTokens": 40}


@pytest.mark.parametrize("client", ["redis"], indirect=True)  # not a per-backend behaviour
def test_a_runs_usage_lands_in_the_conversations_totals(client: Any) -> None:
    """Two tool turns (two model calls each): each assistant message's metadata.usage is
    its row's usage (Strands counts no reasoning) and adds to the log's totals; a new
    manager gives the agent its messages back, their metadata included."""
    sid = new_id()
    agent = make_agent(MessageLogSessionManager(sid, client), usage=SPENT)
    agent("weather? tool:paris")
    agent("and now? tool:rome")
    assert agent.event_loop_metrics.accumulated_usage["inputTokens"] == 400  # 4 model calls
    log = MessageLog(client, f"strands.{sid}:agent:assistant")
    totals = log.usage()
    assert totals == Usage(input_tokens=400, output_tokens=80, cached_tokens=160)
    rows = log.all()
    assert [(r.role, r.seq) for r in rows if r.usage] == [
        ("assistant", 2),
        ("assistant", 4),
        ("assistant", 6),
        ("assistant", 8),
    ]
    assert Usage.total(r.usage for r in rows if r.usage) == totals
    again = make_agent(MessageLogSessionManager(sid, client))
    assert again.messages == agent.messages
    assert [m["metadata"]["usage"] for m in again.messages if "metadata" in m] == [SPENT] * 4


def _turns(url: str | None, port: int | None, sid: str, worker: int, lock: Any) -> None:
    client: Any = (
        redis.cluster.RedisCluster(host="127.0.0.1", port=port)
        if port is not None
        else redis.Redis.from_url(url or "")
    )
    for turn in range(3):
        with lock:  # one turn at a time, each by a fresh manager (a request)
            prompt = f"w{worker}t{turn}" + (" tool:rome" if turn == 1 else "")
            make_agent(MessageLogSessionManager(sid, client))(prompt)
    client.close()


@pytest.mark.parametrize("backend", ["redis", "cluster"])
def test_worker_processes_share_a_session(
    backend: str,
    shared_server: Callable[[str], EphemeralServer],
    shared_cluster: Callable[[], LocalCluster],
) -> None:
    """Three processes, three turns each, on one session (each turn a fresh manager
    restoring the history): every message once, in order, with consecutive indexes."""
    url, port = None, None
    if backend == "cluster":
        port = shared_cluster().port
    else:
        url = shared_server("redis").url
    sid = new_id()
    context = multiprocessing.get_context("fork")
    lock = context.Lock()
    workers = [context.Process(target=_turns, args=(url, port, sid, w, lock)) for w in range(3)]
    for process in workers:
        process.start()
    for process in workers:
        process.join(120)
        assert process.exitcode == 0
    client: Any = (
        redis.cluster.RedisCluster(host="127.0.0.1", port=port)
        if port
        else redis.Redis.from_url(url or "")
    )
    repo = MessageLogSessionRepository(client)
    stored = repo.list_messages(sid, "assistant")
    assert [m.message_id for m in stored] == list(range(len(stored)))
    assert len(stored) == 9 * 2 + 3 * 2  # nine turns, three of them with a tool call
    prompts = [
        m.message["content"][0]["text"]
        for m in stored
        if m.message["role"] == "user" and "text" in m.message["content"][0]
    ]
    assert sorted(prompts) == sorted(
        f"w{w}t{t}" + (" tool:rome" if t == 1 else "") for w in range(3) for t in range(3)
    )
    for n, m in enumerate(stored):  # each prompt is answered right after it
        if m.message["role"] == "user" and "text" in m.message["content"][0]:
            assert stored[n + 1].message["role"] == "assistant"
    client.close()


def test_from_url_and_close(shared_server: Callable[[str], EphemeralServer]) -> None:
    url = shared_server("redis").url
    sid = new_id()
    manager = MessageLogSessionManager.from_url(sid, url=url)
    make_agent(manager)("hi")
    manager.close()
    repo = MessageLogSessionRepository.from_url(url=url)
    assert [m.message_id for m in repo.list_messages(sid, "assistant")] == [0, 1]
    repo.close()
    with pytest.raises(ValueError):
        MessageLogSessionRepository.from_url(url="nope://x")


# -- a guardrail's redaction, a stale worker ------------------------------------------


def test_a_guardrail_redaction_leaves_no_original_content_in_redis(deleting_client: Any) -> None:
    """(A user of ``acl_rules()`` may not redact: ``test_redaction_needs_the_deletions_acl``
    in test_integration_strands.py.)"""
    client = deleting_client
    sid = new_id()
    agent = make_agent(MessageLogSessionManager(sid, client))
    agent("hello")
    agent("my card is SECRET-4111")  # the guardrail intervenes
    assert agent.messages[2]["content"] == [{"text": REDACTED_PROMPT}]
    assert agent.messages[3]["content"] == [{"text": REFUSAL}]
    everything = b"".join(contents(client, k) for k in keys_of(client, f"strands.{sid}"))
    assert b"hello" in everything and REDACTED_PROMPT.encode() in everything
    # 4111 alone, not inside the digits of an entry ID or a created time (µs since the epoch)
    assert b"SECRET" not in everything and not re.search(rb"(?<![0-9])4111(?![0-9])", everything)

    agent("and then")  # the indexes go on past the redaction's edit entry
    again = make_agent(MessageLogSessionManager(sid, client))
    assert again.messages == agent.messages
    rows = MessageLog(client, f"strands.{sid}:agent:assistant").all()
    assert [r.redacted for r in rows] == [False, False, True, False, False, False]
    assert rows[2].text == REDACTED_PROMPT
    assert [r.seq for r in rows] == [1, 2, 3, 5, 6, 7]  # 4: the redaction, before the reply


def test_a_stale_worker_fails_cleanly_and_a_fresh_one_goes_on(client: Any) -> None:
    """Two workers load the session at the same point; the first one's turn commits, the
    second's first append is refused (nothing written), and a new manager continues."""
    sid = new_id()
    make_agent(MessageLogSessionManager(sid, client))("hello")
    first = make_agent(MessageLogSessionManager(sid, client))
    second = make_agent(MessageLogSessionManager(sid, client))
    first("from the first worker")
    with pytest.raises(MessageIdConflictError):
        second("from the second worker")
    make_agent(MessageLogSessionManager(sid, client))("from a fresh worker")
    stored = MessageLogSessionRepository(client).list_messages(sid, "assistant")
    texts = [m.message["content"][0]["text"] for m in stored]
    assert texts == [
        "hello",
        "echo: hello",
        "from the first worker",
        "echo: from the first worker",
        "from a fresh worker",
        "echo: from a fresh worker",
    ]


def test_a_graph_keeps_its_state_in_the_session(client: Any) -> None:
    """A Strands ``Graph`` of two agents on the manager: its state is the session's
    multi-agent record after every node, and a new manager gives it back."""
    from strands.multiagent import GraphBuilder

    def graph(manager: MessageLogSessionManager) -> Any:
        builder = GraphBuilder()
        builder.add_node(Agent(model=ScriptedModel(), name="one", callback_handler=None), "one")
        builder.add_node(Agent(model=ScriptedModel(), name="two", callback_handler=None), "two")
        builder.add_edge("one", "two")
        builder.set_session_manager(manager)
        builder.set_max_node_executions(4)
        return builder.build()

    sid = new_id()
    ran = graph(MessageLogSessionManager(sid, client))
    assert [n.node_id for n in ran("plan a trip").execution_order] == ["one", "two"]
    state = MessageLogSessionRepository(client).read_multi_agent(sid, ran.id)
    assert state is not None and state["status"] == "completed"
    assert sorted(state["completed_nodes"]) == ["one", "two"]
    [answer] = state["node_results"]["two"]["result"]["message"]["content"]
    assert answer["text"].startswith("echo: Original Task: plan a trip")
    graph(MessageLogSessionManager(sid, client))  # restores from the record: no error


def _racing(url: str, sid: str, worker: int, refused: Any) -> None:
    """Turns with no lock: a turn whose append loses is refused, typed, and counted."""
    client = redis.Redis.from_url(url)
    for turn in range(4):
        try:
            make_agent(MessageLogSessionManager(sid, client))(f"w{worker}t{turn}")
        except (MessageIdConflictError, EventLoopException) as exc:
            # A conflict on the answer (the model's message) reaches the caller wrapped in
            # Strands' EventLoopException, the typed conflict its cause (seen in CI).
            cause = exc if isinstance(exc, MessageIdConflictError) else exc.__cause__
            if not isinstance(cause, MessageIdConflictError):
                raise
            with refused.get_lock():
                refused.value += 1
    client.close()


def test_racing_workers_never_break_the_indexes(
    shared_server: Callable[[str], EphemeralServer],
) -> None:
    """Three processes taking turns on one session with no coordination: a worker whose
    append comes second is refused (``MessageIdConflictError``, nothing written), so the
    agent's log stays one message per index, gap-free, whatever the interleaving."""
    url = shared_server("redis").url
    sid = new_id()
    make_agent(MessageLogSessionManager(sid, redis.Redis.from_url(url)))("start")
    context = multiprocessing.get_context("fork")
    refused = context.Value("i", 0)
    workers = [context.Process(target=_racing, args=(url, sid, w, refused)) for w in range(3)]
    for process in workers:
        process.start()
    for process in workers:
        process.join(120)
        assert process.exitcode == 0
    client = redis.Redis.from_url(url)
    stored = MessageLogSessionRepository(client).list_messages(sid, "assistant")
    assert [m.message_id for m in stored] == list(range(len(stored)))
    log = MessageLog(client, f"strands.{sid}:agent:assistant")
    assert log.count() == len(stored)  # no row without its index
    texts = [m.message["content"][0]["text"] for m in stored]
    assert len(texts) == len(set(texts))  # nothing twice
    for n, text in enumerate(texts):  # every answer after its own prompt
        if text.startswith("echo: "):
            assert text.removeprefix("echo: ") in texts[:n]
    # A turn that committed wrote 2 messages; a refused one 0, or 1 (its prompt went in,
    # its answer lost the race).
    done = 12 - refused.value
    assert 2 + 2 * done <= len(stored) <= 2 + 2 * done + refused.value
    client.close()
