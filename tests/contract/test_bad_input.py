"""Bad input gets a clear, typed error and writes nothing, on every backend and shell."""

from __future__ import annotations

import enum
import subprocess
import sys
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any

import pytest

from redis_msglog import (
    AsyncMessageLog,
    CodecError,
    InvalidArgumentError,
    InvalidEditError,
    InvalidMessageError,
    MessageLog,
    MessageLogError,
    MessageTooLargeError,
)

from ..conftest import Env, new_id, require_frameworks


class Color(enum.Enum):
    RED = "red"


def call(args: Any) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": "",
        "toolCalls": [{"id": "c", "name": "f", "args": args}],
    }


INVALID = {
    "unknown role": ({"role": "robot", "content": "x"}, "role"),
    "missing content": ({"role": "user"}, "content"),
    "int content": ({"role": "user", "content": 5}, "content"),
    "bytes content": ({"role": "user", "content": b"x"}, "content"),
    "none content": ({"role": "user", "content": None}, "content"),
    "unknown key": ({"role": "user", "content": "x", "tool_call": "c"}, "tool_call"),
    "tool call without id": (
        {"role": "assistant", "content": "", "toolCalls": [{"name": "f"}]},
        "id",
    ),
    "tool calls not a list": ({"role": "assistant", "content": "", "toolCalls": "f"}, "toolCalls"),
    "int name": ({"role": "user", "content": "x", "name": 7}, "name"),
    "not a mapping": ("user: hello", "expected an AgentMessage or a mapping"),
}

NO_EXACT_JSON = {
    "set": call({1, 2}),
    "object": call(object()),
    "nan": call(float("nan")),
    "infinity": call({"x": float("inf")}),
    "negative infinity": call([float("-inf")]),
    "int beyond 64 bits": call(2**64),
    "negative int beyond 64 bits": call(-(2**63) - 1),
    "tuple": call((1, 2)),
    "uuid": call(uuid.uuid4()),
    "datetime": call(datetime(2024, 1, 1)),
    "enum": call(Color.RED),
    "bytes": call(b"raw"),
    "non-str key": call({1: "x"}),
}
LONE_SURROGATE = "\ud800"


def assert_nothing_written(log: Any, env: Env) -> None:
    assert log.count() == 0
    assert log.all() == []
    assert env.raw.exists(log.keys.seq, log.keys.stream) == 0


@pytest.mark.parametrize("case", sorted(INVALID))
def test_invalid_message_is_rejected_naming_the_field(env: Env, case: str) -> None:
    message, field = INVALID[case]
    log = env.log()
    with pytest.raises(InvalidMessageError, match=field) as info:
        log.append(message)
    assert isinstance(info.value, ValueError) and isinstance(info.value, MessageLogError)
    assert_nothing_written(log, env)


@pytest.mark.parametrize("case", sorted(NO_EXACT_JSON))
def test_value_without_exact_json_raises_codec_error(env: Env, case: str) -> None:
    log = env.log()
    with pytest.raises(CodecError) as info:
        log.append(NO_EXACT_JSON[case])
    assert isinstance(info.value, ValueError) and isinstance(info.value, MessageLogError)
    assert_nothing_written(log, env)


@pytest.mark.parametrize("where", ["content", "name", "args"])
def test_lone_surrogate_raises_codec_error(env: Env, where: str) -> None:
    message: dict[str, Any] = {"role": "user", "content": "ok"}
    if where == "args":
        message = call({"text": LONE_SURROGATE})
    else:
        message[where] = f"x{LONE_SURROGATE}y"
    log = env.log()
    with pytest.raises(CodecError):
        log.append(message)
    assert_nothing_written(log, env)


def test_one_bad_row_rejects_the_whole_batch(env: Env) -> None:
    log = env.log()
    good = {"role": "user", "content": "fine"}
    with pytest.raises(InvalidMessageError, match="message 2: content") as info:
        log.append_many([good, good, {"role": "user", "content": 5}, good])
    assert info.value.index == 2
    with pytest.raises(CodecError, match="message 1"):
        log.append_many([good, call(float("nan"))])
    assert_nothing_written(log, env)


