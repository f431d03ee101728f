"""Hostile content, generated.

Messages a model or an attacker could produce (deep and huge JSON values, tool-call
``arguments`` that are deep, malformed or huge, every part kind, blob references known
and unknown, ids and names of lone surrogates, NULs, controls and astral characters)
go through every write path: ``append``, ``append_many`` (also with a caller's key and
``expected_seq``), ``compact``, ``replace``,
a draft's writer, ``msglog import``, the LangChain history and the Agents SDK session,
and the lifecycle writes (a trim under the hostile rows, a redaction of one and a
hostile replacement for another, ``max_age`` trimming in the same call, a
``before_append`` filter returning them, an erasure after them). Each case is
either refused at write with a :class:`MessageLogError` and nothing written (``DUMP`` of
every key under the case's prefix is the same before and after), or readable by every
read, view, exporter, integration read and ``msglog`` command, with no exception at
all and no traceback.

Rows can also reach Redis without the write path (an older version, ``redis-cli
XADD``): :func:`test_hand_written_rows_degrade_to_typed_errors` writes them directly,
and every reader must then return or raise a :class:`MessageLogError`; every command
exits 0 or with one line; and retracting the row makes the view readable again.

Budget: a fixed number of examples, derandomized (the same cases every run; hypothesis
prints the failing example), on one real server (redis; valkey with ``HOSTILE_BACKEND``).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis
import redis.asyncio
from click.testing import CliRunner
from hypothesis import HealthCheck, Phase, event, example, given, settings
from hypothesis import strategies as st

from redis_msglog import MAX_JSON_DEPTH, MessageLog, MessageLogError, adapters
from redis_msglog._cli import main
from redis_msglog.integrations.langchain import MessageLogChatHistory
from redis_msglog.integrations.llama_index import MessageLogChatStore, to_llama_index
from redis_msglog.integrations.openai_agents import MessageLogSession
from redis_msglog.models import _FEW_BRACKETS, AgentMessage
from redis_msglog.testing import EphemeralServer

from ..conftest import SERVER_ARGS, require_binary

pytestmark = [pytest.mark.hostile, pytest.mark.frameworks]

EXAMPLES = int(os.environ.get("HOSTILE_EXAMPLES", "30"))
SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    database=None,
    # No shrinking: a failure is reported as generated, within the same fixed budget.
    phases=[Phase.explicit, Phase.generate],
)
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256))  # the blob every case's conversation holds
PNG_DIGEST = hashlib.sha256(PNG).hexdigest()


@pytest.fixture(scope="module")
def server() -> Iterator[EphemeralServer]:
    """A server of this module's own, emptied by each case (``Case``): a case's ``DUMP`` of
    every key scans its own few keys, never a shared keyspace that grows with the suite."""
    kind = os.environ.get("HOSTILE_BACKEND", "redis")
    server = EphemeralServer(require_binary(kind), SERVER_ARGS).start()
    yield server
    server.stop()


# -- strategies ------------------------------------------------------------------------

ODD_TEXTS = [
    "",
    "\x00",
    "a\x00b",
    "\ud800",  # a lone surrogate: no UTF-8 form
    "x\udfffy",
    "\x1b[2J\x1b]0;title\x07",
    "\u202eevil\u202c",
    "😀",
    "\U0010ffff\uffff",
    "é" * 3,
    " ",
    "\n\t\r",
    '"\\',
    "{[,:]}",
]


def texts(max_size: int = 20) -> st.SearchStrategy[str]:
    """Any text: every code point (surrogates too), the odd ones above, and huge ones."""
    return st.one_of(
        st.sampled_from(ODD_TEXTS),
        st.text(st.characters(codec=None, exclude_categories=()), max_size=max_size),
        st.builds(lambda c, n: c * n, st.sampled_from(["x", "😀", "\x00", "["]), st.just(120_000)),
    )


def deep(depth: int, kind: str) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value] if kind == "list" else {"k": value}
    return value


DEPTHS = [1, MAX_JSON_DEPTH - 1, MAX_JSON_DEPTH, MAX_JSON_DEPTH + 1, 300, 1010]

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    texts(),
)
json_values = st.one_of(
    st.recursive(
        scalars,
        lambda children: (
            st.lists(children, max_size=3) | st.dictionaries(texts(8), children, max_size=3)
        ),
        max_leaves=8,
    ),
    st.builds(deep, st.sampled_from(DEPTHS), st.sampled_from(["list", "dict"])),
)
objects = st.dictionaries(texts(8), json_values, max_size=3)


def _json_text(value: Any) -> str:
    try:
        return orjson.dumps(value).decode()
    except (TypeError, ValueError):
        return "{"


arguments = st.one_of(
    json_values.map(_json_text),
    st.builds(
        lambda d, kind: "[" * d + "]" * d if kind == "list" else '{"k":' * d + "1" + "}" * d,
        st.sampled_from(DEPTHS),
        st.sampled_from(["list", "dict"]),
    ),
    st.sampled_from(['{"a": [1, 2', "not json", "", "[" * 2000, '{"q": "' + "y" * 200_000 + '"}']),
    texts(),
)
tool_calls = st.fixed_dictionaries(
    {"id": texts(), "name": texts()},
    optional={"args": json_values, "arguments": arguments, "extras": objects},
)
media_sources = st.one_of(
    st.fixed_dictionaries({"data": st.sampled_from([b"", PNG, bytes(40_000)])}),
    st.fixed_dictionaries({"url": texts()}),
    st.fixed_dictionaries({"file_id": texts()}),
    st.just({"blob": PNG_DIGEST}),  # a digest this conversation holds
    st.just({"blob": hashlib.sha256(b"nowhere").hexdigest()}),  # one it does not (item 1)
)
parts = st.one_of(
    st.fixed_dictionaries({"type": st.just("text"), "text": texts()}),
    st.builds(
        lambda kind, source, media: {"type": kind, **source, **media},
        st.sampled_from(["image", "audio", "file"]),
        media_sources,
        st.fixed_dictionaries({}, optional={"media_type": texts(), "extras": objects}),
    ),
    st.fixed_dictionaries({"type": st.just("refusal"), "refusal": texts()}),
    st.fixed_dictionaries(
        {"type": st.just("thinking"), "thinking": texts()}, optional={"signature": texts()}
    ),
    st.fixed_dictionaries({"type": st.just("redacted_thinking"), "data": texts()}),
    st.fixed_dictionaries(
        {"type": st.just("reasoning")},
        optional={"id": texts(), "summary": st.lists(texts(), max_size=2)},
    ),
    st.fixed_dictionaries({"type": texts(8)}),  # an unknown kind
)
messages = st.fixed_dictionaries(
    {
        "role": st.sampled_from(["system", "user", "assistant", "tool"]),
        "content": st.one_of(texts(), st.lists(parts, max_size=3)),
    },
    optional={
        "name": texts(),
        "toolCalls": st.lists(tool_calls, max_size=2),
        "toolCallId": texts(),
        "id": texts(),
        "metadata": objects,
        "extras": objects,
    },
)

WRITES = [
    "append",
    "append_many",
    "keyed",  # a caller's key and expected_seq: lua/append_keyed.lua (append.lua with blobs)
    "compact",
    "replace",
    "import",
    "append_openai",
    "langchain",
    "openai_agents",
    "llama_index",
    # the lifecycle writes: each must leave every reader working
    "trim",
    "redact",
    "redact_with",
    "before_append",
    "erase",
]


# -- one case --------------------------------------------------------------------------


class Case:
    """A conversation under a prefix of its own, seeded with two messages (one holding
    the blob ``PNG``), and the raw client that looks at its keys."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.prefix = f"hc-{uuid.uuid4().hex[:10]}"
        self.conversation = f"c-{uuid.uuid4().hex[:8]}"
        self.raw = redis.Redis.from_url(url)
        self.raw.flushall()  # the module's own server (the fixture above)
        self.log = self.new_log()
        image = {"type": "image", "data": PNG, "media_type": "image/png"}
        self.log.append_many(
            [{"role": "user", "content": [image]}, {"role": "assistant", "content": "ok"}]
        )

    def new_log(self) -> MessageLog:
        client = redis.Redis.from_url(self.url)
        return MessageLog(client, self.conversation, prefix=self.prefix, blob_threshold=64)

    def dump(self) -> dict[bytes, bytes | None]:
        keys = sorted(self.raw.scan_iter(match=f"{self.prefix}:*", count=1000))
        return {key: self.raw.dump(key) for key in keys}

    def cli(self, *args: str) -> Any:
        argv = ["--url", self.url, "--prefix", self.prefix, *args]
        return CliRunner().invoke(main, argv)


