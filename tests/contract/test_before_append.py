"""A log's write filter, ``before_append`` (docs/lifecycle.md, "Filtering writes"): it
rewrites the messages of every write (appends, compactions, replacements, imports, the
integrations) or refuses it, and then nothing is written. Every backend, both clients."""

from __future__ import annotations

import io
import re
from collections.abc import Callable, Sequence
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from redis_msglog import AgentMessage, InvalidArgumentError, InvalidMessageError, MessageLog
from redis_msglog.admin import import_jsonl

from ..conftest import Env, new_id, require_frameworks

CARD = re.compile(r"\b\d{4}(?: ?\d{4}){3}\b")


class Vetoed(Exception):
    """The filter's own refusal."""


def scrub(messages: list[AgentMessage]) -> list[AgentMessage]:
    assert all(isinstance(m, AgentMessage) for m in messages)  # validated first
    out = []
    for msg in messages:
        if isinstance(msg.content, str) and "VETO" in msg.content:
            raise Vetoed(msg.content)
        text = CARD.sub("[card]", msg.content) if isinstance(msg.content, str) else msg.content
        out.append(msg.model_copy(update={"content": text}))
    return out


def user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


SECRET = "pay with 4111 1111 1111 1111 please"
CLEAN = "pay with [card] please"

WRITES: dict[str, Callable[[Any, list[dict[str, str]]], Any]] = {
    "append": lambda log, msgs: [log.append(m) for m in msgs],
    "add": lambda log, msgs: [log.add(m["role"], m["content"]) for m in msgs],
    "append_many": lambda log, msgs: log.append_many(msgs),
    "compact": lambda log, msgs: log.compact(msgs, through_seq=0),
    "replace": lambda log, msgs: log.replace(msgs),
    "append_many_keyed": lambda log, msgs: log.append_many(msgs, idempotency_key="k"),
}


@pytest.mark.parametrize("write", sorted(WRITES))
def test_every_write_is_scrubbed_or_vetoed(env: Env, write: str) -> None:
    log = env.log(before_append=scrub)
    WRITES[write](log, [user(SECRET), user("fine")])
    assert [r.content for r in log.all()] == [CLEAN, "fine"]
    assert SECRET not in str(env.raw.xrange(log.keys.stream))
    before = env.raw.xrange(log.keys.stream)
    with pytest.raises(Vetoed):  # the filter's own exception, unchanged
        vetoed = [user("VETO this")] if write in ("add", "append") else [user("ok"), user("VETO")]
        WRITES[write](log, vetoed)
    assert env.raw.xrange(log.keys.stream) == before  # nothing written


def test_a_bad_result_is_an_invalid_message_naming_the_filter(env: Env) -> None:
    results: list[Any] = [
        "not a list",
        [],
        [user("one"), user("two")],
        [{"role": "wizard", "content": "x"}],
        [{"role": "user", "content": 3}],
        None,
    ]
    for result in results:
        log = env.log(before_append=lambda messages, result=result: result)
        with pytest.raises(InvalidMessageError, match="before_append"):
            log.add("user", "x")
        assert env.raw.exists(log.keys.stream) == 0


def test_a_filter_that_is_not_callable_is_refused_at_construction(env: Env) -> None:
    with pytest.raises(InvalidArgumentError, match="before_append must be callable"):
        env.log(before_append="scrub")


def test_edits_without_messages_and_fork_copies_are_not_filtered(env: Env) -> None:
    calls: list[list[str]] = []

    def spy(messages: list[AgentMessage]) -> Sequence[AgentMessage]:
        calls.append([str(m.content) for m in messages])
        return messages

    log = env.log(before_append=spy)
    log.append_many([user("a"), user("b")])
    log.set_attrs({"title": "t"})
    log.archive(1)
    log.retract([2])
    log.pop()
    log.clear()
    log.append(user("c"))
    fork = log.fork(new_id())
    assert calls == [["a", "b"], ["c"]]
    copy = env.log(fork.conversation)
    assert [r.content for r in copy.all()] == ["c"]
    log.validate([user("not filtered")])
    assert calls == [["a", "b"], ["c"]]


def test_imports_are_filtered(env: Env) -> None:
    if env.flavor == "async":
        pytest.skip("import_jsonl takes a sync log")
    lines = b"".join(
        orjson.dumps({"seq": i + 1, "role": "user", "content": text}) + b"\n"
        for i, text in enumerate([SECRET, "fine"])
    )
    log = env.log(before_append=scrub)
    import_jsonl(log, io.BytesIO(lines))
    assert [r.content for r in log.all()] == [CLEAN, "fine"]
    vetoed = env.log(before_append=scrub)
    with pytest.raises(Exception, match="VETO"):
        import_jsonl(vetoed, io.BytesIO(orjson.dumps(user("VETO")) + b"\n"))
    assert vetoed.count() == 0


def test_an_integration_is_filtered(env: Env) -> None:
    if env.flavor == "async" or env.backend not in ("valkey", "fakeredis"):
        pytest.skip("one integration, sync, on two backends")
    require_frameworks()
    from langchain_core.messages import HumanMessage

    from redis_msglog.integrations.langchain import MessageLogChatHistory

    conversation = new_id()
    history = MessageLogChatHistory(conversation, env.make_sync_client(), before_append=scrub)
    history.add_messages([HumanMessage(SECRET)])
    assert [r.content for r in MessageLog(env.make_sync_client(), conversation).all()] == [CLEAN]
    with pytest.raises(Vetoed):
        history.add_messages([HumanMessage("VETO")])


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.text(max_size=40), min_size=1, max_size=4))
def test_the_filter_sees_and_rewrites_any_text(env: Env, texts: list[str]) -> None:
    def upper(messages: list[AgentMessage]) -> list[dict[str, str]]:
        return [{"role": "user", "content": str(m.content).upper()} for m in messages]

    log = env.log(before_append=upper)
    log.append_many([user(t) for t in texts])
    assert [r.content for r in log.all()] == [t.upper() for t in texts]
