"""Erasing a scope: ``Directory.erase`` erases every conversation of a
scope and its sub-scopes and their index, refuses new conversations in it while its
tombstone stands, and is idempotent; ``log.erase`` of a scoped conversation takes it out
of its listings; ``msglog erase --scope`` asks first. Every backend, both clients."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
import redis

from redis_msglog import (
    ConversationErasedError,
    Directory,
    InvalidArgumentError,
    MessageLog,
    ScopeErasedError,
)
from redis_msglog._core.lifecycle.scope import ScopeKeys
from redis_msglog.testing import EphemeralServer

from ..conftest import Env
from .test_cli_tools import msglog
from .test_scopes import directory, listed


def tenant() -> str:
    return f"t{uuid.uuid4().hex[:10]}"


def keys_of(env: Env, conversation: str) -> list[str]:
    """Every key of the conversation's hash tag that exists (one scan per node)."""
    found = env.raw.scan_iter(match=f"*{{{conversation}}}*", count=1000)
    return sorted(k.decode() if isinstance(k, bytes) else k for k in found)


def test_a_scope_and_its_sub_scopes_are_erased_and_nothing_else(env: Env) -> None:
    top = tenant()
    inside = [env.log(scope=(top, "a")) for _ in range(3)]
    inside += [env.log(scope=(top, "a", "x")) for _ in range(2)]
    outside = env.log(scope=(top, "b"))
    for log in [*inside, outside]:
        log.append_many([{"role": "user", "content": "my card is 4111"}] * 2)
        log.add("user", "again", idempotency_key="k")
    erased = directory(env).erase((top, "a"), erased_for=timedelta(minutes=5))
    assert sorted(erased) == sorted(log.conversation for log in inside)
    for log in inside:
        assert keys_of(env, log.conversation) == [log.keys.seq]  # the tombstone alone
        assert log.count() == 0 and log.all() == []
        with pytest.raises(ConversationErasedError, match="Nothing was written"):
            log.add("user", "back?")
    names = ScopeKeys.build("msglog", (top, "a", "x"))
    assert env.raw.exists(*names.all_indexes()[1:]) == 0  # (top, a) and (top, a, x): gone
    assert listed(directory(env), (top, "a")) == []
    assert [c.conversation for c in listed(directory(env), (top,))] == [outside.conversation]
    assert outside.count() == 3
    late = env.log(scope=(top, "a", "y"))  # a new conversation in the erased scope
    with pytest.raises(ScopeErasedError, match="Nothing was written"):
        late.add("user", "x")
    assert keys_of(env, late.conversation) == []  # not even its owner record
    env.log(scope=(top, "c")).add("user", "a sibling scope is not erased")
    assert directory(env).erase((top, "a")) == []  # idempotent: nothing left


def test_an_interrupted_scope_erasure_is_finished_by_running_it_again(env: Env) -> None:
    top = tenant()
    logs = [env.log(scope=(top,)) for _ in range(3)]
    for log in logs:
        log.add("user", "hi")
    logs[0]._erase(timedelta(hours=1))  # as if a scope erasure died right after this
    env.raw.set(ScopeKeys.build("msglog", (top,)).tombstone(), "1")
    assert sorted(directory(env).erase((top,))) == sorted(log.conversation for log in logs)
    assert listed(directory(env), (top,)) == []


def test_erasing_a_scoped_conversation_takes_it_out_of_its_listings(env: Env) -> None:
    top = tenant()
    log, other = env.log(scope=(top, "u")), env.log(scope=(top, "u"))
    log.add("user", "hi")
    other.add("user", "hi")
    log.erase()
    assert [c.conversation for c in listed(directory(env), (top,))] == [other.conversation]
    assert env.raw.zcard(ScopeKeys.build("msglog", (top, "u")).index()) == 1


@pytest.mark.parametrize(
    "bad",
    [(), ("a/b",), "acme", None, ("",)],
)
def test_a_bad_scope_erases_nothing(env: Env, bad: Any) -> None:
    with pytest.raises(InvalidArgumentError):
        directory(env).erase(bad)


@pytest.mark.parametrize("bad", [timedelta(milliseconds=999), 60, None])
def test_a_bad_erased_for_erases_nothing(env: Env, bad: Any) -> None:
    top = tenant()
    log = env.log(scope=(top,))
    log.add("user", "hi")
    with pytest.raises(InvalidArgumentError, match="erased_for"):
        directory(env).erase((top,), erased_for=bad)
    assert log.count() == 1
    assert env.raw.exists(ScopeKeys.build("msglog", (top,)).tombstone()) == 0


@pytest.fixture
def url(shared_server: Callable[[str], EphemeralServer]) -> str:
    return shared_server("valkey").url


def test_msglog_erases_a_scope_only_when_told_yes(url: str) -> None:
    top = tenant()
    log = MessageLog(redis.Redis.from_url(url), f"{top}:c1", scope=(top, "u"))
    log.add("user", "hi")
    refused = msglog(url, "erase", "--scope", f"{top}/u", input=b"y\n")
    assert refused.returncode != 0 and b"needs --yes" in refused.stderr
    assert log.count() == 1
    both = msglog(url, "erase", log.conversation, "--scope", f"{top}/u", "--yes")
    assert both.returncode != 0 and log.count() == 1
    bad = msglog(url, "erase", "--scope", f"{top}//u", "--yes")
    assert bad.returncode != 0 and b"--scope" in bad.stderr
    done = msglog(url, "erase", "--scope", f"{top}/u", "--yes")
    assert done.returncode == 0, done.stderr
    assert b"1 conversations" in done.stdout
    assert log.count() == 0
    assert Directory(redis.Redis.from_url(url)).list((top,)).conversations == []
