"""Microsoft Agent Framework on the log: ``MessageLogHistoryProvider`` gives every
framework message back exactly while other readers see neutral messages; a save is one
atomic append that a retry or a re-save of loaded history never duplicates;
``max_messages`` is a window; providers with different ``source_id`` s are apart; a real
``Agent`` (with a scripted chat client) in one process and in three worker processes
sharing one session; hostile content (hypothesis)."""

from __future__ import annotations

import asyncio
import multiprocessing
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
import redis
import redis.asyncio
import redis.asyncio.cluster
from agent_framework import Agent, AgentSession, Content, Message, UsageDetails
from click.testing import CliRunner
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from benchmarks.run import capturing_writes
from redis_msglog import MessageLog, Usage
from redis_msglog._cli import main
from redis_msglog.errors import InvalidArgumentError, MessageLogError
from redis_msglog.integrations.agent_framework import MessageLogHistoryProvider
from redis_msglog.models import StoredMessage
from redis_msglog.testing import EphemeralServer

from ..conftest import Env, backend_server, make_env
from ..support.agent_framework_client import ScriptedClient, weather
from ..support.cluster import LocalCluster

pytestmark = pytest.mark.frameworks

BACKENDS = ["redis", "valkey", "fakeredis", "cluster", "acl"]
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(24))


@pytest.fixture(params=BACKENDS)
def af_env(
    request: pytest.FixtureRequest,
    shared_server: Callable[[str], EphemeralServer],
    shared_cluster: Callable[[], LocalCluster],
) -> Iterator[Env]:
    backend = str(request.param)
    env = make_env(backend, "async", backend_server(backend, shared_server, shared_cluster))
    yield env
    env.close()


@pytest.fixture
def redis_env(shared_server: Callable[[str], EphemeralServer]) -> Iterator[Env]:
    env = make_env("redis", "async", shared_server("redis"))
    yield env
    env.close()


def provider(env: Env, source_id: str = "msglog", **options: Any) -> MessageLogHistoryProvider:
    client = env.make_async_client()
    env._async_clients.append(client)
    return MessageLogHistoryProvider(source_id, redis=client, **options)


def sync_log(env: Env, p: MessageLogHistoryProvider, session: str) -> MessageLog:
    return MessageLog(env.make_sync_client(), p.conversation(session))


def new_id() -> str:
    return f"af-{uuid.uuid4().hex[:12]}"


def dicts(messages: list[Message]) -> list[dict[str, Any]]:
    return [m.to_dict() for m in messages]


MESSAGES = [
    Message("system", ["Be terse."]),
    Message(
        "user",
        ["What is this?", Content.from_data(PNG, "image/png")],
        author_name="ann",
        additional_properties={"trace": {"n": 1}},
    ),
    Message(
        "assistant",
        [
            Content.from_text_reasoning(text="look closer", id="rs1"),
            Content.from_function_call(call_id="c1", name="zoom", arguments={"level": 2}),
            Content.from_function_call(call_id="c2", name="raw", arguments='{"a": [1, 2]}'),
        ],
        message_id="m1",
    ),
    Message("tool", [Content.from_function_result(call_id="c1", result={"ok": True})]),
    Message("tool", [Content.from_function_result(call_id="c2", result="fine")]),
    Message(
        "assistant",
        ["A PNG.", Content.from_uri("https://example.com/a.png", media_type="image/png")],
        message_id="m2",
    ),
    Message("critic", ["a role of its own"]),  # roles are open strings in the framework
]


