"""The OpenAI Agents SDK on the log: ``MessageLogSession`` driven by the SDK's own
``Runner`` with a scripted ``Model`` (reasoning, parallel function calls, a hosted tool),
compared item for item with the SDK's ``SQLiteSession``; the docs' correction flow
(``pop_item`` then rerun); compaction through ``OpenAIResponsesCompactionSession``; the
log read back as messages; several worker processes sharing one session."""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from types import SimpleNamespace
from typing import Any

import pytest
import redis.asyncio
from agents import (
    Agent,
    OpenAIResponsesCompactionSession,
    Runner,
    SQLiteSession,
    Usage,
    function_tool,
)
from agents.items import ModelResponse, TResponseInputItem
from agents.memory.session import Session, _session_accepts_wrapper
from agents.models.interface import Model
from agents.run_config import RunConfig
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseFunctionWebSearch,
    ResponseOutputMessage,
    ResponseOutputText,
    ResponseReasoningItem,
)
from openai.types.responses.response_reasoning_item import Summary
from openai.types.responses.response_usage import InputTokensDetails, OutputTokensDetails

from redis_msglog import AsyncMessageLog, to_anthropic, to_openai
from redis_msglog import Usage as LogUsage
from redis_msglog.adapters import MISSING_RESULT, from_responses
from redis_msglog.integrations.openai_agents import MessageLogSession
from redis_msglog.testing import EphemeralServer

from ..conftest import backend_server, make_env
from ..support.cluster import LocalCluster
from ..support.sdk_check import ANTHROPIC, OPENAI, strict_validate

pytestmark = pytest.mark.frameworks

BACKENDS = ["redis", "valkey", "fakeredis", "cluster", "acl"]  # acl: a restricted user
HOSTED = {"web_search_call", "compaction"}  # items no neutral message holds


def fp(items: list[Any]) -> list[str]:
    """The runner's fingerprint of each item."""
    return [json.dumps(item, sort_keys=True) for item in items]


# -- a scripted model --------------------------------------------------------------------


def _text(item: Any) -> str | None:
    """The text of a user message item."""
    if not isinstance(item, dict) or item.get("role") != "user":
        return None
    content = item.get("content")
    if isinstance(content, str):
        return content
    return "".join(p.get("text", "") for p in content or [] if isinstance(p, dict))


def _message(item_id: str, text: str) -> ResponseOutputMessage:
    return ResponseOutputMessage(
        id=item_id,
        type="message",
        role="assistant",
        status="completed",
        content=[ResponseOutputText(type="output_text", text=text, annotations=[])],
    )


def _call(call_id: str, city: str) -> ResponseFunctionToolCall:
    return ResponseFunctionToolCall(
        id=f"fc_{call_id}",
        call_id=call_id,
        name="weather",
        arguments=json.dumps({"city": city}),
        type="function_call",
        status="completed",
    )


def respond(items: list[Any]) -> list[Any]:
    """The model's output for its input: by the last user message ``"<tag>: <cities>"``,
    first reasoning and one call per city (parallel), then, when the results are in,
    a hosted web search and the answer. A message without cities is answered at once."""
    index, text = next((i, t) for i, item in reversed(list(enumerate(items))) if (t := _text(item)))
    tag, _, rest = text.partition(":")
    tag = tag.split()[0]
    cities = [c.strip() for c in rest.split(",") if c.strip()]
    if not cities:
        return [_message(f"msg_{tag}", f"{tag}: noted")]
    answered = {i.get("call_id") for i in items[index:] if i.get("type") == "function_call_output"}
    calls = [f"call_{tag}_{n}" for n in range(len(cities))]
    if not set(calls) <= answered:
        reasoning = ResponseReasoningItem(
            id=f"rs_{tag}",
            type="reasoning",
            summary=[Summary(type="summary_text", text=f"look up {len(cities)} cities")],
            encrypted_content=f"enc-{tag}",
        )
        return [reasoning, *(_call(c, city) for c, city in zip(calls, cities, strict=True))]
    search = ResponseFunctionWebSearch(
        id=f"ws_{tag}",
        type="web_search_call",
        status="completed",
        action={"type": "search", "query": text},
    )
    return [search, _message(f"msg_{tag}", f"{tag}: sunny in {', '.join(cities)}")]


