"""Every public call, given hostile arguments, works or raises a MessageLogError, and a
call that raises writes nothing.

The calls are enumerated, not picked: every public method of both shells (from their
signatures), every callable of ``redis_msglog.__all__``, the admin functions, the
integrations' constructors and the testing helpers; ``test_every_public_callable_is_
covered`` fails when one is added without a case here. Each parameter of each call gets
fixed hostile values of every type (None, bools, ints of both signs and beyond 64 bits,
floats with NaN and infinities, bytes, strings with lone surrogates, NULs and braces,
lists, dicts, objects, deep nesting) and then values drawn by hypothesis (derandomized:
the same values on every run). Calls that take a client run against a real server
(``real_backend``), on a database of their own: the whole keyspace is compared (``DUMP``
of every key) before and after each call that raises.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import math
import reprlib
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import redis_msglog
from redis_msglog import AsyncMessageLog, MessageLog, MessageLogError, admin, testing
from redis_msglog.testing import EphemeralServer

from ..conftest import SyncView, require_binary

DB = 9  # no other test uses it: the keyspace compared is this module's alone


def deep(depth: int) -> Any:
    value: Any = "x"
    for _ in range(depth):
        value = [value]
    return value


FIXED: list[Any] = [
    None, True, False, 0, -1, 1, 2**63, 10**20, -(10**20), 1.5, math.nan, math.inf,
    -math.inf, b"", b"\xff", "", "\ud800", "a\x00b", "{x}", "*?[", " ",
    [], [None], [0], [1, 1], [10**20], ["x"], [{}], (), {}, {"\ud800": "v"}, {"k": 1},
    {1: 2}, object(), timedelta(seconds=-1), timedelta.max, deep(3000), {"k": deep(3000)},
]  # fmt: skip
"""Hostile values of every type, tried on every parameter of every call."""

SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(),
    st.binary(max_size=6),
    st.text(st.characters(codec=None), max_size=6),  # lone surrogates included
)
HOSTILE = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.one_of(st.text(max_size=3), st.integers()), inner, max_size=3),
    ),
    max_leaves=6,
)
DRAWN = 10  # hypothesis examples per parameter, on top of FIXED


@dataclass
class Ctx:
    """What a case calls into: a seeded conversation on a real server, for one shell."""

    client: redis.Redis
    async_client: redis.asyncio.Redis
    loop: asyncio.AbstractEventLoop
    shell: str
    conversation: str
    tmp: Path
    url: str
    seeded: dict[bytes, bytes | None] | None = None  # the keyspace, seeded and untouched

    def log(self, **options: Any) -> Any:
        if self.shell == "sync":
            return MessageLog(self.client, self.conversation, **options)
        return SyncView(AsyncMessageLog(self.async_client, self.conversation, **options), self.loop)

    def new_log(self, **args: Any) -> Any:
        shell = MessageLog if self.shell == "sync" else AsyncMessageLog
        return shell(**args)

    def shell_client(self) -> Any:
        return self.client if self.shell == "sync" else self.async_client

    def run(self, value: Any) -> Any:
        return self.loop.run_until_complete(value) if inspect.isawaitable(value) else value


def message() -> dict[str, Any]:
    return {"role": "user", "content": "hi"}


# Valid values of each parameter of the shells' methods, by name: a case fuzzes one
# parameter and passes these for the required others.
VALID: dict[str, Callable[[Ctx], Any]] = {
    "role": lambda c: "user",
    "content": lambda c: "hi",
    "msg": lambda c: message(),
    "msgs": lambda c: [message()],
    "messages": lambda c: [message()],
    "items": lambda c: [],
    "turns": lambda c: [],
    "seqs": lambda c: [1],
    "through_seq": lambda c: 1,
    "seq": lambda c: 1,
    "new_conversation": lambda c: f"fork-{uuid.uuid4().hex[:8]}",
    "n": lambda c: 1,
    "budget": lambda c: 10,
    "count_tokens": lambda c: lambda m: 1,
    "callback": lambda c: lambda rows: None,
    "attrs": lambda c: {"k": "v"},
    "draft_id": lambda c: "0" * 32,  # a draft that does not exist: no deltas
}


def public_methods(cls: type) -> list[str]:
    return sorted(
        name
        for name, member in inspect.getmembers(cls)
        if not name.startswith("_") and callable(member) and not isinstance(member, type)
    )


LOG_METHODS = public_methods(MessageLog)
assert public_methods(AsyncMessageLog) == LOG_METHODS


def method_params(name: str) -> list[str]:
    return list(_parameters(name))


def _parameters(name: str) -> dict[str, inspect.Parameter]:
    signature = inspect.signature(getattr(MessageLog, name))
    return {p: v for p, v in signature.parameters.items() if p != "self"}


def required(name: str) -> list[str]:
    return [p for p, v in _parameters(name).items() if v.default is inspect.Parameter.empty]


METHOD_CASES = [(name, param) for name in LOG_METHODS for param in method_params(name)]


def call_method(ctx: Ctx, name: str, fuzzed: str, value: Any) -> Any:
    kwargs = {fuzzed: value}
    for param in required(name):
        if param != fuzzed:
            kwargs[param] = VALID[param](ctx)
    result = ctx.run(getattr(ctx.log(), name)(**kwargs))
    if hasattr(result, "close") and callable(result.close):  # a subscription
        ctx.run(result.close())
    if inspect.isasyncgen(result):
        ctx.run(result.aclose())
    return result


SHELL_OPTIONS = [
    p for p in inspect.signature(MessageLog.__init__).parameters if p not in ("self", "redis")
]


def call_constructor(ctx: Ctx, fuzzed: str, value: Any) -> Any:
    """The shell built with one hostile argument, then used: a bad option must fail at
    once or never."""
    args: dict[str, Any] = {"redis": ctx.shell_client(), "conversation": ctx.conversation}
    args[fuzzed] = value
    log = ctx.new_log(**args)
    view = log if ctx.shell == "sync" else SyncView(log, ctx.loop)
    view.add("user", "hi")
    return view.all()


def messages_of(value: Any) -> Any:
    return value


# The callables of redis_msglog.__all__, admin and testing that are not the shells,
# each with the call that passes one hostile argument (by parameter name).
def module_calls(ctx: Ctx) -> dict[str, Callable[[str, Any], Any]]:
    client = ctx.client

    def kw(function: Callable[..., Any], valid: dict[str, Any]) -> Callable[[str, Any], Any]:
        return lambda param, value: function(**{**valid, param: value})

    def consume(function: Callable[..., Any], valid: dict[str, Any]) -> Callable[[str, Any], Any]:
        return lambda param, value: list(function(**{**valid, param: value}))

    def import_file(param: str, value: Any) -> Any:
        path = ctx.tmp / "import.jsonl"
        path.write_text('{"role": "user", "content": "imported"}\n')
        valid: dict[str, Any] = {"log": MessageLog(client, ctx.conversation), "source": path}
        return admin.import_jsonl(**{**valid, param: value})

    keys = redis_msglog.ConversationKeys
    conv = {"client": client, "prefix": "msglog", "conversation": ctx.conversation}
    return {
        "configure_read_cache": kw(
            redis_msglog.configure_read_cache, {"client": client, "max_bytes": 1000}
        ),
        "acl_rules": kw(redis_msglog.acl_rules, {"prefix": "msglog"}),
        "acl_rules_for": kw(redis_msglog.acl_rules_for, {"client": client, "prefix": "msglog"}),
        "ConversationKeys.build": kw(keys.build, {"prefix": "msglog", "conversation": "c"}),
        "RetryPolicy": kw(redis_msglog.RetryPolicy, {}),
        "Durability": kw(redis_msglog.Durability, {"replicas": 1}),
        "LogView": kw(redis_msglog.LogView, {}),
        "LogView.apply": lambda param, value: redis_msglog.LogView().apply(value),
        **{
            name: kw(getattr(redis_msglog, name), {"messages": []})
            for name in (
                "to_openai",
                "to_anthropic",
                "to_langchain",
                "to_responses",
                "to_langchain_messages",
                "anthropic_system",
                "from_openai",
                "from_langchain",
            )
        },
        "from_responses": kw(redis_msglog.from_responses, {"items": []}),
        "from_anthropic": kw(redis_msglog.from_anthropic, {"messages": []}),
        "list_conversations": consume(admin.list_conversations, {"client": client}),
        "conversation_stats": kw(admin.conversation_stats, conv),
        "verify_conversation": kw(admin.verify_conversation, conv),
        "require_conversation": kw(
            admin.require_conversation,
            {
                "client": client,
                "keys": keys.build("msglog", ctx.conversation),
                "conversation": ctx.conversation,
            },
        ),
        "import_jsonl": import_file,
        "find_server_binary": kw(testing.find_server_binary, {}),
        "EphemeralServer": kw(EphemeralServer, {"binary": "redis-server"}),
        "EphemeralCluster": kw(testing.EphemeralCluster, {"binary": "redis-server"}),
        **directory_calls(ctx),
    }


def directory_calls(ctx: Ctx) -> dict[str, Callable[[str, Any], Any]]:
    """The directory's calls (AsyncDirectory is generated from the same source)."""
    directory = redis_msglog.Directory(ctx.client)
    scoped = {"conversation": ctx.conversation, "scope": ("t",)}

    def kw(function: Callable[..., Any], valid: dict[str, Any]) -> Callable[[str, Any], Any]:
        return lambda param, value: function(**{**valid, param: value})

    return {
        "Directory": kw(redis_msglog.Directory, {"redis": ctx.client}),
        "Directory.list": kw(directory.list, {"scope": ("t",)}),
        "Directory.walk": lambda param, value: list(directory.walk(**{param: value})),
        "Directory.register": kw(directory.register, scoped),
        "Directory.owner": kw(directory.owner, {"conversation": ctx.conversation}),
        "Directory.unindex": kw(
            directory.unindex, {**scoped, "created_at": datetime.now(timezone.utc)}
        ),
    }


