"""An agent loop, side by side: each framework's own Redis store against our
drop-in for it, through the framework's storage interface, and raw redis-py.

    python -m benchmarks.agent_loop [--url redis://...] [--turns 200] [--runs 5]
                                    [--quick | --smoke] [--markdown PATH]

One conversation, ``--turns`` turns. Each turn reads the whole history the way the
framework's runtime does, then appends the turn the way the runtime does: a user message,
an assistant message with a tool call, the tool's result and the assistant's answer (4
messages of ~200-500 bytes of text each, in the framework's own message types). The
history grows to ``4 * turns`` messages, so a store that reads everything each turn pays
for it as the conversation grows.

- OpenAI Agents SDK: ``get_items()`` then ``add_items(4 items)``; its ``RedisSession``
  against our ``MessageLogSession``.
- LangChain: ``messages`` then ``add_messages(4 messages)`` (sync, what
  ``RunnableWithMessageHistory`` calls); langchain-community's
  ``RedisChatMessageHistory`` against our ``MessageLogChatHistory``.
- LlamaIndex: its ``RedisChatStore`` is a ``BaseChatStore`` (``ChatMemoryBuffer``'s
  interface: ``aget_messages`` then ``async_add_message`` per message); ours is the
  ``AsyncDBChatStore`` ``Memory`` takes (``get_messages`` then ``add_messages``).
- Pydantic AI: ``load`` then ``save`` on our ``RedisConversationStore``; Pydantic AI has
  no Redis store of its own, so there is no ratio to a framework store.
- Google ADK: ``get_session`` then ``append_event`` per event (4) on a
  ``BaseSessionService``; ADK 2.13's own ``RedisSessionService``
  (``google.adk.integrations.redis``) and adk-python-community's (when importable)
  against our ``MessageLogSessionService``.
- raw redis-py: ``XRANGE`` of the whole stream + ``orjson.loads``, then the 4 ``XADD`` in
  one pipeline (the least a client can do for this loop), sync and asyncio.

Every figure is a median of ``--runs`` runs, each on a new conversation (run 1 of every
contender, then run 2...: a change of the machine's load falls on all; the objects the
process holds before a run are frozen out of the garbage collector, as in a worker that
loads one framework, not four); round trips per turn are counted (what redis-py sends)
over a few turns of a separate run. A contender whose package is not installed (the
``bench`` extra) is reported as such. With no ``--url`` it starts a private server.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import inspect
import statistics
import time
import uuid
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson
import redis
import redis.asyncio
import redis.asyncio.connection
import redis.connection

from benchmarks import agent_loop_maf
from benchmarks.run import capturing_writes
from benchmarks.server import server_url

TOOL = "search_docs"
MESSAGES_PER_TURN = 4
TRIP_TURNS = 5  # turns whose round trips are counted (after one warm-up turn)

RAW_SYNC = "raw redis-py, sync"
RAW_ASYNC = "raw redis-py, asyncio"


class Missing(Exception):
    """The contender's package is not installed."""


# -- the turn's content -------------------------------------------------------------------


@dataclass(frozen=True)
class Turn:
    """What turn ``i`` says, before any framework's types: the same text everywhere."""

    i: int
    question: str
    call_id: str
    arguments: dict[str, Any]
    result: str
    answer: str

    @property
    def arguments_json(self) -> str:
        return orjson.dumps(self.arguments).decode()


def turn(i: int) -> Turn:
    return Turn(
        i=i,
        question=(
            f"Turn {i}. The billing worker retried a charge three times last night and the "
            "customer was billed twice. Which change to the retry policy could cause that, "
            "and what should we roll back first? Please cite the runbook section you use."
        ),
        call_id=f"call_{i:05d}",
        arguments={
            "query": f"billing worker retry policy idempotency, turn {i}",
            "top_k": 5,
            "filters": {"service": "billing", "kind": ["runbook", "changelog"]},
        },
        result=(
            f"[1] runbook/billing.md#retries (turn {i}): charges are retried with "
            "exponential backoff (1 s, 4 s, 16 s); each attempt must carry the original "
            "idempotency key. [2] changelog 2026-11-28: the HTTP client was upgraded and "
            "now regenerates request ids on retry. [3] runbook/billing.md#rollback: roll "
            "back the client first, then replay the dead-letter queue with --dry-run to "
            "list duplicates before refunding them. [4] incident 4411: a similar double "
            "charge in March, caused by a proxy retrying POSTs."
        ),
        answer=(
            f"Most likely the HTTP client upgrade of Nov 28 (turn {i}): it regenerates the "
            "request id on each retry, so the payment provider no longer sees the original "
            "idempotency key and charges again. Roll the client back first "
            "(runbook/billing.md#rollback), then replay the dead-letter queue with --dry-run "
            "to list the duplicates and refund them."
        ),
    )