class ScriptedModel(Model):
    """The SDK's ``Model`` interface, answering with :func:`respond`; ``inputs`` keeps
    what it was sent. ``spent()``, if given, is the usage each response reports (by
    default none)."""

    def __init__(self, spent: Callable[[], Usage] = Usage) -> None:
        self.inputs: list[list[Any]] = []
        self.spent = spent

    async def get_response(
        self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any
    ) -> ModelResponse:
        items = [{"role": "user", "content": input}] if isinstance(input, str) else list(input)
        self.inputs.append(json.loads(json.dumps(items)))
        response_id = f"resp_{len(self.inputs)}"  # automatic compaction needs one
        return ModelResponse(output=respond(items), usage=self.spent(), response_id=response_id)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError


@function_tool
def weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


def agent(model: Model) -> Agent[Any]:
    return Agent(name="forecaster", instructions="Answer briefly.", model=model, tools=[weather])


TURNS = ["t1: Paris, Rome", "t2: Oslo", "t3 thanks"]


async def run_turns(session: Any, turns: list[str], model: ScriptedModel) -> None:
    for turn in turns:
        await Runner.run(agent(model), turn, session=session)


# -- fixtures ----------------------------------------------------------------------------


@pytest.fixture(params=BACKENDS)
def make_session(
    request: pytest.FixtureRequest,
    shared_server: Callable[[str], EphemeralServer],
    shared_cluster: Callable[[], LocalCluster],
) -> Iterator[Callable[..., tuple[MessageLogSession, asyncio.AbstractEventLoop]]]:
    """``make(session_id=None, **options)``: a session on the backend, and the loop to
    run it on."""
    backend = str(request.param)
    server = backend_server(backend, shared_server, shared_cluster)
    env = make_env(backend, "async", server)
    clients: list[Any] = []

    def make(
        session_id: str | None = None, **options: Any
    ) -> tuple[MessageLogSession, asyncio.AbstractEventLoop]:
        client = env.make_async_client()
        clients.append(client)
        return MessageLogSession(session_id or new_id(), client, **options), env.loop

    yield make
    for client in clients:
        env.loop.run_until_complete(client.aclose())
    env.loop.close()


def new_id() -> str:
    return f"agents-{uuid.uuid4().hex[:12]}"


# -- items stored verbatim ---------------------------------------------------------------

ODD_ITEMS: list[dict[str, Any]] = [
    {"role": "developer", "content": "Be terse."},
    {
        "type": "message",
        "role": "user",
        "content": [
            {"type": "input_text", "text": "What is this?"},
            {"type": "input_image", "image_url": "https://example.com/a.png", "detail": "low"},
        ],
    },
    {
        "type": "reasoning",
        "id": "rs_1",
        "summary": [],
        "content": [{"type": "reasoning_text", "text": "hmm"}],
        "encrypted_content": "opaque",
    },
    {"type": "function_call", "call_id": "c1", "name": "look", "arguments": "{not json"},
    {
        "type": "function_call_output",
        "call_id": "c1",
        "output": [{"type": "input_text", "text": "a cat"}],
    },
    {"type": "computer_call", "id": "cu_1", "call_id": "cc1", "action": {"type": "screenshot"}},
    {"type": "mcp_list_tools", "id": "mcpl_1", "server_label": "x", "tools": []},
    {"type": "item_reference", "id": "msg_old"},
    {"type": "a_future_item", "payload": {"nested": [1, 2.5, True, None]}},
    {"role": "assistant", "content": "", "phase": None},  # a null field
    {
        "type": "message",
        "role": "assistant",
        "id": "msg_2",
        "status": "completed",
        "phase": "final_answer",
        "content": [
            {"type": "output_text", "text": "A cat.", "annotations": [], "logprobs": []},
            {"type": "refusal", "refusal": "no more"},
        ],
    },
]


def test_items_round_trip_verbatim(make_session: Callable[..., Any]) -> None:
    """Every item comes back as the runner fingerprints it; pop_item takes the newest;
    get_items(limit) the newest n; add_items is one entry range (one append_many)."""
    session, loop = make_session()

    async def go() -> None:
        await session.add_items(list(ODD_ITEMS))
        assert fp(await session.get_items()) == fp(ODD_ITEMS)
        assert await session.log.count() == len(ODD_ITEMS)  # one append, one seq per item
        assert fp(await session.get_items(limit=3)) == fp(ODD_ITEMS[-3:])
        assert await session.get_items(limit=0) == []
        assert fp([await session.pop_item()]) == fp(ODD_ITEMS[-1:])
        assert fp(await session.get_items()) == fp(ODD_ITEMS[:-1])
        # Every other reader sees messages; only what the formats hold.
        rows = await session.log.all()
        strict_validate(OPENAI, to_openai(rows))
        strict_validate(ANTHROPIC, to_anthropic(rows))
        await session.clear_session()
        assert await session.get_items() == []
        assert await session.pop_item() is None
        # clear is an entry: the items are still in the physical log.
        physical = await session.log.all(view="physical")
        assert len(physical) > len(ODD_ITEMS)

    loop.run_until_complete(go())