def test_append_many_rejects_a_single_message_or_a_string(env: Env) -> None:
    log = env.log()
    for not_a_batch in ({"role": "user", "content": "x"}, "user", b"user"):
        with pytest.raises(InvalidMessageError, match="sequence of messages"):
            log.append_many(not_a_batch)
    assert_nothing_written(log, env)


def test_message_size_limit(env: Env) -> None:
    log = env.log(max_message_bytes=1000)
    with pytest.raises(MessageTooLargeError, match="max_message_bytes"):
        log.add("user", "x" * 1000)  # the JSON around it pushes it over
    with pytest.raises(MessageTooLargeError):
        log.append_many([{"role": "user", "content": "ok"}, {"role": "user", "content": "é" * 600}])
    assert_nothing_written(log, env)
    assert log.add("user", "x" * 900) == 1


def test_default_size_limit_is_8_mib(env: Env) -> None:
    log = env.log()
    with pytest.raises(MessageTooLargeError, match=str(8 * 1024 * 1024)):
        log.add("user", "x" * (8 * 1024 * 1024))
    assert_nothing_written(log, env)


def test_add_validates_role_and_content(env: Env) -> None:
    log = env.log()
    with pytest.raises(InvalidMessageError, match="role"):
        log.add("moderator", "x")
    with pytest.raises(InvalidMessageError, match="content"):
        log.add("user", 42)
    assert_nothing_written(log, env)


@pytest.mark.parametrize("bad_id", ["", None, 42])
def test_conversation_id_must_be_a_non_empty_string(env: Env, bad_id: Any) -> None:
    with pytest.raises(ValueError, match="conversation id"):
        MessageLog(env.raw, bad_id)
    with pytest.raises(ValueError, match="conversation id"):
        AsyncMessageLog(env.make_async_client(), bad_id)