# -- the contenders -------------------------------------------------------------------------
# Each is made inside the event loop of its run, and has ``read() -> int`` (the history,
# read as the runtime does; its length), ``append(turn)`` and ``close()``, plain or async.


class RawSync:
    """``XRANGE`` of the whole stream + ``orjson.loads``; the turn's 4 ``XADD`` pipelined."""

    def __init__(self, url: str, conversation: str) -> None:
        self.redis = redis.Redis.from_url(url)
        self.key = f"raw:{{{conversation}}}:stream"

    def read(self) -> int:
        return len(_decoded(self.redis.xrange(self.key)))

    def append(self, t: Turn) -> None:
        pipe = self.redis.pipeline(transaction=False)
        for message in _chat_messages(t):
            pipe.xadd(self.key, {"msg": orjson.dumps(message)})
        pipe.execute()

    def close(self) -> None:
        self.redis.close()


class RawAsync:
    def __init__(self, url: str, conversation: str) -> None:
        self.redis = redis.asyncio.Redis.from_url(url)
        self.key = f"raw:{{{conversation}}}:stream"

    async def read(self) -> int:
        return len(_decoded(await self.redis.xrange(self.key)))

    async def append(self, t: Turn) -> None:
        async with self.redis.pipeline(transaction=False) as pipe:
            for message in _chat_messages(t):
                pipe.xadd(self.key, {"msg": orjson.dumps(message)})
            await pipe.execute()

    async def close(self) -> None:
        await self.redis.aclose()


def _decoded(entries: Any) -> list[Any]:
    return [orjson.loads(fields[b"msg"]) for _, fields in entries or []]


def _chat_messages(t: Turn) -> list[dict[str, Any]]:
    """The turn as OpenAI Chat Completions messages (what the raw baseline stores)."""
    call = {"name": TOOL, "arguments": t.arguments_json}
    return [
        {"role": "user", "content": t.question},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": t.call_id, "type": "function", "function": call}],
        },
        {"role": "tool", "tool_call_id": t.call_id, "content": t.result},
        {"role": "assistant", "content": t.answer},
    ]


# OpenAI Agents SDK ---------------------------------------------------------------------


def _agents_items(t: Turn) -> list[Any]:
    """The turn as the Agents SDK's runner stores it: the input item, then the model's and
    the tool's output items."""
    return [
        {"role": "user", "content": t.question},
        {
            "type": "function_call",
            "id": f"fc_{t.i:05d}",
            "call_id": t.call_id,
            "name": TOOL,
            "arguments": t.arguments_json,
            "status": "completed",
        },
        {"type": "function_call_output", "call_id": t.call_id, "output": t.result},
        {
            "type": "message",
            "id": f"msg_{t.i:05d}",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": t.answer, "annotations": []}],
        },
    ]


class AgentsSession:
    """``get_items()`` then ``add_items(items)`` on a ``Session`` (both stores)."""

    def __init__(self, session: Any, client: redis.asyncio.Redis) -> None:
        self.session = session
        self.redis = client

    async def read(self) -> int:
        return len(await self.session.get_items())

    async def append(self, t: Turn) -> None:
        await self.session.add_items(_agents_items(t))

    async def close(self) -> None:
        await self.redis.aclose()


def agents_theirs(url: str, conversation: str) -> AgentsSession:
    try:
        from agents.extensions.memory.redis_session import RedisSession
    except ImportError as exc:
        raise Missing(str(exc)) from exc
    client = redis.asyncio.Redis.from_url(url)
    return AgentsSession(RedisSession(conversation, redis_client=client), client)


def agents_ours(url: str, conversation: str) -> AgentsSession:
    try:
        from redis_msglog.integrations.openai_agents import MessageLogSession
    except ImportError as exc:
        raise Missing(str(exc)) from exc
    client = redis.asyncio.Redis.from_url(url)
    return AgentsSession(MessageLogSession(conversation, client), client)