def _write(case: Case, how: str, msgs: list[dict[str, Any]], tmp: Path) -> None:
    """Write ``msgs`` by ``how``: returns, or raises (a MessageLogError, if correct)."""
    log = case.log
    if how == "append":
        log.append(msgs[0])
    elif how in ("append_many", "keyed"):
        keyed = how == "keyed"  # a caller's key and expected_seq: lua/append_keyed.lua
        log.append_many(
            msgs,
            idempotency_key="hostile" if keyed else None,
            expected_seq=log.count() if keyed else None,
        )
    elif how == "compact":
        log.compact(msgs, through_seq=1)
    elif how == "replace":
        log.replace(msgs)
    elif how == "import":
        _import(case, msgs, tmp)
    elif how == "append_openai":
        log.append_openai(adapters.to_openai([AgentMessage.model_validate(m) for m in msgs]))
    elif how == "langchain":
        converted = adapters.to_langchain_messages([AgentMessage.model_validate(m) for m in msgs])
        MessageLogChatHistory(case.conversation, case.raw, prefix=case.prefix).add_messages(
            converted
        )
    elif how == "openai_agents":
        items = adapters.to_responses([AgentMessage.model_validate(m) for m in msgs])
        asyncio.run(_agents_add(case, items))
    elif how == "llama_index":
        chat = [to_llama_index(AgentMessage.model_validate(m)) for m in msgs]
        asyncio.run(_llama_add(case, chat))
    else:
        _lifecycle_write(case, how, msgs)