@pytest.mark.parametrize(
    "bad",
    [
        {"prefix": ""},
        {"prefix": "a{b"},
        {"page_size": 0},
        {"max_message_bytes": -1},
        {"page_size": True},
    ],
)
def test_bad_options_are_rejected(env: Env, bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        MessageLog(env.raw, "c", **bad)


@pytest.mark.parametrize("shell", [MessageLog, AsyncMessageLog])
def test_options_after_on_append_are_keyword_only(env: Env, shell: type[Any]) -> None:
    """``MessageLog(r, "conv", "myprefix")`` once committed under the default prefix, then
    failed calling the string; now it fails at once and writes nothing."""
    client = env.make_sync_client() if shell is MessageLog else env.make_async_client()
    with pytest.raises(TypeError, match="on_append must be callable"):
        shell(client, "conv", "myprefix")
    with pytest.raises(TypeError):
        shell(client, "conv", None, "myprefix")  # prefix is keyword-only
    assert env.raw.keys("*myprefix*") == [] and env.raw.keys("*{conv}*") == []


def test_validate_checks_like_append_many_and_sends_nothing(env: Env) -> None:
    log = env.log(max_message_bytes=100)
    messages = log.validate([{"role": "user", "content": "a"}, {"role": "tool", "content": "b"}])
    assert [(m.role, m.content) for m in messages] == [("user", "a"), ("tool", "b")]
    with pytest.raises(InvalidMessageError, match="message 1"):
        log.validate([{"role": "user", "content": "a"}, {"role": "robot", "content": "b"}])
    with pytest.raises(MessageTooLargeError):
        log.validate([{"role": "user", "content": "x" * 200}])
    assert log.page_size == 1000
    assert env.raw.exists(log.keys.seq, log.keys.stream) == 0


# -- every bad argument raises a typed error -------------------------


@pytest.mark.parametrize(
    "call",
    [
        lambda log: log.retract(4),
        lambda log: log.retract(None),
        lambda log: log.replace(None),
        lambda log: log.append_many(5),
        lambda log: log.read(after=None),
        lambda log: log.last(-1),
        lambda log: log.all(view="everything"),
        lambda log: log.follow(after="0"),  # a resume id: with drafts=True only
        lambda log: log.set_attrs([("k", "v")]),
        lambda log: log.last_tokens(10, None),
    ],
    ids=["retract-int", "retract-none", "replace-none", "append_many-int", "read-none",
         "last-negative", "all-view", "follow-str", "set_attrs-list", "last_tokens-none"],
)  # fmt: skip
def test_bad_arguments_raise_a_message_log_error(env: Env, call: Callable[[Any], Any]) -> None:
    """``retract(4)`` raised TypeError, ``read(after=None)`` ValueError: not a
    MessageLogError. The argument errors are also TypeError and ValueError."""
    log = env.log()
    with pytest.raises(MessageLogError) as info:
        call(log)
    assert isinstance(info.value, ValueError)
    if isinstance(info.value, InvalidArgumentError):
        assert isinstance(info.value, TypeError)
    assert_nothing_written(log, env)


@pytest.mark.parametrize("where", ["conversation", "prefix", "idempotency_key", "attr name"])
def test_lone_surrogate_in_a_name_raises_invalid_argument(env: Env, where: str) -> None:
    """A lone surrogate in a conversation id, prefix or idempotency key raised a bare
    UnicodeEncodeError from redis-py's encoder."""
    bad = f"a{LONE_SURROGATE}b"
    unique = new_id()
    conversation = unique + bad if where == "conversation" else unique
    options = {"prefix": bad} if where == "prefix" else {}
    with pytest.raises(InvalidArgumentError, match="UTF-8"):
        log = env.log(conversation, **options)
        if where == "idempotency_key":
            log.add("user", "x", idempotency_key=bad)
        elif where == "attr name":
            log.set_attrs({bad: "v"})
        else:
            log.add("user", "x")
    assert env.raw.keys(f"*{unique}*") == []


def test_huge_seqs_are_printed_exactly(env: Env) -> None:
    """Seqs were printed as ``1e+20`` (Python side) and ``1e+14`` (in the append
    script's messages); now exactly, and one beyond any log is refused before sending."""
    log = env.log()
    log.add("user", "x")
    with pytest.raises(InvalidEditError, match="100000000000000000000 is beyond any log"):
        log.retract([10**20])
    with pytest.raises(InvalidEditError, match="seq 100000000000001 is not in the log"):
        log.retract([10**14 + 1])
    with pytest.raises(InvalidEditError, match="seq 123456789012345 is not in the log"):
        log.archive(123456789012345)
    with pytest.raises(InvalidArgumentError, match=r"got 100000000000000000000$"):
        log.read(after=10**20)
    assert log.count() == 1


FRAMEWORK_MISSING = """
import importlib.abc, sys
class Missing(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == sys.argv[1]:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, Missing())
from redis_msglog import MessageLogError, MissingExtraError
try:
    exec(sys.argv[2])
except MissingExtraError as exc:
    assert isinstance(exc, ImportError) and isinstance(exc, MessageLogError)
    print(exc)
"""


@pytest.mark.parametrize(
    ("framework", "extra", "code"),
    [
        ("langchain_core", "langchain", "import redis_msglog as m; m.from_langchain([])"),
        ("langchain_core", "langchain", "import redis_msglog.integrations.langchain"),
        ("agents", "openai-agents", "import redis_msglog.integrations.openai_agents"),
        ("llama_index", "llama-index", "import redis_msglog.integrations.llama_index"),
        ("pydantic_ai", "pydantic-ai", "import redis_msglog.integrations.pydantic_ai"),
        ("strands", "strands", "import redis_msglog.integrations.strands"),
    ],
)
def test_a_missing_framework_names_the_extra(framework: str, extra: str, code: str) -> None:
    """``from_langchain`` without langchain raised a bare ModuleNotFoundError."""
    if ".integrations." in code:
        require_frameworks()  # an integration imports its whole framework first
    done = subprocess.run(
        [sys.executable, "-c", FRAMEWORK_MISSING, framework, code],
        capture_output=True,
        text=True,
        check=True,
    )
    assert f"pip install 'redis-msglog[{extra}]'" in done.stdout
    assert done.stdout.startswith(f"{framework} is not installed")