# LangChain -------------------------------------------------------------------------------


def _langchain_messages(t: Turn) -> list[Any]:
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

    call = {"name": TOOL, "args": t.arguments, "id": t.call_id, "type": "tool_call"}
    return [
        HumanMessage(t.question),
        AIMessage("", tool_calls=[call]),
        ToolMessage(t.result, tool_call_id=t.call_id),
        AIMessage(t.answer),
    ]


class LangChainHistory:
    """``messages`` then ``add_messages(messages)`` on a ``BaseChatMessageHistory``."""

    def __init__(self, history: Any, client: redis.Redis) -> None:
        self.history = history
        self.redis = client

    def read(self) -> int:
        return len(self.history.messages)

    def append(self, t: Turn) -> None:
        self.history.add_messages(_langchain_messages(t))

    def close(self) -> None:
        self.redis.close()


def langchain_theirs(url: str, conversation: str) -> LangChainHistory:
    """langchain-community's store: a list, ``LPUSH`` per message, ``LRANGE`` of all. Its
    successor, langchain-redis, needs the server's search and JSON modules (Redis 8, Redis
    Stack), which a plain Redis or Valkey lacks."""
    try:
        with warnings.catch_warnings():  # "langchain-community is being sunset"
            warnings.simplefilter("ignore", DeprecationWarning)
            from langchain_community.chat_message_histories import RedisChatMessageHistory
    except ImportError as exc:
        raise Missing(str(exc)) from exc
    history = RedisChatMessageHistory(conversation, url=url)
    return LangChainHistory(history, history.redis_client)


def langchain_ours(url: str, conversation: str) -> LangChainHistory:
    try:
        from redis_msglog.integrations.langchain import MessageLogChatHistory
    except ImportError as exc:
        raise Missing(str(exc)) from exc
    client = redis.Redis.from_url(url)
    return LangChainHistory(MessageLogChatHistory(conversation, client), client)


# LlamaIndex ------------------------------------------------------------------------------


def _llama_messages(t: Turn) -> list[Any]:
    from llama_index.core.base.llms.types import ChatMessage, ToolCallBlock

    call = ToolCallBlock(tool_call_id=t.call_id, tool_name=TOOL, tool_kwargs=t.arguments)
    return [
        ChatMessage(role="user", content=t.question),
        ChatMessage(role="assistant", blocks=[call]),
        ChatMessage(role="tool", content=t.result, additional_kwargs={"tool_call_id": t.call_id}),
        ChatMessage(role="assistant", content=t.answer),
    ]


class LlamaIndexTheirs:
    """``RedisChatStore`` as ``ChatMemoryBuffer`` uses it: ``aget_messages(key)``, then
    ``async_add_message`` once per message (it has no batch append)."""

    def __init__(self, url: str, conversation: str) -> None:
        try:
            from llama_index.storage.chat_store.redis import RedisChatStore
        except ImportError as exc:
            raise Missing(str(exc)) from exc
        self.store = RedisChatStore(redis_url=url)
        self.key = conversation

    async def read(self) -> int:
        return len(await self.store.aget_messages(self.key))

    async def append(self, t: Turn) -> None:
        for message in _llama_messages(t):
            await self.store.async_add_message(self.key, message)

    async def close(self) -> None:
        self.store._redis_client.close()
        await self.store._aredis_client.aclose()


class LlamaIndexOurs:
    """``MessageLogChatStore`` as ``Memory`` uses it: ``get_messages(key)`` (the active
    messages), then ``add_messages(key, messages)``."""

    def __init__(self, url: str, conversation: str) -> None:
        try:
            from redis_msglog.integrations.llama_index import MessageLogChatStore
        except ImportError as exc:
            raise Missing(str(exc)) from exc
        self.redis = redis.asyncio.Redis.from_url(url)
        self.store = MessageLogChatStore(self.redis)
        self.key = conversation

    async def read(self) -> int:
        return len(await self.store.get_messages(self.key))

    async def append(self, t: Turn) -> None:
        await self.store.add_messages(self.key, _llama_messages(t))

    async def close(self) -> None:
        await self.redis.aclose()


# Pydantic AI -----------------------------------------------------------------------------


