"""Erasing one conversation (docs/lifecycle.md, "Erasing a conversation"): every key it
has deleted in one atomic call, a tombstone left for ``erased_for`` that refuses every
write and reads as an empty log, and the id free again afterwards. Every backend
(cluster and ACL included), both clients."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from redis_msglog import (
    AsyncMessageLog,
    ConversationErasedError,
    ConversationKeys,
    InvalidArgumentError,
    MessageLog,
    admin,
)
from redis_msglog._core.lifecycle import erase as _erase
from redis_msglog._core.lifecycle.erase import conversation_keys

from ..conftest import Env, new_id

BIG = bytes(range(256)) * 1200  # over the blob threshold: stored off the row


def user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


def keys_of(env: Env, conversation: str) -> list[str]:
    """Every key of ``conversation`` (a SCAN of its hash tag, on every node)."""
    tag = "{" + conversation + "}"
    found = env.raw.scan_iter(match=f"*{tag}*", count=1000)
    return sorted({k.decode() if isinstance(k, bytes) else k for k in found})


def full_log(env: Env, **options: Any) -> Any:
    """A conversation with every kind of key: stream, counter, blobs, view and hidden
    (an edit), producers, attributes, idempotency records and an owner record."""
    log = env.log(**options)
    log.add("user", "hello")
    log.append(
        {"role": "user", "content": [{"type": "image", "data": BIG, "media_type": "image/png"}]}
    )
    log.append(user("keyed"), idempotency_key="k1")
    log.append_many([user("a"), user("b")], idempotency_key="k2")
    log.retract([1])
    log.set_attrs({"title": "secret"})
    # The scope helper's owner record: written by hand here.
    env.raw.hset(log.keys.owner, mapping={"scope": "acme/user-42", "created_at": "1"})
    # A draft being written (its state, feed and delta stream), as a crashed writer left it.
    drafts = log._core.drafts
    log._run(drafts.open_plan("d" * 32, "t" * 32, "assistant", None, 60_000, True))
    log._run(drafts.write_plan("d" * 32, "t" * 32, 0, [b'{"k":"t","v":"half an ans"}']))
    return log


def test_erase_deletes_every_key_and_leaves_only_the_tombstone(env: Env) -> None:
    log = full_log(env)
    keys = log.keys
    before = keys_of(env, log.conversation)
    assert {keys.stream, keys.seq, keys.blobs, keys.view, keys.hidden, keys.owner} <= set(before)
    assert {keys.drafts, keys.draft_feed, keys.draft("d" * 32)} <= set(before)
    assert keys.idempotency_record("k1") in before
    log.erase()
    assert keys_of(env, log.conversation) == [keys.seq]
    assert env.raw.get(keys.seq) == b"erased"
    assert 0 < env.raw.pttl(keys.seq) <= 24 * 3600 * 1000


def test_every_key_of_a_conversation_is_erased() -> None:
    """Every field of ConversationKeys but the pub/sub channel is a key erase deletes: a
    key added later is erased too."""
    keys = ConversationKeys.build("msglog", "c")
    names = conversation_keys(keys)
    assert names[:2] == [keys.seq, keys.owner]
    fields = {f for f in keys.__slots__ if f != "channel"}
    assert set(names) == {getattr(keys, f) for f in fields}


def test_reads_of_an_erased_conversation_are_empty(env: Env) -> None:
    log = full_log(env)
    log.all()  # warm the read cache: it must not serve the erased rows
    log.erase()
    other = env.log(log.conversation)  # a fresh object: no cache, no edits seen
    for reader in (log, other):
        assert reader.count() == 0
        assert reader.all() == [] and reader.read() == [] and reader.last() is None
        assert reader.last(5) == [] and reader.read(after=4) == []
        assert reader.all(view="physical") == [] and reader.read(after=3, view="physical") == []
        for view in ("visible", "active", "archived", "physical"):
            assert reader.count(view=view) == 0
        assert reader.read(view="active") == [] and reader.last(3, view="archived") == []
        attrs = reader.attrs()
        assert attrs.values == {} and attrs.last_seq == 0
        assert reader.last_turns(2) == []


def test_every_write_into_an_erased_conversation_is_refused(env: Env) -> None:
    log = full_log(env)
    log.erase()
    attempts: list[Callable[[], Any]] = [
        lambda: log.add("user", "again"),
        lambda: log.append(user("x"), idempotency_key="k1"),  # a replay of an erased record
        lambda: log.append_many([user("a"), user("b")], idempotency_key="k2"),
        lambda: log.append(user("x"), expected_seq=0),
        lambda: log.retract([1]),
        lambda: log.pop(),
        lambda: log.compact([user("summary")], through_seq=1),
        lambda: log.replace([user("new")]),
        lambda: log.clear(),
        lambda: log.archive(1),
        lambda: log.set_attrs({"title": "back"}),
    ]
    for attempt in attempts:
        with pytest.raises(ConversationErasedError, match="erased"):
            attempt()
    source = env.log()
    source.add("user", "elsewhere")
    with pytest.raises(ConversationErasedError):
        source.fork(log.conversation)
    assert keys_of(env, log.conversation) == [log.keys.seq]
    assert ConversationErasedError.__doc__ and ConversationErasedError.__doc__.startswith(
        "Nothing was written."
    )


def test_a_record_left_behind_by_an_erasure_replays_nothing(env: Env) -> None:
    """A keyed call committed just before an erasure may leave its record behind (the
    erasure deletes the records it finds): its replay is refused as erased, not
    answered from the record, in every script that takes a key."""
    log = env.log()
    log.append(user("x"), idempotency_key="k1")
    log.append(user("y"), idempotency_key="k2", expected_seq=1)
    held = {key: env.raw.get(log.keys.idempotency_record(key)) or b"" for key in ("k1", "k2")}
    assert all(held.values())
    log.erase()
    for key, value in held.items():  # the stragglers, as a racing commit leaves them
        env.raw.set(log.keys.idempotency_record(key), value, px=60_000)
    usage = {"input_tokens": 1, "output_tokens": 1}
    replays: list[Callable[[], Any]] = [
        lambda: log.append(user("x"), idempotency_key="k1"),  # lua/append_keyed.lua
        lambda: log.append(user("y"), idempotency_key="k2", expected_seq=1),
        lambda: log.append(user("x") | {"usage": usage}, idempotency_key="k1"),  # append.lua
    ]
    for replay in replays:
        with pytest.raises(ConversationErasedError):
            replay()
    assert env.raw.get(log.keys.seq) == b"erased"


def test_erase_is_idempotent_and_reports_the_owner(env: Env) -> None:
    log = full_log(env)
    erasure = log._erase(timedelta(hours=1))  # what Directory.erase builds on
    assert erasure.owner == {"scope": "acme/user-42", "created_at": "1"}
    assert erasure.deleted >= 6
    again = log._erase(timedelta(hours=2))  # erased already: refreshes the tombstone
    assert again.owner == {} and again.deleted == 0
    assert env.raw.pttl(log.keys.seq) > 3600 * 1000
    never = env.log()
    never.erase(erased_for=timedelta(seconds=30))  # never created: reserved all the same
    assert keys_of(env, never.conversation) == [never.keys.seq]
    with pytest.raises(ConversationErasedError):
        never.add("user", "x")


def test_the_id_is_free_again_when_the_tombstone_expires(env: Env) -> None:
    log = full_log(env)
    log.erase(erased_for=timedelta(seconds=1))
    with pytest.raises(ConversationErasedError):
        log.add("user", "too soon")
    deadline = time.monotonic() + 5
    while env.raw.exists(log.keys.seq) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert log.add("user", "a new conversation") == 1
    assert [r.content for r in log.all()] == ["a new conversation"]
    assert env.log(log.conversation).attrs().values == {}


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    st.one_of(
        st.timedeltas(max_value=timedelta(milliseconds=999)),
        st.integers(),
        st.floats(allow_nan=True),
        st.none(),
        st.text(max_size=5),
        st.just(True),
    )
)
def test_a_bad_erased_for_is_refused_and_erases_nothing(env: Env, erased_for: Any) -> None:
    log = env.log()
    log.add("user", "kept")
    with pytest.raises(InvalidArgumentError, match="erased_for"):
        log.erase(erased_for=erased_for)
    assert log.count() == 1


@settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.timedeltas(min_value=timedelta(seconds=1), max_value=timedelta(days=3650)))
def test_any_erased_for_of_a_second_or_more_is_the_tombstones_life(
    env: Env, erased_for: timedelta
) -> None:
    log = env.log()
    log.add("user", "gone")
    log.erase(erased_for=erased_for)
    life = env.raw.pttl(log.keys.seq)
    wanted = erased_for // timedelta(milliseconds=1)
    assert wanted - 5000 < life <= wanted


def test_a_follower_of_an_erased_conversation_gets_nothing_new(env: Env) -> None:
    if env.flavor == "async":
        alog = AsyncMessageLog(env.make_async_client(socket_timeout=0.3), new_id())

        async def follow_after_erasure() -> list[Any]:
            await alog.add("user", "one")
            rows: list[Any] = []

            async def consume() -> None:
                async for row in alog.follow(after=1):
                    rows.append(row)

            task = asyncio.ensure_future(consume())
            await asyncio.sleep(0.2)
            await alog.erase()
            await asyncio.sleep(0.8)  # several idle waits: each checks its position
            assert not task.done()  # no error: it waits for nothing
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await alog._redis.aclose()
            return rows

        assert env.loop.run_until_complete(follow_after_erasure()) == []
        return
    client = env.make_sync_client(socket_timeout=0.3)
    log = MessageLog(client, new_id())
    log.add("user", "one")
    got: list[Any] = []
    subscription = log.subscribe(got.extend, after=1)
    log.erase()
    time.sleep(0.8)  # several idle waits: each checks the entry at its position
    subscription.close()  # raises the follower's error, if it met one
    assert got == []


def test_an_erased_conversation_is_erased_on_the_wrong_type_too(env: Env) -> None:
    """Keys set by hand to other types are deleted all the same."""
    log = env.log()
    env.raw.set(log.keys.owner, "not a hash")
    env.raw.hset(log.keys.seq, "x", "1")
    log.erase()
    assert keys_of(env, log.conversation) == [log.keys.seq]


def test_the_operator_tools_see_no_conversation_after_an_erasure(env: Env) -> None:
    if env.flavor == "async" or env.backend == "acl":
        pytest.skip("the tools take a sync client (the ACL backend's raw one is the admin)")
    log = full_log(env)
    log.erase()
    listed = [info.conversation for info in admin.list_conversations(env.raw, "msglog")]
    assert log.conversation not in listed
    report = admin.verify_conversation(env.raw, "msglog", log.conversation)
    assert report.problems == [] and report.last_seq == 0


@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.text(alphabet="ab*?[]\\{}%:-^!", min_size=1, max_size=6))
def test_erasing_an_id_with_glob_characters_touches_no_other_conversation(
    env: Env, pattern_like: str
) -> None:
    """With ``scan_records`` the idempotency records are also found by SCAN MATCH: an id
    that is itself a glob pattern ("a*", "[ab]") must match its own records only."""
    suffix = new_id()
    erased, neighbours = f"{pattern_like}{suffix}", [f"{c}{suffix}" for c in ("a", "ab", "b")]
    logs = [env.log(conversation) for conversation in [erased, *neighbours] if conversation]
    for log in logs:
        log.append(user("kept"), idempotency_key="k")
    logs[0].erase(scan_records=True)
    assert keys_of_escaped(env, logs[0]) == [logs[0].keys.seq]
    for log in logs[1:]:
        if log.conversation == erased:
            continue
        assert env.raw.exists(log.keys.idempotency_record("k")) == 1, log.conversation
        assert log.append(user("kept"), idempotency_key="k") == 1  # a replay
        assert log.count() == 1


def keys_of_escaped(env: Env, log: Any) -> list[str]:
    """The keys of ``log``'s conversation, found by its escaped hash tag."""
    base = log.keys.seq.removesuffix(":seq")
    glob = base.translate(str.maketrans({c: "\\" + c for c in "*?[]\\"}))
    found = env.raw.scan_iter(match=f"{glob}:*", count=1000)
    return sorted({k.decode() if isinstance(k, bytes) else k for k in found})


def test_more_idempotency_records_than_one_call_takes_are_all_erased(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_erase, "RECORDS_PER_CALL", 7)
    log = env.log()
    for i in range(30):
        log.append(user(f"m{i}"), idempotency_key=f"k{i}")
    erasure = log._erase(timedelta(minutes=1))
    assert erasure.deleted == 30 + 3  # the records, their set, the stream and the counter
    assert keys_of(env, log.conversation) == [log.keys.seq]