def test_messages_come_back_exactly_and_read_as_neutral_messages(af_env: Env) -> None:
    p, sid = provider(af_env), new_id()

    async def main() -> list[Message]:
        await p.save_messages(sid, MESSAGES)
        return await p.get_messages(sid)

    assert dicts(af_env.loop.run_until_complete(main())) == dicts(MESSAGES)
    log = sync_log(af_env, p, sid)
    rows = log.all()
    assert len(rows) == len(MESSAGES) and len({r.at for r in rows}) == 1  # one append
    chat = log.to_openai()  # any reader sees messages
    assert [m["role"] for m in chat] == [
        "system", "user", "assistant", "tool", "tool", "assistant", "assistant",
    ]  # fmt: skip
    assert chat[2]["tool_calls"][1]["function"]["arguments"] == '{"a": [1, 2]}'
    assert [m["tool_call_id"] for m in chat[3:5]] == ["c1", "c2"]
    assert chat[5]["content"] == "A PNG." and rows[6].text == "a role of its own"
    log.to_anthropic(), log.to_responses(), log.to_langchain()


def test_rows_other_writers_appended_read_as_framework_messages(redis_env: Env) -> None:
    p, sid = provider(redis_env), new_id()
    log = sync_log(redis_env, p, sid)
    log.append_many(
        [
            {"role": "user", "content": "hi", "name": "bo"},
            {"role": "assistant", "content": "", "tool_calls": [{"id": "t", "name": "f"}]},
            {"role": "tool", "content": "42", "tool_call_id": "t", "id": "x"},
        ]
    )
    got = redis_env.loop.run_until_complete(p.get_messages(sid))
    assert [(m.role, m.author_name, m.message_id) for m in got] == [
        ("user", "bo", None), ("assistant", None, None), ("tool", None, "x"),
    ]  # fmt: skip
    assert got[0].text == "hi" and got[1].contents[0].call_id == "t"
    assert got[2].contents[0].call_id == "t" and got[2].contents[0].result == "42"


def test_a_save_is_one_append_that_a_retry_or_a_replay_writes_once(af_env: Env) -> None:
    p, sid = provider(af_env), new_id()
    turn = [Message("user", ["hello"]), Message("assistant", ["hi"], message_id="a1")]
    more = [Message("user", ["again"]), Message("assistant", ["sure"])]

    async def main() -> list[Message]:
        await p.save_messages(sid, turn)
        await p.save_messages(sid, turn)  # a retried save
        await p.save_messages(sid, [*turn, *more])  # a full transcript replay
        await p.save_messages(sid, [*turn, *more])
        await p.save_messages(sid, [turn[1], *more])  # a re-save of loaded history
        await p.save_messages(sid, [Message("user", ["hello"])])  # a turn said twice stays
        return await p.get_messages(sid)

    got = af_env.loop.run_until_complete(main())
    assert [m.text for m in got] == ["hello", "hi", "again", "sure", "hello"]
    assert sync_log(af_env, p, sid).count() == 5  # nothing else was written


def test_a_batch_with_ids_saved_again_later_is_written_once(redis_env: Env) -> None:
    """Not at the log's tail any more (so no overlap), but every message has an id: the
    batch's idempotency key recognises it."""
    p, sid = provider(redis_env), new_id()
    batch = [Message("user", ["q"], message_id="u1"), Message("assistant", ["a"], message_id="a1")]

    async def main() -> list[str]:
        await p.save_messages(sid, batch)
        await p.save_messages(sid, [Message("user", ["next"])])
        await p.save_messages(sid, batch)
        await p.save_messages(sid, [Message("user", ["last"])])
        return [m.text for m in await p.get_messages(sid)]

    assert redis_env.loop.run_until_complete(main()) == ["q", "a", "next", "last"]


def test_a_bad_message_writes_nothing(redis_env: Env) -> None:
    p, sid = provider(redis_env), new_id()
    log = sync_log(redis_env, p, sid)
    bad: list[Any] = [
        [Message("user", ["ok"]), "not a message"],
        [Message("user", ["ok"]), Message("user", ["\ud800 a lone surrogate"])],
        [Message("user", ["x"], additional_properties={"nan": float("nan")})],
        "a string",
    ]
    for messages in bad:
        with pytest.raises(MessageLogError):
            redis_env.loop.run_until_complete(p.save_messages(sid, messages))
    assert log.count() == 0