def _pydantic_messages(t: Turn) -> list[Any]:
    from pydantic_ai.messages import (
        ModelRequest,
        ModelResponse,
        TextPart,
        ToolCallPart,
        ToolReturnPart,
        UserPromptPart,
    )

    return [
        ModelRequest(parts=[UserPromptPart(t.question)]),
        ModelResponse(
            parts=[ToolCallPart(TOOL, t.arguments_json, tool_call_id=t.call_id)],
            model_name="bench",
        ),
        ModelRequest(parts=[ToolReturnPart(TOOL, t.result, tool_call_id=t.call_id)]),
        ModelResponse(parts=[TextPart(t.answer)], model_name="bench"),
    ]


class PydanticOurs:
    """``load(id)`` (a new ``Conversation`` when there is none), then the turn's messages
    added to it and ``save(conversation)``: what wraps each ``agent.run``."""

    def __init__(self, url: str, conversation: str) -> None:
        try:
            from pydantic_ai.conversation import Conversation

            from redis_msglog.integrations.pydantic_ai import RedisConversationStore
        except ImportError as exc:
            raise Missing(str(exc)) from exc
        self.redis = redis.asyncio.Redis.from_url(url)
        self.store = RedisConversationStore(self.redis)
        self.id = conversation
        self._new = Conversation
        self.conversation: Any = None

    async def read(self) -> int:
        loaded = await self.store.load(self.id)
        self.conversation = loaded or self._new(conversation_id=self.id)
        return len(self.conversation.messages)

    async def append(self, t: Turn) -> None:
        assert self.conversation is not None, "read() first"
        self.conversation.messages.extend(_pydantic_messages(t))
        await self.store.save(self.conversation)

    async def close(self) -> None:
        await self.redis.aclose()


# Google ADK ------------------------------------------------------------------------------


def _adk_events(t: Turn) -> list[Any]:
    """The turn as ADK's runner appends it: the user's event, the model's call, the
    tool's response and the model's answer."""
    from google.adk.events import Event
    from google.genai import types

    def event(author: str, role: str, part: Any) -> Any:
        return Event(
            invocation_id=f"inv-{t.i}",
            author=author,
            content=types.Content(role=role, parts=[part]),
        )

    call = types.FunctionCall(id=t.call_id, name=TOOL, args=t.arguments)
    response = types.FunctionResponse(id=t.call_id, name=TOOL, response={"result": t.result})
    return [
        event("user", "user", types.Part(text=t.question)),
        event("agent", "model", types.Part(function_call=call)),
        event("agent", "user", types.Part(function_response=response)),
        event("agent", "model", types.Part(text=t.answer)),
    ]


class AdkSessions:
    """``get_session`` (the whole history, as ``Runner.run_async`` reads it), then one
    ``append_event`` per event of the turn, on a ``BaseSessionService``."""

    def __init__(self, service: Any, client: redis.asyncio.Redis, conversation: str) -> None:
        self.service = service
        self.redis = client
        self.ids = {"app_name": "bench", "user_id": "u", "session_id": conversation}
        self.session: Any = None

    async def read(self) -> int:
        self.session = await self.service.get_session(**self.ids)
        if self.session is None:
            ids = dict(self.ids)
            self.session = await self.service.create_session(**ids)
        return len(self.session.events)

    async def append(self, t: Turn) -> None:
        assert self.session is not None, "read() first"
        for event in _adk_events(t):
            await self.service.append_event(self.session, event)

    async def close(self) -> None:
        await self.redis.aclose()


def adk_theirs(url: str, conversation: str) -> AdkSessions:
    """ADK's own ``RedisSessionService`` (google-adk 2.13, ``google.adk.integrations.redis``):
    the whole session as one JSON value, read and written again on every event."""
    try:
        from google.adk.integrations.redis import RedisSessionService
    except ImportError as exc:
        raise Missing(str(exc)) from exc
    client = redis.asyncio.Redis.from_url(url, decode_responses=True)
    return AdkSessions(RedisSessionService(redis_client=client), client, conversation)


def adk_community(url: str, conversation: str) -> AdkSessions:
    """adk-python-community's ``RedisSessionService`` (google-adk-community 0.5): the whole
    session as one JSON value, re-``SET`` on every event. It pins ``redis<6`` and cannot
    be installed next to redis-msglog: run it from ``pip install --no-deps --target DIR
    google-adk-community`` with ``PYTHONPATH=DIR``."""
    try:
        from google.adk_community.sessions.redis_session_service import RedisSessionService
    except ImportError as exc:
        raise Missing(str(exc)) from exc
    service = RedisSessionService(uri=url)
    return AdkSessions(service, service.cache, conversation)