def _lifecycle_write(case: Case, how: str, msgs: list[dict[str, Any]]) -> None:
    """The writes that remove or rewrite: a trim of the seed rows under the hostile ones
    (the blob ``PNG`` may still be referred to by them), an append by a log whose
    ``max_age`` trims the seeds in the same call, a ``before_append`` filter that
    returns the hostile messages for harmless ones (its result is checked like an
    input), and an erasure after the hostile rows were written."""
    log = case.log
    if how == "trim":
        log.append_many(msgs)
        log.trim(2)
    elif how == "redact":  # the first hostile row redacted, the others kept
        first = log.append_many(msgs) - len(msgs) + 1
        log.redact(first, reason="hostile")
    elif how == "redact_with":  # a hostile replacement for the seed row "ok"
        log.redact(2, msgs[0])
    elif how == "max_age":
        time.sleep(1.05)  # the seeds are older than max_age (1 s at least) when these come
        aged = MessageLog(
            case.raw, case.conversation, prefix=case.prefix, max_age=timedelta(seconds=1)
        )
        aged.append_many(msgs)
        assert aged.read(0)[0].seq > 2, "max_age did not trim the seed rows"
    elif how == "before_append":
        hostile = iter(msgs)
        filtered = MessageLog(
            case.raw,
            case.conversation,
            prefix=case.prefix,
            before_append=lambda batch: [next(hostile) for _ in batch],
        )
        filtered.append_many([{"role": "user", "content": "plain"} for _ in msgs])
    elif how == "erase":
        log.append_many(msgs)
        log.erase(erased_for=timedelta(seconds=30))
        assert case.new_log().all() == []


def _import(case: Case, msgs: list[dict[str, Any]], tmp: Path) -> None:
    path = tmp / f"{uuid.uuid4().hex}.jsonl"
    lines = []
    for msg in msgs:
        try:  # stdlib json: writes lone surrogates as \\ud800 escapes, as a file could
            lines.append(json.dumps({k: _jsonable(v) for k, v in msg.items()}))
        except (RecursionError, ValueError):
            lines.append('{"role": "user", "content": [[[[')  # unwritable: a broken line
    path.write_text("\n".join(lines) + "\n", encoding="utf-8", errors="surrogatepass")
    result = case.cli("import", str(path), case.conversation)
    _assert_one_line(result, "import")
    if result.exit_code != 0:
        raise MessageLogError(result.output)  # refused: the caller checks nothing changed


def _jsonable(value: Any) -> Any:
    if isinstance(value, bytes):
        import base64

        return base64.b64encode(value).decode()
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    return value


async def _agents_add(case: Case, items: list[Any]) -> None:
    client = redis.asyncio.Redis.from_url(case.url)
    try:
        session = MessageLogSession(case.conversation, client, prefix=case.prefix)
        await session.add_items(items)
    finally:
        await client.aclose()


# -- every read ------------------------------------------------------------------------