def test_max_messages_is_a_window_and_nonsense_is_refused(redis_env: Env) -> None:
    p, sid = provider(redis_env), new_id()
    window = provider(redis_env, max_messages=3)
    messages = [Message("user", [f"m{n}"]) for n in range(10)]

    async def main() -> tuple[list[Message], list[Message]]:
        await p.save_messages(sid, messages)
        await window.save_messages(sid, [Message("user", ["m10"])])
        return await window.get_messages(sid), await p.get_messages(sid)

    last, everything = redis_env.loop.run_until_complete(main())
    assert [m.text for m in last] == ["m8", "m9", "m10"]
    assert len(everything) == 11  # nothing was deleted
    for nonsense in (0, -1, True, 2.5, "3"):
        with pytest.raises(InvalidArgumentError):
            provider(redis_env, max_messages=nonsense)
    bad: list[dict[str, Any]] = [
        {"source_id": ""},
        {"load_messages": 1},
        {"store_context_from": ["x"]},
    ]
    for options in bad:
        with pytest.raises(InvalidArgumentError):
            provider(redis_env, **options)


def test_two_sources_on_one_session_never_touch_each_other(af_env: Env) -> None:
    primary, audit, sid = provider(af_env), provider(af_env, "audit"), new_id()

    async def main() -> tuple[list[Message], list[Message]]:
        await primary.save_messages(sid, [Message("user", ["a"])])
        await audit.save_messages(sid, [Message("user", ["audited"])])
        await audit.clear(sid)
        return await primary.get_messages(sid), await audit.get_messages(sid)

    mine, theirs = af_env.loop.run_until_complete(main())
    assert [m.text for m in mine] == ["a"] and theirs == []
    assert primary.conversation(sid) != audit.conversation(sid)


NESTED_SOURCES = [  # (source id, session suffix): one conversation each in the old layout
    ("audit", "eu:S"),
    ("audit:eu", "S"),
    ("a", "b:c:S"),
    ("a:b", "c:S"),
    ("a:b:c", "S"),
    ("ü", "ß:%:S"),
    ("ü:ß", "%:S"),
    ("ü:ß:%", "S"),
]


def test_sources_nested_in_each_other_are_apart(af_env: Env) -> None:
    sid = new_id()
    providers = [(provider(af_env, src), f"{end[:-1]}{sid}") for src, end in NESTED_SOURCES]

    async def main() -> list[list[str]]:
        for p, session in providers:
            await p.save_messages(session, [Message("user", [p.source_id])])
        await providers[0][0].clear(providers[0][1])  # clears its own history only
        return [[m.text for m in await p.get_messages(s)] for p, s in providers]

    seen = af_env.loop.run_until_complete(main())
    assert seen == [[]] + [[source] for source, _ in NESTED_SOURCES[1:]]
    assert len({p.conversation(s) for p, s in providers}) == len(providers)
    assert providers[1][0].conversation("x") == "audit%3Aeu:x"
    assert provider(af_env, "msglog").conversation("x") == "msglog:x"  # the earlier layout


def test_clear_is_an_entry_and_erase_deletes(redis_env: Env) -> None:
    p, sid = provider(redis_env), new_id()
    log = sync_log(redis_env, p, sid)

    async def main() -> None:
        await p.save_messages(sid, [Message("user", ["secret"])])
        await p.clear(sid)
        assert await p.get_messages(sid) == []
        await p.save_messages(sid, [Message("user", ["after"])])

    redis_env.loop.run_until_complete(main())
    physical = [r.text for r in log.all(view="physical") if isinstance(r, StoredMessage)]
    assert physical == ["secret", "after"]  # clear hid it; it is still in the log
    redis_env.loop.run_until_complete(p.erase(sid, erased_for=timedelta(seconds=1)))
    assert log.all(view="physical") == []
    left = redis_env.raw.keys(f"*{sid}*")  # only the tombstone, which expires
    assert left == [f"msglog:{{{p.conversation(sid)}}}:seq".encode()]
    assert 0 < redis_env.raw.pttl(left[0]) <= 1000