def module_params(name: str) -> list[str]:
    if name == "LogView.apply":
        return ["entry"]
    target: Any = {
        "ConversationKeys.build": redis_msglog.ConversationKeys.build,
        "list_conversations": admin.list_conversations,
        "conversation_stats": admin.conversation_stats,
        "verify_conversation": admin.verify_conversation,
        "require_conversation": admin.require_conversation,
        "import_jsonl": admin.import_jsonl,
        "find_server_binary": testing.find_server_binary,
        "EphemeralServer": EphemeralServer,
        "EphemeralCluster": testing.EphemeralCluster,
    }.get(name)
    if target is None and name.startswith("Directory."):
        target = getattr(redis_msglog.Directory, name.split(".")[1])
    target = target or getattr(redis_msglog, name)
    return [p for p in inspect.signature(target).parameters if p not in ("self", "cls")]


MODULE_NAMES = [
    "configure_read_cache", "acl_rules", "acl_rules_for", "ConversationKeys.build", "RetryPolicy",
    "Durability", "LogView", "LogView.apply", "to_openai", "to_anthropic", "to_langchain",
    "to_responses", "to_langchain_messages", "anthropic_system", "from_openai",
    "from_langchain", "from_responses", "from_anthropic", "list_conversations",
    "conversation_stats", "verify_conversation", "require_conversation", "import_jsonl",
    "find_server_binary", "EphemeralServer", "EphemeralCluster", "Directory",
    "Directory.list", "Directory.walk", "Directory.register", "Directory.owner",
    "Directory.unindex",
]  # fmt: skip
MODULE_CASES = [(name, param) for name in MODULE_NAMES for param in module_params(name)]