def test_items_read_again_are_fresh_and_follow_the_log(make_session: Callable[..., Any]) -> None:
    """Items rendered once are kept for the next read (the runner reads the whole
    history every turn), but every read hands out fresh dicts, and an edit by another
    worker shows at once."""
    session, loop = make_session()

    async def go() -> None:
        await session.add_items(list(ODD_ITEMS))
        first = await session.get_items()
        first[0]["mutated by the runner"] = True
        again = await session.get_items()
        assert fp(again) == fp(ODD_ITEMS) and again[0] is not first[0]
        other = AsyncMessageLog(session.log._redis, session.session_id)
        await other.retract([1])
        assert fp(await session.get_items()) == fp(ODD_ITEMS[1:])

    loop.run_until_complete(go())


def test_settings_limit_and_wrapper(make_session: Callable[..., Any]) -> None:
    session, loop = make_session(session_settings={"limit": 2})
    structural: Any = session
    assert isinstance(structural, Session)
    assert _session_accepts_wrapper(structural)  # so the runner passes its run context

    async def go() -> None:
        items = [{"role": "user", "content": f"m{n}"} for n in range(5)]
        await session.add_items(items, wrapper=None)
        assert await session.get_items(wrapper=None) == items[-2:]
        assert await session.get_items(limit=4) == items[-4:]
        assert await session.get_items(limit=-1) == items  # as SQLiteSession: all
        assert await session.pop_item(wrapper=None) == items[-1]
        await session.clear_session(wrapper=None)

    loop.run_until_complete(go())


# -- the runner, against SQLiteSession ---------------------------------------------------


def test_runner_turns_correction_and_readers(make_session: Callable[..., Any]) -> None:
    """Three turns (reasoning, parallel calls, a hosted tool), the docs' correction flow
    (pop the answer and the question, ask again): the same items, and the same model
    inputs, as with the SDK's SQLiteSession; then the log as Chat and Anthropic messages."""
    session, loop = make_session()
    reference = SQLiteSession(session.session_id)

    async def correct(s: Any, model: ScriptedModel) -> None:
        await run_turns(s, TURNS, model)
        assistant = await s.pop_item()
        user = await s.pop_item()
        assert assistant["id"] == "msg_t3" and user == {"role": "user", "content": "t3 thanks"}
        await run_turns(s, ["t4: Lima, Quito"], model)

    ours, theirs = ScriptedModel(), ScriptedModel()
    loop.run_until_complete(correct(session, ours))
    loop.run_until_complete(correct(reference, theirs))
    items = loop.run_until_complete(session.get_items())
    assert fp(items) == fp(loop.run_until_complete(reference.get_items()))
    assert ours.inputs == theirs.inputs
    kinds = {item.get("type") for item in items}
    assert {"reasoning", "function_call", "function_call_output", "web_search_call"} <= kinds

    # Every other reader: the messages from_responses makes of the items (hosted left out).
    rows = loop.run_until_complete(session.log.all())
    expected = from_responses([i for i in items if i.get("type") not in HOSTED])
    assert to_openai(rows) == to_openai(expected)
    assert to_anthropic(rows) == to_anthropic(expected)
    chat = to_openai(rows)
    strict_validate(OPENAI, chat)
    strict_validate(ANTHROPIC, to_anthropic(rows))
    assert MISSING_RESULT not in json.dumps(chat)  # parallel calls paired with results
    calls = [m for m in chat if m.get("tool_calls")]
    assert [len(m["tool_calls"]) for m in calls] == [2, 1, 2]  # one turn per model step
    assert loop.run_until_complete(session.log.to_openai()) == chat


def spent() -> Usage:
    """One model call's usage: 100 tokens in (40 cached), 20 out (5 reasoning)."""
    return Usage(
        requests=1,
        input_tokens=100,
        output_tokens=20,
        total_tokens=120,
        input_tokens_details=InputTokensDetails(cached_tokens=40, cache_write_tokens=0),
        output_tokens_details=OutputTokensDetails(reasoning_tokens=5),
    )


