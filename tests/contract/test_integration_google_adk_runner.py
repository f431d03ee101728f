"""ADK's own ``Runner`` on ``MessageLogSessionService`` with a scripted model: the
history of several turns complete, ordered and the same as ADK's
``InMemorySessionService`` keeps it; two concurrent ``run_async`` on one session (one
fails with ``StaleSessionError``, nothing interleaved); worker processes sharing a
session, each turn's reply right after its own message, nothing duplicated."""

from __future__ import annotations

import asyncio
import multiprocessing
import uuid
from collections.abc import AsyncGenerator, Callable
from typing import Any

import pytest
import redis.asyncio
from google.adk.agents import LlmAgent
from google.adk.errors import StaleSessionError
from google.adk.events import Event
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.adk.sessions import BaseSessionService, InMemorySessionService
from google.genai import types

from redis_msglog import MessageLog, Usage
from redis_msglog.integrations.google_adk import MessageLogSessionService
from redis_msglog.testing import EphemeralServer

from ..support.cluster import LocalCluster

pytestmark = pytest.mark.frameworks


class Echo(BaseLlm):
    """Replies ``echo <the last message's text>`` after ``delay`` seconds, and sets a
    state key (so each turn writes session, user and app state)."""

    model: str = "echo"
    delay: float = 0.0

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        await asyncio.sleep(self.delay)
        last = llm_request.contents[-1]
        text = "".join(p.text or "" for p in last.parts or [])
        yield LlmResponse(
            content=types.Content(role="model", parts=[types.Part(text=f"echo {text}")])
        )


def runner(service: BaseSessionService, delay: float = 0.0) -> Runner:
    agent = LlmAgent(name="bot", model=Echo(delay=delay), output_key="last_reply")
    return Runner(app_name="app", agent=agent, session_service=service)


async def turn(run: Runner, user: str, session_id: str, text: str) -> None:
    message = types.Content(role="user", parts=[types.Part(text=text)])
    delta = {"user:turns": text, "app:seen": text}
    async for _ in run.run_async(
        user_id=user, session_id=session_id, new_message=message, state_delta=delta
    ):
        pass


async def history(service: BaseSessionService, user: str, session_id: str) -> list[tuple[str, str]]:
    session = await service.get_session(app_name="app", user_id=user, session_id=session_id)
    assert session is not None
    return [
        (e.author, "".join(p.text or "" for p in e.content.parts or []))
        for e in session.events
        if e.content
    ]


def connect(url: str | None, port: int | None) -> Any:
    if port is not None:
        return redis.asyncio.cluster.RedisCluster(host="127.0.0.1", port=port)
    assert url is not None
    return redis.asyncio.Redis.from_url(url)


@pytest.fixture(params=["redis", "cluster"])
def where(
    request: pytest.FixtureRequest,
    shared_server: Callable[[str], EphemeralServer],
    shared_cluster: Callable[[], LocalCluster],
) -> tuple[str | None, int | None]:
    if request.param == "cluster":
        return None, shared_cluster().port
    return shared_server("redis").url, None


def test_the_runner_keeps_the_history_adk_keeps(where: tuple[str | None, int | None]) -> None:
    async def scenario() -> None:
        client = connect(*where)
        ours, theirs = MessageLogSessionService(client), InMemorySessionService()
        user = f"u-{uuid.uuid4().hex[:8]}"
        for service in (ours, theirs):
            session = await service.create_session(app_name="app", user_id=user, session_id="s")
            for i in range(4):
                await turn(runner(service), user, session.id, f"t{i}")
        assert await history(ours, user, "s") == await history(theirs, user, "s")
        assert await history(ours, user, "s") == [
            x for i in range(4) for x in (("user", f"t{i}"), ("bot", f"echo t{i}"))
        ]
        mine = await ours.get_session(app_name="app", user_id=user, session_id="s")
        adk = await theirs.get_session(app_name="app", user_id=user, session_id="s")
        assert mine is not None and adk is not None and mine.state == adk.state
        await client.aclose()

    asyncio.run(scenario())