def integration_targets() -> dict[str, Callable[..., Any]]:
    from redis_msglog.integrations import langchain as lc
    from redis_msglog.integrations import llama_index as li
    from redis_msglog.integrations import migrate as mg
    from redis_msglog.integrations import openai_agents as oa
    from redis_msglog.integrations import pydantic_ai as pa

    classes: list[Any] = [
        lc.MessageLogChatHistory, lc.MessageLogMiddleware, li.MessageLogChatStore,
        li.MessageLogBaseChatStore, oa.MessageLogSession, pa.RedisConversationStore,
    ]  # fmt: skip
    targets: dict[str, Callable[..., Any]] = {}
    for cls in classes:
        targets[cls.__name__] = cls
        targets[f"{cls.__name__}.from_url"] = cls.from_url
    for module in (li, pa, mg):
        for name in module.__all__:
            if inspect.isfunction(getattr(module, name)):
                targets[name] = getattr(module, name)
    return targets


INTEGRATION_TARGETS = integration_targets()
LOG_OPTION_PARAMS = ["ttl", "page_size", "unknown_option"]  # through **log_options


def integration_params(name: str) -> list[str]:
    parameters = inspect.signature(INTEGRATION_TARGETS[name]).parameters.values()
    named = [p.name for p in parameters if p.kind is not p.VAR_KEYWORD and p.name != "self"]
    takes_options = any(p.kind is p.VAR_KEYWORD for p in parameters)
    return named + (LOG_OPTION_PARAMS if takes_options else [])