@pytest.mark.parametrize("make_session", ["redis"], indirect=True)  # not per backend
def test_a_runs_usage_lands_in_the_conversations_totals(make_session: Callable[..., Any]) -> None:
    """Three turns, five model calls (a turn with cities: the calls, then the answer):
    what each batch of items cost (the runner's usage since the run's last batch) is on
    its last assistant message and adds to the log's totals; the runner reads back the
    same items, and sends the model the same inputs, as with SQLiteSession."""
    session, loop = make_session()
    reference = SQLiteSession(session.session_id)
    ours, theirs = ScriptedModel(spent), ScriptedModel(spent)
    loop.run_until_complete(run_turns(session, TURNS, ours))
    loop.run_until_complete(run_turns(reference, TURNS, theirs))
    assert len(ours.inputs) == 5 and ours.inputs == theirs.inputs
    items = loop.run_until_complete(session.get_items())
    assert fp(items) == fp(loop.run_until_complete(reference.get_items()))
    totals = loop.run_until_complete(session.log.usage())
    assert totals == LogUsage(
        input_tokens=500, output_tokens=100, cached_tokens=200, reasoning_tokens=25
    )
    rows = loop.run_until_complete(session.log.all())
    one = LogUsage(input_tokens=100, output_tokens=20, cached_tokens=40, reasoning_tokens=5)
    # each model call's batch: the calls' (an assistant message of tool calls), the answer's
    assert [(r.role, bool(r.tool_calls), r.usage) for r in rows if r.usage] == [
        ("assistant", True, one),
        ("assistant", False, one),
        ("assistant", True, one),
        ("assistant", False, one),
        ("assistant", False, one),
    ]
    assert LogUsage.total(r.usage for r in rows if r.usage) == totals


# -- compaction --------------------------------------------------------------------------