def test_two_concurrent_runs_on_one_session_never_interleave(
    where: tuple[str | None, int | None],
) -> None:
    async def scenario() -> None:
        client = connect(*where)
        service = MessageLogSessionService(client)
        user = f"u-{uuid.uuid4().hex[:8]}"
        await service.create_session(app_name="app", user_id=user, session_id="s")
        run = runner(service, delay=0.05)
        results = await asyncio.gather(
            turn(run, user, "s", "A"), turn(run, user, "s", "B"), return_exceptions=True
        )
        failed = [r for r in results if isinstance(r, BaseException)]
        assert all(isinstance(r, StaleSessionError) for r in failed)
        got = await history(service, user, "s")
        assert len(failed) == 1
        winner, loser = ("A", "B") if results[0] is None else ("B", "A")
        # The loser's message may have committed before it lost (the runner writes each
        # event on its own): then the winner read it, and it has no reply of its own.
        assert got[-2:] == [("user", winner), ("bot", f"echo {winner}")]
        assert got[:-2] in ([], [("user", loser)])
        await client.aclose()

    asyncio.run(scenario())


def _worker(url: str | None, port: int | None, user: str, worker: int, turns: int) -> None:
    async def main() -> None:
        client = connect(url, port)
        service = MessageLogSessionService(client)
        run = runner(service, delay=0.01)
        for t in range(turns):
            for attempt in range(50):  # a stale turn is run again, as an app would
                try:
                    await turn(run, user, "s", f"w{worker}t{t}a{attempt}")
                    break
                except StaleSessionError:
                    await asyncio.sleep(0.005 * (worker + 1))
            else:
                raise AssertionError("no turn of this worker committed")
        await client.aclose()

    asyncio.run(main())


def test_worker_processes_share_a_session(where: tuple[str | None, int | None]) -> None:
    """Three processes, three turns each: every reply right after its own message, every
    committed turn once, and each worker's turns in its order."""
    user = f"u-{uuid.uuid4().hex[:8]}"

    async def create() -> None:
        client = connect(*where)
        await MessageLogSessionService(client).create_session(
            app_name="app", user_id=user, session_id="s"
        )
        await client.aclose()

    asyncio.run(create())
    context = multiprocessing.get_context("fork")
    workers = [context.Process(target=_worker, args=(*where, user, w, 3)) for w in range(3)]
    for process in workers:
        process.start()
    for process in workers:
        process.join(120)
        assert process.exitcode == 0

    async def read() -> list[tuple[str, str]]:
        client = connect(*where)
        got = await history(MessageLogSessionService(client), user, "s")
        await client.aclose()
        return got

    got = asyncio.run(read())
    assert len(got) == len(set(got))  # nothing twice
    replies = [i for i, (author, _) in enumerate(got) if author == "bot"]
    for i in replies:  # each reply right after its own message
        assert got[i - 1] == ("user", got[i][1].removeprefix("echo "))
    done = [got[i - 1][1] for i in replies]
    for w in range(3):
        mine = [text for text in done if text.startswith(f"w{w}t")]
        assert [text.split("a")[0] for text in mine] == [f"w{w}t{t}" for t in range(3)]


# -- usage ---------------------------------------------------------------------------------

SPENT = types.GenerateContentResponseUsageMetadata(  # each model call's
    prompt_token_count=100,
    cached_content_token_count=40,
    tool_use_prompt_token_count=3,
    candidates_token_count=20,
    thoughts_token_count=5,
    total_token_count=128,
)


class Forecaster(BaseLlm):
    """Calls ``weather`` for the city in the last message, then, given its result,
    answers with it; every response reports :data:`SPENT`."""

    model: str = "forecaster"

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        last = (llm_request.contents[-1].parts or [types.Part()])[-1]
        if last.function_response is not None:
            result = last.function_response.response or {}
            part = types.Part(text=f"it is {result.get('result')}")
        else:
            part = types.Part(
                function_call=types.FunctionCall(name="weather", args={"city": last.text})
            )
        yield LlmResponse(content=types.Content(role="model", parts=[part]), usage_metadata=SPENT)


def weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