def adk_ours(url: str, conversation: str) -> AdkSessions:
    try:
        from redis_msglog.integrations.google_adk import MessageLogSessionService
    except ImportError as exc:
        raise Missing(str(exc)) from exc
    client = redis.asyncio.Redis.from_url(url)
    return AdkSessions(MessageLogSessionService(client), client, conversation)


@dataclass(frozen=True)
class Contender:
    framework: str
    name: str
    make: Callable[[str, str], Any]  # (url, conversation) -> a contender's handle
    own_store: bool = False  # the framework's own Redis store (the ratio's denominator)
    raw: str = RAW_ASYNC  # the raw baseline of the same flavour (sync or asyncio)


CONTENDERS = [
    Contender("OpenAI Agents SDK", "RedisSession", agents_theirs, own_store=True),
    Contender("OpenAI Agents SDK", "msglog MessageLogSession", agents_ours),
    Contender(
        "LangChain",
        "langchain-community RedisChatMessageHistory",
        langchain_theirs,
        own_store=True,
        raw=RAW_SYNC,
    ),
    Contender("LangChain", "msglog MessageLogChatHistory", langchain_ours, raw=RAW_SYNC),
    Contender("LlamaIndex", "RedisChatStore", LlamaIndexTheirs, own_store=True),
    Contender("LlamaIndex", "msglog MessageLogChatStore", LlamaIndexOurs),
    Contender("Pydantic AI", "msglog RedisConversationStore", PydanticOurs),
    *agent_loop_maf.contenders(Contender, Missing),
    Contender("Google ADK", "RedisSessionService (ADK's own)", adk_theirs, own_store=True),
    Contender("Google ADK", "adk-python-community RedisSessionService", adk_community),
    Contender("Google ADK", "msglog MessageLogSessionService", adk_ours),
    Contender("raw redis-py", RAW_SYNC, RawSync, raw=RAW_SYNC),
    Contender("raw redis-py", RAW_ASYNC, RawAsync),
]


# -- running ------------------------------------------------------------------------------