def _library_reads(case: Case) -> Iterator[tuple[str, Callable[[], Any]]]:
    log = case.new_log()
    yield "all", log.all
    yield "all again (the cache)", log.all
    yield "all refs", lambda: log.all(blobs="refs")
    yield "all physical", lambda: log.all(view="physical")
    yield "read", lambda: log.read(0)
    yield "read paged", lambda: log.read(1, limit=1)
    yield "last", lambda: log.last(3)
    yield "last physical", lambda: log.last(3, view="physical")
    yield "count", log.count
    yield "last_turns", lambda: log.last_turns(2)
    yield "last_tokens", lambda: log.last_tokens(10_000, lambda m: len(m.text))
    yield "to_openai", log.to_openai
    yield "to_anthropic", log.to_anthropic
    yield "anthropic_system", log.anthropic_system
    yield "to_responses", log.to_responses
    yield "to_langchain", log.to_langchain
    yield "to_langchain_messages", log.to_langchain_messages
    yield (
        "langchain history",
        lambda: (
            MessageLogChatHistory(
                case.conversation, redis.Redis.from_url(case.url), prefix=case.prefix
            ).messages
        ),
    )
    yield "agents session", lambda: asyncio.run(_agents_items(case))
    yield "llama_index store", lambda: asyncio.run(_llama_messages(case))


async def _agents_items(case: Case) -> Any:
    client = redis.asyncio.Redis.from_url(case.url)
    try:
        return await MessageLogSession(case.conversation, client, prefix=case.prefix).get_items()
    finally:
        await client.aclose()


async def _llama_add(case: Case, messages: list[Any]) -> None:
    client = redis.asyncio.Redis.from_url(case.url)
    try:
        await MessageLogChatStore(client, prefix=case.prefix).add_messages(
            case.conversation, messages
        )
    finally:
        await client.aclose()


async def _llama_messages(case: Case) -> Any:
    client = redis.asyncio.Redis.from_url(case.url)
    try:
        return await MessageLogChatStore(client, prefix=case.prefix).get_messages(case.conversation)
    finally:
        await client.aclose()


COMMANDS = [
    ["show", "{c}"],
    ["show", "{c}", "--json"],
    ["show", "{c}", "--physical"],
    ["show", "{c}", "--last", "2"],
    ["tail", "{c}"],
    ["tail", "{c}", "--json"],
    ["export", "{c}"],
    *(
        ["export", "{c}", "--format", fmt]
        for fmt in ("openai", "responses", "anthropic", "langchain")
    ),
    ["verify", "{c}"],
    ["verify", "--all"],
    ["stats", "{c}"],
    ["stats"],
    ["ls"],
    ["ls", "--json"],
]


def _assert_one_line(result: Any, what: str) -> None:
    """A command's outcome is exit 0, or exit 1 with one line on stderr: no traceback,
    no exception escaping click, no internal error."""
    assert "Traceback" not in result.output, f"{what}: {result.output}"
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        f"{what} raised {result.exception!r}"
    )
    assert result.exit_code in (0, 1), f"{what}: exit {result.exit_code}: {result.output}"
    assert "internal error" not in result.output, f"{what}: {result.output}"
    if result.exit_code == 1 and not what.startswith("verify"):
        assert len(result.stderr.strip().splitlines()) == 1, f"{what}: {result.stderr}"


def _read_everything(case: Case, *, strict: bool, erased: bool = False) -> list[str]:
    """Run every read and command; ``strict``: each must succeed (an accepted write),
    else each must succeed or raise a MessageLogError (a hand-written row). Returns
    the reads that raised a MessageLogError."""
    typed = []
    for name, read in _library_reads(case):
        try:
            read()
        except MessageLogError as exc:
            if strict:
                raise AssertionError(f"{name} failed on an accepted write: {exc!r}") from exc
            typed.append(name)
    for command in COMMANDS:
        args = [a.replace("{c}", case.conversation) for a in command]
        result = case.cli(*args)
        what = " ".join(command)
        _assert_one_line(result, what)
        if strict and erased and command[0] in ("show", "tail", "export"):
            # reading an erased conversation says so (exit 1), as for an unknown one
            assert result.exit_code == 1 and "was erased" in result.output, result.output
        elif strict:
            assert result.exit_code == 0, f"{what} failed on an accepted write: {result.output}"
        elif result.exit_code:
            typed.append(what)
    return typed


def _check(case: Case, how: str, msgs: list[dict[str, Any]], tmp: Path) -> None:
    before = case.dump()
    try:
        _write(case, how, msgs, tmp)
    except MessageLogError as exc:
        event(f"refused: {type(exc).__name__}")
        assert case.dump() == before, f"{how} was refused but wrote"
        return
    event("accepted")  # then everything reads it, fully
    _read_everything(case, strict=True, erased=how == "erase")