def test_a_runs_usage_lands_in_the_conversations_totals(
    shared_server: Callable[[str], EphemeralServer],
) -> None:
    """Two turns, each a function call round trip (two model calls): each model event's
    usage_metadata is its row's usage (input = prompt + tool-use prompt, output =
    candidates + thoughts) and adds to the log's totals; ADK reads back the events the
    runner made, usage_metadata included."""
    url = shared_server("redis").url
    user = f"u-{uuid.uuid4().hex[:8]}"

    async def scenario() -> tuple[list[Event], list[Event]]:
        client = redis.asyncio.Redis.from_url(url)
        service = MessageLogSessionService(client)
        agent = LlmAgent(name="bot", model=Forecaster(), tools=[weather])
        run = Runner(app_name="app", agent=agent, session_service=service)
        await service.create_session(app_name="app", user_id=user, session_id="s")
        made = []
        for city in ("Paris", "Rome"):
            message = types.Content(role="user", parts=[types.Part(text=city)])
            async for event in run.run_async(user_id=user, session_id="s", new_message=message):
                made.append(event)
        session = await service.get_session(app_name="app", user_id=user, session_id="s")
        assert session is not None
        await client.aclose()
        return made, session.events

    made, read = asyncio.run(scenario())
    # the runner yields every event but the user's messages
    made_ids = {e.id for e in made}
    assert [e.model_dump() for e in read if e.id in made_ids] == [e.model_dump() for e in made]
    assert [e.author for e in read if e.id not in made_ids] == ["user", "user"]
    assert [e.usage_metadata for e in read if e.usage_metadata] == [SPENT] * 4
    assert read[-1].content is not None and read[-1].content.parts is not None
    assert read[-1].content.parts[0].text == "it is sunny in Rome"
    log = MessageLog(redis.Redis.from_url(url), f"app:{user}:s")
    totals = log.usage()
    assert totals == Usage(
        input_tokens=4 * (100 + 3),
        output_tokens=4 * (20 + 5),
        cached_tokens=4 * 40,
        reasoning_tokens=4 * 5,
    )
    rows = log.all()
    assert [r.role for r in rows if r.usage] == ["assistant"] * 4
    assert Usage.total(r.usage for r in rows if r.usage) == totals


# -- what a read costs ---------------------------------------------------------------------


def test_get_session_costs_what_it_returns_not_the_history(
    private_server: Callable[..., EphemeralServer],
) -> None:
    """The commands the server runs and the bytes it sends for
    ``get_session(num_recent_events=3)`` and for ``after_timestamp`` (the last 3 events)
    are the same at 40 and at 400 events (bytes: but for a few digits)."""
    from google.adk.events import Event
    from google.adk.sessions.base_session_service import GetSessionConfig

    url = private_server("redis").url
    raw = redis.Redis.from_url(url)

    def counters() -> tuple[int, int]:
        """Commands run, and bytes sent to clients, so far (a read of every event runs
        one command per page too, but sends every event)."""
        calls = sum(int(v["calls"]) for v in raw.info("commandstats").values())
        return calls, int(raw.info("stats")["total_net_output_bytes"])

    async def costs(service: MessageLogSessionService, events: int) -> list[tuple[int, int]]:
        configs = [
            GetSessionConfig(num_recent_events=3),
            GetSessionConfig(after_timestamp=float(events - 2)),
        ]
        out = []
        for config in configs:
            got = await service.get_session(
                app_name="app", user_id="u", session_id="s", config=config
            )
            assert got is not None and [e.timestamp for e in got.events] == [
                float(events - 2),
                float(events - 1),
                float(events),
            ]
            calls, sent = counters()
            await service.get_session(app_name="app", user_id="u", session_id="s", config=config)
            calls_after, sent_after = counters()
            out.append((calls_after - calls, sent_after - sent))
        return out

    async def scenario() -> None:
        client = redis.asyncio.Redis.from_url(url)
        service = MessageLogSessionService(client)
        session = await service.create_session(app_name="app", user_id="u", session_id="s")
        for i in range(1, 401):
            await service.append_event(session, Event(author="user", timestamp=float(i)))
            if i == 40:
                short = await costs(service, 40)
        long = await costs(service, 400)
        for (calls, sent), (calls_short, sent_short) in zip(long, short, strict=True):
            assert calls == calls_short
            assert abs(sent - sent_short) < 4096  # 360 more events would be ~90 KB
        await client.aclose()

    asyncio.run(scenario())
    raw.close()