def test_from_url_and_int_ttl(shared_server: Callable[[str], EphemeralServer]) -> None:
    url, sid = shared_server("redis").url, new_id()
    p = MessageLogHistoryProvider.from_url(url=url, ttl=60, max_messages=5)

    async def main(text: str) -> list[str]:
        await p.save_messages(sid, [Message("user", [text])])
        got = [m.text for m in await p.get_messages(sid)]
        await p.aclose()
        return got

    assert asyncio.run(main("x")) == ["x"]
    assert asyncio.run(main("y")) == ["x", "y"]  # a second event loop: a client of its own
    raw = redis.Redis.from_url(url)
    assert 0 < raw.ttl(f"msglog:{{{p.conversation(sid)}}}:seq") <= 60
    with pytest.raises(InvalidArgumentError):
        MessageLogHistoryProvider.from_url(url="nonsense://x")
    with pytest.raises(InvalidArgumentError):
        MessageLogHistoryProvider.from_url(url=url, ttl=-1)


# -- a real Agent ------------------------------------------------------------------------


class Counting(MessageLogHistoryProvider):
    """Counts the messages the framework asks to save (to see its re-saves)."""

    asked = 0

    async def save_messages(self, session_id: str | None, messages: Any, **kw: Any) -> None:
        self.asked += len(messages)
        await super().save_messages(session_id, messages, **kw)


@pytest.mark.parametrize("per_call", [False, True])
def test_an_agent_keeps_its_history(af_env: Env, per_call: bool) -> None:
    client = af_env.make_async_client()
    af_env._async_clients.append(client)
    p = Counting(redis=client)
    model = ScriptedClient()
    agent = Agent(
        model,
        tools=[weather],
        context_providers=[p],
        require_per_service_call_history_persistence=per_call,
    )
    session = AgentSession(session_id=new_id())

    async def main() -> tuple[list[Message], list[Message]]:
        for question in ("hello", "weather in Paris", "thanks"):
            await agent.run(question, session=session)
        history = await p.get_messages(session.session_id)
        # A front end that sends the whole transcript with each turn (AG-UI style): the
        # framework saves it all again, with the new turn.
        await agent.run([*history, Message("user", ["bye"])], session=session)
        return history, await p.get_messages(session.session_id)

    got, final = af_env.loop.run_until_complete(main())
    assert [(m.role, m.text) for m in got] == [
        ("user", "hello"), ("assistant", "re: hello"),
        ("user", "weather in Paris"), ("assistant", ""), ("tool", ""),
        ("assistant", "re: sunny in Paris"),
        ("user", "thanks"), ("assistant", "re: thanks"),
    ]  # fmt: skip
    assert got[4].contents[0].result == "sunny in Paris"
    assert [m.role for m in model.seen[2]] == [m.role for m in got[:5]]  # history was loaded
    assert dicts(final[:-2]) == dicts(got)
    assert [(m.role, m.text) for m in final[-2:]] == [("user", "bye"), ("assistant", "re: bye")]
    assert p.asked > len(final)  # it was asked to save messages it had: each is written once
    assert sync_log(af_env, p, session.session_id).count() == len(final)


SPENT = UsageDetails(  # each model call's
    input_token_count=100,
    output_token_count=20,
    total_token_count=120,
    cache_read_input_token_count=40,
    reasoning_output_token_count=5,
)