# Cases found before (always run, first): the LlamaIndex store's read raised TypeError on
# a redacted thinking part; arguments 1,010 levels deep (the case) broke `all()`
# twice, every exporter and `msglog show`; 120,000 NULs took `msglog show` 4 s.
FOUND = [
    [{"role": "assistant", "content": [{"type": "redacted_thinking", "data": "opaque"}]}],
    [
        {
            "role": "assistant",
            "content": "",
            "toolCalls": [{"id": "c1", "name": "f", "arguments": "[" * 1010 + "]" * 1010}],
        }
    ],
    [{"role": "user", "content": "\x00" * 120_000}],
    # Owned by the write side refused there once it is merged.
    [{"role": "user", "content": [{"type": "image", "blob": hashlib.sha256(b"-").hexdigest()}]}],
    [{"role": "user", "content": "m", "metadata": {"m": deep(MAX_JSON_DEPTH + 1, "dict")}}],
    # An image URL LlamaIndex's ImageBlock refuses (a NUL in it) broke the store's reads.
    [{"role": "system", "name": "", "content": [{"type": "image", "url": "a\x00b"}]}],
]


@pytest.mark.parametrize("how", WRITES)
@SETTINGS
@given(msgs=st.lists(messages, min_size=1, max_size=2))
@example(msgs=FOUND[0])
@example(msgs=FOUND[1])
@example(msgs=FOUND[2])
@example(msgs=FOUND[3])
@example(msgs=FOUND[4])
@example(msgs=FOUND[5])
def test_hostile_messages_are_refused_or_read_by_everything(
    server: EphemeralServer, tmp_path_factory: pytest.TempPathFactory, how: str, msgs: Any
) -> None:
    """Each write path with generated hostile messages: refused (typed, nothing
    written) or readable by every read, exporter, integration and command."""
    if how in ("append_openai", "langchain", "openai_agents", "llama_index"):
        # These take a provider's or framework's messages: the hostile message is first
        # rendered by our exporter (which may itself refuse it: a typed error).
        try:
            [AgentMessage.model_validate(m) for m in msgs]
        except ValueError:
            return
    _check(Case(server.url), how, msgs, tmp_path_factory.mktemp("hostile"))