class FakeResponses:
    """``client.responses.compact``: the first user message and a compaction item."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    async def compact(self, **kwargs: Any) -> Any:
        self.calls.append(kwargs)
        given = kwargs.get("input") or []
        first = next(i for i in given if isinstance(i, dict) and _text(i))
        output = [
            {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": _text(first)}],
            },
            {"type": "compaction", "encrypted_content": f"summary of {len(given)} items"},
        ]
        return SimpleNamespace(output=output, usage=None)


def compacting(session: Any, fake: FakeResponses) -> OpenAIResponsesCompactionSession:
    return OpenAIResponsesCompactionSession(
        session.session_id,
        session,
        client=SimpleNamespace(responses=fake),  # type: ignore[arg-type]
        compaction_mode="input",
        should_trigger_compaction=lambda context: len(context["compaction_candidate_items"]) >= 6,
    )


def test_compaction_like_sqlite(make_session: Callable[..., Any]) -> None:
    """Automatic compaction after a turn (the snapshot's conditional suffix replacement)
    and a manual one (the atomic replace), through the SDK's compaction session: the same
    items as on SQLiteSession; the compacted items stay in the physical log."""
    session, loop = make_session()
    reference = SQLiteSession(session.session_id)
    snapshots: list[Any] = []
    read_snapshot = session._get_compaction_snapshot

    async def spy(limit: int, **kwargs: Any) -> Any:
        snapshots.append(await read_snapshot(limit, **kwargs))
        return snapshots[-1]

    session._get_compaction_snapshot = spy
    results = []
    for s in (session, reference):
        fake = FakeResponses()
        wrapped = compacting(s, fake)
        loop.run_until_complete(run_turns(wrapped, TURNS, ScriptedModel()))
        automatic = loop.run_until_complete(s.get_items())
        loop.run_until_complete(s.add_items([{"role": "user", "content": "t5: later"}]))
        loop.run_until_complete(wrapped.run_compaction({"force": True}))
        results.append((len(fake.calls), automatic, loop.run_until_complete(s.get_items())))
    assert fp(results[0][1]) == fp(results[1][1])
    assert fp(results[0][2]) == fp(results[1][2])
    assert results[0][0] == results[1][0] >= 2
    assert snapshots and all(s is not None for s in snapshots)  # the conditional path
    assert any(i.get("type") == "compaction" for i in results[0][2])
    physical = loop.run_until_complete(session.log.all(view="physical"))
    assert len(physical) > len(results[0][2])
    strict_validate(OPENAI, loop.run_until_complete(session.log.to_openai()))


def test_snapshot_replacement_is_conditional(make_session: Callable[..., Any]) -> None:
    """A write by another worker after the snapshot: the replacement writes nothing."""
    session, loop = make_session()
    other, _ = make_session(session.session_id)

    async def go() -> None:
        items = [{"role": "user", "content": f"m{n}"} for n in range(4)]
        await session.add_items(items)
        snapshot = await session._get_compaction_snapshot(3)
        assert snapshot is not None and not snapshot.complete
        assert snapshot.items == items[1:]
        await other.add_items([{"role": "user", "content": "late"}])
        assert not await snapshot.replace_suffix(1, [{"role": "user", "content": "x"}])
        fresh = await session._get_compaction_snapshot(10)
        assert fresh is not None and fresh.complete
        assert await fresh.replace_suffix(2, [{"role": "user", "content": "x"}])
        assert await session.get_items() == [*items[:2], {"role": "user", "content": "x"}]

    loop.run_until_complete(go())


# -- several worker processes ------------------------------------------------------------


def _worker(url: str | None, cluster_port: int | None, session_id: str, worker: int) -> None:
    async def main() -> None:
        if cluster_port is not None:
            client: Any = redis.asyncio.cluster.RedisCluster(host="127.0.0.1", port=cluster_port)
        else:
            assert url is not None
            client = redis.asyncio.Redis.from_url(url)
        session = MessageLogSession(session_id, client)
        model = ScriptedModel()
        for turn in range(3):
            cities = ", ".join(f"city{worker}{turn}{n}" for n in range(turn % 2 + 1))
            await Runner.run(
                agent(model),
                f"w{worker}t{turn}: {cities}",
                session=session,
                run_config=RunConfig(tracing_disabled=True),
            )
        await client.aclose()

    asyncio.run(main())


@pytest.mark.parametrize("backend", ["redis", "cluster"])
def test_worker_processes_share_a_session(
    backend: str,
    shared_server: Callable[[str], EphemeralServer],
    shared_cluster: Callable[[], LocalCluster],
) -> None:
    """Three processes, three turns each, on one session: every item of every turn once,
    each step's items together, and the log readable as valid Chat messages."""
    url, port = None, None
    if backend == "cluster":
        port = shared_cluster().port
    else:
        url = shared_server("valkey" if backend == "valkey" else "redis").url
    session_id = new_id()
    context = multiprocessing.get_context("fork")
    workers = [context.Process(target=_worker, args=(url, port, session_id, w)) for w in range(3)]
    for process in workers:
        process.start()
    for process in workers:
        process.join(60)
        assert process.exitcode == 0

    async def read() -> tuple[list[TResponseInputItem], Any]:
        if port is not None:
            client: Any = redis.asyncio.cluster.RedisCluster(host="127.0.0.1", port=port)
        else:
            assert url is not None
            client = redis.asyncio.Redis.from_url(url)
        session = MessageLogSession(session_id, client)
        items = await session.get_items()
        rows = await session.log.all()
        await client.aclose()
        return items, rows

    items, rows = asyncio.run(read())
    prints = fp(items)
    assert len(prints) == len(set(prints))  # nothing twice
    users = [text for i in items if (text := _text(i))]
    assert sorted(users) == sorted(
        f"w{w}t{t}: " + ", ".join(f"city{w}{t}{n}" for n in range(t % 2 + 1))
        for w in range(3)
        for t in range(3)
    )  # nothing lost
    assert sum(i.get("type") == "function_call_output" for i in items) == 3 * (1 + 2 + 1)
    assert sum(i.get("type") == "message" for i in items) == 9
    for n, item in enumerate(items):  # a step's calls and results are one batch
        if item.get("type") == "function_call_output":
            assert items[n - 1].get("type") in ("function_call", "function_call_output")
    chat = to_openai(rows)
    strict_validate(OPENAI, chat)
    assert MISSING_RESULT not in json.dumps(chat)


# -- from_url ----------------------------------------------------------------------------


def test_from_url(shared_server: Callable[[str], EphemeralServer]) -> None:
    url = shared_server("redis").url

    async def go() -> None:
        session = MessageLogSession.from_url(new_id(), url=url, prefix="agents")
        await session.add_items([{"role": "user", "content": "hi"}])
        assert await session.get_items() == [{"role": "user", "content": "hi"}]
        assert session.log.keys.stream.startswith("agents:")
        await session.close()

    asyncio.run(go())