@pytest.mark.parametrize("per_call", [False, True])
def test_a_runs_usage_lands_in_the_conversations_totals(redis_env: Env, per_call: bool) -> None:
    """A tool turn (two model calls), a plain one, then the whole transcript sent again
    with a new question: each run's usage (the framework's sum over its model calls; per
    call when it saves per call) is on its last assistant message and adds to the log's
    totals, once: the transcript saved again adds only the new turn's. The history reads
    back unchanged."""
    client = redis_env.make_async_client()
    redis_env._async_clients.append(client)
    p = MessageLogHistoryProvider(redis=client)
    agent = Agent(
        ScriptedClient(SPENT),
        tools=[weather],
        context_providers=[p],
        require_per_service_call_history_persistence=per_call,
    )
    session = AgentSession(session_id=new_id())

    async def main() -> tuple[list[Any], list[Message], list[Message]]:
        spent = []
        for question in ("weather in Paris", "thanks"):
            spent.append((await agent.run(question, session=session)).usage_details)
        history = await p.get_messages(session.session_id)
        again = await agent.run([*history, Message("user", ["bye"])], session=session)
        spent.append(again.usage_details)
        return spent, history, await p.get_messages(session.session_id)

    spent, history, final = redis_env.loop.run_until_complete(main())
    assert [s and s["input_token_count"] for s in spent] == [200, 100, 100]  # the runs'
    log = sync_log(redis_env, p, session.session_id)
    totals = log.usage()
    assert totals == Usage(
        input_tokens=400, output_tokens=80, cached_tokens=160, reasoning_tokens=20
    )
    rows = log.all()
    one = Usage(input_tokens=100, output_tokens=20, cached_tokens=40, reasoning_tokens=5)
    tool_turn = [one, one] if per_call else [one + one]
    assert [r.usage for r in rows if r.usage] == [*tool_turn, one, one]
    assert [r.seq for r in rows if r.usage] == ([2] if per_call else []) + [4, 6, 8]
    assert Usage.total(r.usage for r in rows if r.usage) == totals
    # The framework gets its messages back as it saved them.
    assert [(m.role, m.text) for m in final] == [
        ("user", "weather in Paris"), ("assistant", ""), ("tool", ""),
        ("assistant", "re: sunny in Paris"), ("user", "thanks"), ("assistant", "re: thanks"),
        ("user", "bye"), ("assistant", "re: bye"),
    ]  # fmt: skip
    assert dicts(final[:-2]) == dicts(history)


def _worker(url: str | None, cluster_port: int | None, session_id: str, worker: int) -> None:
    async def main() -> None:
        if cluster_port is not None:
            client: Any = redis.asyncio.cluster.RedisCluster(host="127.0.0.1", port=cluster_port)
        else:
            client = redis.asyncio.Redis.from_url(str(url))
        p = MessageLogHistoryProvider(redis=client)
        agent = Agent(ScriptedClient(), tools=[weather], context_providers=[p])
        for turn in range(3):
            city = f"city{worker}{turn}"
            question = f"w{worker}t{turn}: weather in {city}" if turn % 2 else f"w{worker}t{turn}"
            await agent.run(question, session=AgentSession(session_id=session_id))
        await client.aclose()

    asyncio.run(main())


@pytest.mark.parametrize("backend", ["redis", "cluster"])
def test_worker_processes_share_a_session(
    backend: str,
    shared_server: Callable[[str], EphemeralServer],
    shared_cluster: Callable[[], LocalCluster],
) -> None:
    """Three processes, three turns each, on one session: every message once, each
    turn's messages together and in order."""
    url, port = None, None
    if backend == "cluster":
        port = shared_cluster().port
    else:
        url = shared_server("redis").url
    sid = new_id()
    context = multiprocessing.get_context("fork")
    workers = [context.Process(target=_worker, args=(url, port, sid, w)) for w in range(3)]
    for process in workers:
        process.start()
    for process in workers:
        process.join(120)
        assert process.exitcode == 0

    async def read() -> list[Message]:
        client: Any = (
            redis.asyncio.cluster.RedisCluster(host="127.0.0.1", port=port)
            if port is not None
            else redis.asyncio.Redis.from_url(str(url))
        )
        got = await MessageLogHistoryProvider(redis=client).get_messages(sid)
        await client.aclose()
        return got

    got = asyncio.run(read())
    users = [n for n, m in enumerate(got) if m.role == "user"]
    assert sorted(got[n].text.split(":")[0] for n in users) == sorted(
        f"w{w}t{t}" for w in range(3) for t in range(3)
    )
    for n in users:  # each turn is one batch: its answer (and tool round) follows it
        size = 4 if "weather" in got[n].text else 2
        turn = got[n : n + size]
        assert [m.role for m in turn] == (
            ["user", "assistant", "tool", "assistant"] if size == 4 else ["user", "assistant"]
        )
        assert turn[-1].text.startswith("re: ")
    assert len(got) == 3 * (2 + 4 + 2)
    ids = [m.message_id for m in got if m.message_id]
    assert len(ids) == len(set(ids))