def integration_call(ctx: Ctx, name: str) -> Callable[[str, Any], Any]:
    clients: dict[str, Any] = {"redis": ctx.client, "async_redis": ctx.async_client}
    if name in ("MessageLogChatStore", "MessageLogSession", "RedisConversationStore"):
        clients = {"redis": ctx.async_client}
    valid: dict[str, Any] = {
        "MessageLogChatHistory": {"session_id": "s", **clients},
        "MessageLogMiddleware": clients,
        "MessageLogChatStore": clients,
        "MessageLogSession": {"session_id": "s", **clients},
        "RedisConversationStore": clients,
        "MessageLogChatHistory.from_url": {"session_id": "s", "url": ctx.url},
        "MessageLogSession.from_url": {"session_id": "s", "url": ctx.url},
        "import_from": {"name": "openai-agents", "redis": ctx.client, "ids": ["s"]},
        "import_from_redis_session": {"redis": ctx.client, "session_ids": ["s"]},
        "import_from_redis_chat_message_history": {"redis": ctx.client, "session_ids": ["s"]},
        "import_from_redis_chat_store": {"redis": ctx.client, "keys": ["s"]},
    }.get(name, {"url": ctx.url} if name.endswith(".from_url") else {})
    target = INTEGRATION_TARGETS[name]
    return lambda param, value: target(**{**valid, param: value})


INTEGRATION_CASES = [(n, p) for n in INTEGRATION_TARGETS for p in integration_params(n)]

# -- the check ------------------------------------------------------------------------


def keyspace(client: redis.Redis) -> dict[bytes, bytes | None]:
    """Every key of the module's database with its ``DUMP`` (two round trips)."""
    keys: list[Any] = client.keys("*")  # the module's own database: a handful of keys
    pipe = client.pipeline(transaction=False)
    for key in keys:
        pipe.dump(key)
    return dict(zip(keys, pipe.execute(), strict=True))


def check(ctx: Ctx, call: Callable[[Any], Any], value: Any) -> None:
    """``call(value)`` works, or raises a MessageLogError and leaves the keyspace as it
    was. The seeded conversation is made again only after a call that worked (and so may
    have written)."""
    if ctx.seeded is None:
        ctx.client.flushdb()
        seed = MessageLog(ctx.client, ctx.conversation)
        seed.append_many([message(), {"role": "assistant", "content": "yo"}])
        ctx.seeded = keyspace(ctx.client)
    try:
        call(value)
    except MessageLogError:
        after = keyspace(ctx.client)
        assert after == ctx.seeded, f"raised after writing, given {shown(value)}"
        return
    except Exception as exc:
        raise AssertionError(
            f"{type(exc).__name__} (not a MessageLogError) given {shown(value)}: {exc}"
        ) from exc
    ctx.seeded = None


def shown(value: Any) -> str:
    return reprlib.repr(value)


def run_all(ctx: Ctx, call: Callable[[Any], Any]) -> None:
    for value in FIXED:
        check(ctx, call, value)

    @settings(
        max_examples=DRAWN,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(HOSTILE)
    def drawn(value: Any) -> None:
        check(ctx, call, value)

    drawn()


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, EphemeralServer]]:
    started: dict[str, EphemeralServer] = {}
    yield started
    for server in started.values():
        server.stop()