@settings(SETTINGS, max_examples=max(EXAMPLES // 5, 2))
@given(msgs=st.lists(messages, min_size=1, max_size=2))
def test_hostile_messages_written_by_a_log_with_max_age(
    server: EphemeralServer, tmp_path_factory: pytest.TempPathFactory, msgs: Any
) -> None:
    """``max_age`` trims the seed rows (one holding the blob) in the same call that
    writes hostile ones: refused with nothing written, or read by everything. Fewer
    examples: each waits the 1 s that ``max_age`` takes at least."""
    _check(Case(server.url), "max_age", msgs, tmp_path_factory.mktemp("hostile"))


def _write_drafts(case: Case, msgs: list[dict[str, Any]]) -> None:
    """Each message written as a draft: its text parts, then its tool calls' arguments."""
    for message in msgs:
        content = message.get("content")
        parts = content if isinstance(content, list) else [{"type": "text", "text": content}]
        with case.log.draft(message.get("role")) as draft:  # type: ignore[arg-type]
            for part in parts:
                if isinstance(part, dict) and part.get("type") == "text":
                    draft.write(part.get("text"))  # type: ignore[arg-type]
            for call in message.get("toolCalls") or ():
                draft.write_tool_call(call.get("id"), call.get("name"), call.get("arguments"))


@settings(SETTINGS, max_examples=max(EXAMPLES // 2, 2))
@given(msgs=st.lists(messages, min_size=1, max_size=2))
def test_hostile_messages_written_as_drafts_are_refused_or_read_by_everything(
    server: EphemeralServer, msgs: Any
) -> None:
    """A draft of hostile text, names and arguments: it commits, or a bad piece is
    refused (typed) and the draft ends as its writer's block failed (interrupted, what
    was written kept, or no message); either way no draft is left open, nothing is
    written outside the conversation, and everything reads what was committed."""
    case = Case(server.url)
    try:
        _write_drafts(case, msgs)
        event("accepted")
    except MessageLogError as exc:
        event(f"refused: {type(exc).__name__}")
    assert case.log.drafts() == []
    _read_everything(case, strict=True)


def test_the_depth_constant_models_uses_is_the_limit() -> None:
    """models.parse_arguments's quick check must not let a deeper text through."""
    assert _FEW_BRACKETS <= MAX_JSON_DEPTH


# -- rows written by hand --------------------------------------------------------------


def _body(doc: Any) -> bytes:
    return json.dumps(doc, separators=(",", ":")).encode()  # orjson stops at 254 levels


def _call(**fields: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": "", "toolCalls": [{"id": "c1", "name": "f", **fields}]}


def _deep_text(depth: int) -> str:
    return "[" * depth + "]" * depth


HAND_WRITTEN: dict[str, bytes] = {
    "arguments 300 deep": _body(_call(arguments=_deep_text(300))),
    "arguments 1,010 deep": _body(_call(arguments=_deep_text(1010))),
    "arguments 5,000 deep": _body(_call(arguments=_deep_text(5000))),
    "args 200 deep": _body(_call(args=deep(200, "list"))),
    "args 1,010 deep": b'{"role":"assistant","content":"","toolCalls":[{"id":"c","name":"f","args":'
    + _deep_text(1010).encode()
    + b"}]}",
    "args and arguments disagree, deep": b'{"role":"assistant","content":"","toolCalls":[{"id":"c",'
    b'"name":"f","args":'
    + _deep_text(900).encode()
    + b',"arguments":"'
    + _deep_text(900).encode()
    + b'"}]}',
    "metadata 65 deep": _body(
        {"role": "user", "content": "m", "metadata": {"m": deep(64, "dict")}}
    ),
    "metadata 1,010 deep": b'{"role":"user","content":"m","metadata":{"m":'
    + _deep_text(1010).encode()
    + b"}}",
    "extras 300 deep": _body(
        {"role": "user", "content": "m", "extras": {"openai": deep(300, "list")}}
    ),
    "part extras 300 deep": _body(
        {"role": "user", "content": [{"type": "text", "text": "t", "extras": deep(300, "dict")}]}
    ),
    "body 1,100 deep": b'{"role":"user","content":"m","metadata":{"m":'
    + _deep_text(1100).encode()
    + b"}}",
    "a lone surrogate escaped": b'{"role":"user","content":"a\\ud800b"}',
    "a lone surrogate in an id": b'{"role":"tool","content":"r","toolCallId":"\\udfff",'
    b'"name":"\\ud800"}',
    "NUL and controls": b'{"role":"user","content":"\\u0000\\u001b[2J\\u202e"}',
    "unknown part type": _body({"role": "user", "content": [{"type": "hologram", "x": 1}]}),
    "unknown blob": _body(
        {"role": "user", "content": [{"type": "image", "blob": hashlib.sha256(b"no").hexdigest()}]}
    ),
    "bad base64": _body({"role": "user", "content": [{"type": "image", "data": "!!!"}]}),
    "huge int": b'{"role":"user","content":"m","metadata":{"n":123456789012345678901234567890}}',
    "huge float": b'{"role":"user","content":"m","metadata":{"f":1e400}}',
    "NaN": b'{"role":"user","content":"m","metadata":{"f":NaN}}',
    "unknown role": _body({"role": "developer", "content": "m"}),
    "content a number": _body({"role": "user", "content": 5}),
    "not an object": b"[1, 2]",
    "not JSON": b'{"role": "user", "content": ',
    "empty": b"",
    "not UTF-8": b'{"role":"user","content":"\xff\xfe"}',
    "huge arguments": _body(_call(arguments='{"q": "' + "y" * 300_000 + '"}')),
    "args of a lone surrogate": b'{"role":"assistant","content":"","toolCalls":[{"id":"c",'
    b'"name":"f","arguments":"\\"\\\\ud800\\""}]}',
    "duplicate keys": b'{"role":"user","content":"a","content":"b"}',
}


@pytest.mark.parametrize("name", list(HAND_WRITTEN))
def test_hand_written_rows_degrade_to_typed_errors(server: EphemeralServer, name: str) -> None:
    """A row XADDed by hand (or by an older version) after two good ones, the counter
    moved with it: every reader returns or raises a MessageLogError, every command
    exits 0 or with one line."""
    case = Case(server.url)
    keys = case.log.keys
    at = int(case.raw.time()[0]) * 1_000_000 + 1
    case.raw.xadd(keys.stream, {"msg": HAND_WRITTEN[name]}, id=f"3-{at}")
    case.raw.set(keys.seq, 3)
    if _read_everything(case, strict=False):  # some read refused the row: the remedy works
        case.new_log().retract([3])
        assert [m.seq for m in case.new_log().all()] == [1, 2]