# -- hostile content ---------------------------------------------------------------------

TEXT = st.text(st.characters(exclude_categories=()), max_size=40)  # surrogates, NULs
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=8,
)
CONTENT = st.one_of(
    TEXT.map(Content.from_text),
    st.builds(
        lambda c, n, a: Content.from_function_call(call_id=c, name=n, arguments=a),
        TEXT, TEXT, st.dictionaries(TEXT, JSON, max_size=3) | TEXT,
    ),
    st.builds(lambda c, r: Content.from_function_result(call_id=c, result=r), TEXT, JSON),
    st.binary(max_size=64).map(lambda b: Content.from_data(b, "application/octet-stream")),
)  # fmt: skip
MESSAGE = st.builds(
    lambda role, contents, author, mid, props: Message(
        role, contents, author_name=author, message_id=mid, additional_properties=props
    ),
    st.sampled_from(["user", "assistant", "system", "tool"]) | TEXT,
    st.lists(CONTENT, max_size=3),
    st.none() | TEXT,
    st.none() | TEXT,
    st.none() | st.dictionaries(TEXT, JSON, max_size=3),
)


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(messages=st.lists(MESSAGE, min_size=1, max_size=4))
def test_hostile_messages_come_back_exactly_or_write_nothing(
    redis_env: Env, messages: list[Message]
) -> None:
    p, sid = provider(redis_env), new_id()
    log = sync_log(redis_env, p, sid)
    try:
        redis_env.loop.run_until_complete(p.save_messages(sid, messages))
    except MessageLogError:
        assert log.count() == 0  # refused: nothing written
        event("refused")
        return
    event("stored")
    got = redis_env.loop.run_until_complete(p.get_messages(sid))
    assert dicts(got) == dicts(messages)
    rows = log.all()
    assert len(rows) == len(got)
    log.to_openai(), log.to_anthropic(), log.to_responses(), log.to_langchain()
    for json in ([], ["--json"]):  # the command line shows it
        shown = CliRunner().invoke(
            main, ["--url", str(redis_env.url), "show", *json, log.conversation]
        )
        assert shown.exit_code == 0, shown.output


# -- round trips -------------------------------------------------------------------------


def test_a_turn_is_two_round_trips_and_a_write_in_between_is_seen(
    shared_server: Callable[[str], EphemeralServer],
) -> None:
    """The agent's load then save: one read, and one conditional append built on what
    the read saw. A worker that appends in between makes the append refused (nothing
    written) and the save check the new tail: both turns are kept, once each."""
    url, sid = shared_server("redis").url, new_id()

    async def main() -> tuple[list[int], list[str]]:
        client = redis.asyncio.Redis.from_url(url)
        p = MessageLogHistoryProvider(redis=client)
        other = MessageLogHistoryProvider(redis=client)  # another worker's provider
        agent = Agent(ScriptedClient(), context_providers=[p])
        session = AgentSession(session_id=sid)
        await agent.run("one", session=session)
        await client.ping()
        trips = []
        with capturing_writes() as sent:
            await agent.run("two", session=session)
            trips.append(len(sent))
            await p.get_messages(sid)
            await other.save_messages(sid, [Message("user", ["from elsewhere"])])
            before = len(sent)
            await p.save_messages(sid, [Message("user", ["three"])])
            trips.append(len(sent) - before)
        texts = [m.text for m in await p.get_messages(sid)]
        await client.aclose()
        return trips, texts

    trips, texts = asyncio.run(main())
    assert trips == [2, 4]  # a turn: read, append; refused append, count, tail, append
    assert texts == ["one", "re: one", "two", "re: two", "from elsewhere", "three"]