async def _call(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


@contextlib.contextmanager
def counting_round_trips() -> Iterator[list[int]]:
    """Counts the writes clients make to server sockets (one packed send is one round
    trip; see ``benchmarks.run.capturing_writes``): ``count[0]`` once the block ends."""
    count = [0]
    with capturing_writes() as writes:
        try:
            yield count
        finally:
            count[0] = len(writes)


@dataclass
class Sample:
    seconds: float  # the whole run
    last_tenth_ms: float  # ms per turn at the end: the median of the last tenth's turns
    correct: bool  # every read saw the history so far, 4 messages per turn


async def _loop(contender: Contender, url: str, turns: int) -> Sample:
    """One run: a new conversation, ``turns`` turns of read-then-append."""
    handle = contender.make(url, f"agent-loop-{uuid.uuid4().hex}")
    correct = True
    tail: list[float] = []  # seconds of each of the last tenth of the turns
    try:
        tenth = max(1, turns // 10)
        started = time.perf_counter()
        for i in range(turns):
            turn_started = time.perf_counter()
            seen = await _call(handle.read())
            correct = correct and seen == MESSAGES_PER_TURN * i
            await _call(handle.append(turn(i)))
            if i >= turns - tenth:
                tail.append(time.perf_counter() - turn_started)
        ended = time.perf_counter()
        correct = correct and await _call(handle.read()) == MESSAGES_PER_TURN * turns
    finally:
        await _call(handle.close())
    return Sample(ended - started, statistics.median(tail) * 1e3, correct)


async def _round_trips(contender: Contender, url: str) -> float:
    """Round trips per turn, over ``TRIP_TURNS`` turns after one (scripts load on it)."""
    handle = contender.make(url, f"agent-loop-{uuid.uuid4().hex}")
    try:
        await _call(handle.read())
        await _call(handle.append(turn(0)))
        with counting_round_trips() as count:
            for i in range(1, TRIP_TURNS + 1):
                await _call(handle.read())
                await _call(handle.append(turn(i)))
    finally:
        await _call(handle.close())
    return count[0] / TRIP_TURNS


@dataclass
class Result:
    contender: Contender
    missing: str | None = None
    turns_per_second: list[float] = field(default_factory=list)
    last_tenth_ms: list[float] = field(default_factory=list)
    round_trips: float | None = None
    correct: bool = True

    @property
    def median(self) -> float | None:
        return statistics.median(self.turns_per_second) if self.turns_per_second else None


def measure(url: str, turns: int, runs: int) -> list[Result]:
    """Every contender, run by run in turn (run 1 of each, then run 2...), so that a change
    of the machine's load falls on all of them alike; then round trips per turn."""
    results = [Result(contender) for contender in CONTENDERS]
    for run in range(runs):
        for result in results:
            if result.missing is not None:
                continue
            # What this process holds before the run (four frameworks' modules) is frozen
            # out of the garbage collector's full collections, so that they cost what the
            # contender's own objects make them cost, as in a worker with one framework.
            gc.collect()
            gc.freeze()
            try:
                sample = asyncio.run(_loop(result.contender, url, turns))
            except Missing as exc:
                result.missing = str(exc)
                continue
            result.turns_per_second.append(turns / sample.seconds)
            result.last_tenth_ms.append(sample.last_tenth_ms)
            result.correct = result.correct and sample.correct
        print(f"  run {run + 1} of {runs} done", flush=True)
    for result in results:
        if result.missing is None:
            result.round_trips = asyncio.run(_round_trips(result.contender, url))
    return results


# -- the report -----------------------------------------------------------------------------


def _ratio(value: float | None, base: Result | None) -> str:
    if value is None or base is None or base.median is None:
        return "—"
    return f"{value / base.median:.2f}x"


def markdown(results: list[Result], turns: int, runs: int) -> str:
    by_name = {r.contender.name: r for r in results}
    own = {r.contender.framework: r for r in results if r.contender.own_store}
    lines = [
        f"| framework | store | turns/s | ms/turn, last {max(1, turns // 10)} turns (median) "
        "| round trips/turn | vs the framework's store | vs raw redis-py |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        c = r.contender
        if r.median is None:
            reason = "not installed" if r.missing else "no figure"
            lines.append(f"| {c.framework} | {c.name} | {reason} | | | | |")
            continue
        name = c.name if r.correct else f"{c.name} (**wrong history**)"
        trips = "—" if r.round_trips is None else f"{r.round_trips:g}"
        versus_own = "1.00x" if c.own_store else _ratio(r.median, own.get(c.framework))
        versus_raw = "—" if c.framework == "raw redis-py" else _ratio(r.median, by_name.get(c.raw))
        lines.append(
            f"| {c.framework} | {name} | {r.median:,.0f} | "
            f"{statistics.median(r.last_tenth_ms):.2f} | {trips} | {versus_own} | {versus_raw} |"
        )
    lines.append("")
    lines.append(
        f"{turns} turns of {MESSAGES_PER_TURN} messages (the history reaches "
        f"{turns * MESSAGES_PER_TURN:,} messages); medians of {runs} run(s). Ratios: turns/s "
        "over the framework's own Redis store's, and over raw redis-py of the same flavour "
        "(sync for LangChain, asyncio for the rest); higher is faster."
    )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> list[Result]:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.agent_loop")
    parser.add_argument("--url", help="an existing server (default: start a private one)")
    parser.add_argument("--turns", type=int, help="turns per run (default 200)")
    parser.add_argument("--runs", type=int, help="runs per contender (default 5)")
    parser.add_argument("--quick", action="store_true", help="100 turns, 3 runs")
    parser.add_argument("--smoke", action="store_true", help="4 turns, 1 run (for the tests)")
    parser.add_argument("--markdown", metavar="PATH", help="also write the table here")
    args = parser.parse_args(argv)
    turns, runs = (4, 1) if args.smoke else (100, 3) if args.quick else (200, 5)
    turns = args.turns or turns
    runs = args.runs or runs
    with contextlib.ExitStack() as stack:
        url = server_url(stack, args.url)
        version = redis.Redis.from_url(url).info("server").get("redis_version")
        print(f"agent loop: {turns} turns x {runs} runs, server {version} at {url}", flush=True)
        results = measure(url, turns, runs)
        for result in results:
            if result.missing is not None:
                print(f"  {result.contender.name}: not installed ({result.missing})")
    table = markdown(results, turns, runs)
    print(table)
    if args.markdown:
        with open(args.markdown, "w", encoding="utf-8") as out:
            out.write(table)
    return results


if __name__ == "__main__":
    main()