@pytest.fixture(params=["sync", "async"])
def ctx(
    request: pytest.FixtureRequest,
    real_backend: str,
    servers: dict[str, EphemeralServer],
    tmp_path: Path,
) -> Iterator[Ctx]:
    if real_backend not in servers:
        servers[real_backend] = EphemeralServer(require_binary(real_backend)).start()
    url = servers[real_backend].url.replace("/0", f"/{DB}")
    loop = asyncio.new_event_loop()
    client = redis.Redis.from_url(url)
    async_client = redis.asyncio.Redis.from_url(url)
    yield Ctx(client, async_client, loop, request.param, "conv-{x}%", tmp_path, url)
    loop.run_until_complete(async_client.aclose())
    loop.close()
    client.close()


@pytest.mark.parametrize(("method", "param"), METHOD_CASES)
def test_log_methods(ctx: Ctx, method: str, param: str) -> None:
    run_all(ctx, lambda value: call_method(ctx, method, param, value))


@pytest.mark.parametrize("param", SHELL_OPTIONS)
def test_log_constructor(ctx: Ctx, param: str) -> None:
    run_all(ctx, lambda value: call_constructor(ctx, param, value))


# Calls that are the same in both shells, checked in Python before any I/O: one server.
once = [
    pytest.mark.parametrize("ctx", ["sync"], indirect=True),
    pytest.mark.parametrize("real_backend", ["redis"]),
]


@once[0]
@once[1]
@pytest.mark.parametrize(("name", "param"), MODULE_CASES)
def test_module_callables(ctx: Ctx, name: str, param: str) -> None:
    call = module_calls(ctx)[name]
    run_all(ctx, lambda value: call(param, value))


@once[0]
@once[1]
@pytest.mark.parametrize(("name", "param"), INTEGRATION_CASES)
def test_integration_entry_points(ctx: Ctx, name: str, param: str) -> None:
    call = integration_call(ctx, name)
    run_all(ctx, lambda value: call(param, value))


def test_every_public_callable_is_covered() -> None:
    """A public callable added without a case here fails this test."""
    results = {
        "AgentMessage", "StoredMessage", "ToolCall", "EditEntry", "Entry", "Attributes",
        "AudioPart", "ContentPart", "FilePart", "ImagePart", "ReasoningPart",
        "RedactedThinkingPart", "RefusalPart", "TextPart", "ThinkingPart", "Subscription",
        "AsyncSubscription", "Role", "View", "MessageView", "ConversationPage",
        "ScopedConversation", "ScopeErasure", "SkippedEntry", "Usage", "Draft", "DraftStarted",
        "DraftDelta", "DraftEnded", "DraftEvent", "DraftOutcome",
    }  # fmt: skip
    constants = {"DEFAULT_READ_CACHE_BYTES", "DEFAULT_RETRY", "NO_RETRY", "MAX_JSON_DEPTH"}
    shells = {"MessageLog", "AsyncMessageLog", "AsyncDirectory"}  # the last: as Directory
    covered = {name.split(".")[0] for name in MODULE_NAMES} | results | constants | shells
    errors = {n for n in redis_msglog.__all__ if n.endswith(("Error", "Warning"))}
    assert set(redis_msglog.__all__) - errors - covered == set()
    admin_functions = {n for n in admin.__all__ if inspect.isfunction(getattr(admin, n))}
    assert admin_functions <= covered
    assert set(testing.__all__) <= covered
    for module in ("langchain", "llama_index", "migrate", "openai_agents", "pydantic_ai"):
        names = importlib.import_module(f"redis_msglog.integrations.{module}").__all__
        values = {"FORMAT", "SOURCES", "ImportedKey"} | {n for n in names if n.endswith("Error")}
        assert set(names) - values <= set(INTEGRATION_TARGETS), module
    for name in LOG_METHODS:
        for param in method_params(name):
            assert param in VALID or param not in required(name), f"{name}({param}=) has no case"