def test_ttl_applies_to_sessions_not_to_shared_state(
    shared_server: Callable[[str], EphemeralServer],
) -> None:
    """With ``ttl``, a session's keys expire; the ``user:`` and ``app:`` state's do not
    (it outlives the sessions that wrote it)."""
    from datetime import timedelta

    from google.adk.events import Event, EventActions

    from redis_msglog import ConversationKeys

    url = shared_server("redis").url
    raw = redis.Redis.from_url(url)
    app = f"app-{uuid.uuid4().hex[:8]}"

    async def scenario() -> None:
        client = redis.asyncio.Redis.from_url(url)
        service = MessageLogSessionService(client, ttl=timedelta(hours=1))
        session = await service.create_session(
            app_name=app, user_id="u", session_id="s", state={"app:a": 1, "user:b": 2}
        )
        delta = {"app:a": 3, "user:b": 4, "k": 5}
        await service.append_event(
            session, Event(author="u", actions=EventActions(state_delta=delta))
        )
        await client.aclose()

    asyncio.run(scenario())
    session = ConversationKeys.build("msglog", f"{app}:u:s")
    for key in (session.seq, session.stream):
        assert raw.pttl(key) > 0, key
    current = {f"{app}:u:~user": {b"b": b"4"}, f"{app}:~app": {b"a": b"3"}}
    for conversation, values in current.items():
        key = ConversationKeys.build("msglog", conversation).values
        assert raw.hgetall(key) == values  # the current values only
        assert raw.pttl(key) == -1, key  # no expiry
    raw.close()


def test_msglog_verifies_and_erases_an_apps_shared_state(
    shared_server: Callable[[str], EphemeralServer],
) -> None:
    """``msglog verify --scope <app>`` finds the state's conversations sound (values kept
    in place, no log) and ``msglog erase --scope <app>`` deletes them."""
    from click.testing import CliRunner
    from google.adk.events import Event, EventActions

    from redis_msglog import ConversationKeys
    from redis_msglog._cli import main

    url = shared_server("redis").url
    app = f"app{uuid.uuid4().hex[:8]}"

    async def scenario() -> None:
        client = redis.asyncio.Redis.from_url(url)
        service = MessageLogSessionService(client)
        session = await service.create_session(
            app_name=app, user_id="u", session_id="s", state={"app:a": 1, "user:b": 2}
        )
        delta = {"user:b": 3, "user:c": 4}
        await service.append_event(
            session, Event(author="u", actions=EventActions(state_delta=delta))
        )
        await client.aclose()

    asyncio.run(scenario())
    verified = CliRunner().invoke(main, ["--url", url, "verify", "--scope", app])
    assert verified.exit_code == 0, verified.output
    assert f"ok    {app}:u:~user: 2 values kept in place (no log)" in verified.output
    assert f"ok    {app}:~app: 1 value kept in place (no log)" in verified.output
    erased = CliRunner().invoke(main, ["--url", url, "erase", "--yes", "--scope", app])
    assert erased.exit_code == 0, erased.output
    raw = redis.Redis.from_url(url)
    for conversation in (f"{app}:u:~user", f"{app}:~app", f"{app}:u:s"):
        keys = ConversationKeys.build("msglog", conversation)
        assert raw.exists(keys.values, keys.owner, keys.stream) == 0, conversation
    raw.close()


def test_a_tenant_acl_confines_a_user_to_one_app(
    shared_server: Callable[[str], EphemeralServer],
) -> None:
    """A Redis user with ``acl_rules(tenant=<app>)`` runs that app's sessions, state and
    listings, and is refused (``PermissionDeniedError``, nothing written) another's."""
    from redis_msglog import PermissionDeniedError, acl_rules

    server = shared_server("redis")
    admin = redis.Redis.from_url(server.url)
    app = f"tenant{uuid.uuid4().hex[:8]}"
    version = tuple(int(p) for p in str(admin.info("server")["redis_version"]).split(".")[:2])
    rules = acl_rules(tenant=app, redis_version=version)  # type: ignore[arg-type]
    admin.execute_command("ACL", "SETUSER", f"u-{app}", "reset", "on", ">pw", *rules)

    async def scenario() -> None:
        client = redis.asyncio.Redis.from_url(server.url, username=f"u-{app}", password="pw")
        service = MessageLogSessionService(client)
        await service.create_session(
            app_name=app, user_id="u", session_id="s", state={"app:a": 1, "user:b": 2}
        )
        await turn(runner_for(service, app), "u", "s", "hi")
        assert [s.id for s in (await service.list_sessions(app_name=app)).sessions] == ["s"]
        with pytest.raises(PermissionDeniedError):
            await service.create_session(app_name=f"{app}x", user_id="u", session_id="s")
        await service.delete_session(app_name=app, user_id="u", session_id="s")
        await client.aclose()

    asyncio.run(scenario())
    assert admin.keys(f"msglog:{{{app}x*") == []
    admin.execute_command("ACL", "DELUSER", f"u-{app}")
    admin.close()


def runner_for(service: BaseSessionService, app: str) -> Runner:
    return Runner(app_name=app, agent=LlmAgent(name="bot", model=Echo()), session_service=service)
