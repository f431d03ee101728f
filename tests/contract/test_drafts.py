"""Drafts (docs/drafts.md): a message while it is written, read by others as it grows,
ended exactly once (committed, aborted or interrupted), resumable by position. The
writer and its ends on every backend and both clients; the races (lapses noticed by many,
claims taken over, followers resumed mid-draft) on one real server, where the scripts run
as in production."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import orjson
import pytest
import redis
import redis.asyncio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from redis_msglog import (
    AsyncMessageLog,
    CodecError,
    ConversationErasedError,
    CorruptLogError,
    DraftDelta,
    DraftEnded,
    DraftEndedError,
    DraftStarted,
    DraftTooLargeError,
    InvalidArgumentError,
    MessageLog,
    StoredMessage,
    ToolCall,
    TooManyDraftsError,
)
from redis_msglog._core.drafts import scripts as draft_scripts
from redis_msglog._core.drafts.cursor import DraftTracker, parse_resume
from redis_msglog.testing import EphemeralServer

from ..conftest import ACL_USER, Env, SyncView, new_id

TOKEN = "a" * 32


class Writer:
    """A draft writer of either client, driven from the test's thread (the async one on
    the env's loop)."""

    def __init__(self, log: Any, **options: Any) -> None:
        self._loop = log._loop if isinstance(log, SyncView) else None
        self._inner: Any = (log.inner if isinstance(log, SyncView) else log).draft(**options)

    def _done(self, value: Any) -> Any:
        if self._loop is not None and inspect.isawaitable(value):
            return self._loop.run_until_complete(value)
        return value

    def __enter__(self) -> Writer:
        opened = self._inner.__aenter__() if self._loop else self._inner.__enter__()
        self._done(opened)
        return self

    def __exit__(self, *exc: Any) -> None:
        self._done(self._inner.__aexit__(*exc) if self._loop else self._inner.__exit__(*exc))

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if not callable(attr):
            return attr
        return lambda *args, **kwargs: self._done(attr(*args, **kwargs))


@pytest.fixture
def redis_log(shared_server: Callable[[str], EphemeralServer]) -> Iterator[Callable[..., Any]]:
    """Sync logs on the shared redis-server, one client each (threads of a test share
    none)."""
    url = shared_server("redis").url
    made: list[redis.Redis] = []

    def make(conversation: str | None = None, socket_timeout: float | None = None) -> MessageLog:
        client = redis.Redis.from_url(url, socket_timeout=socket_timeout)
        made.append(client)
        return MessageLog(client, conversation or new_id())

    yield make
    for client in made:
        client.close()


def crashed_writer(log: Any, *pieces: str, lease_ms: int = 1000, keep: bool = True) -> str:
    """A draft opened and written by hand, whose writer then never renews its lease (a
    crashed worker); its id."""
    draft_id = new_id().removeprefix("test-").ljust(32, "0")
    plans = log._core.drafts
    log._run(plans.open_plan(draft_id, TOKEN, "assistant", None, lease_ms, keep))
    deltas = [b'{"k":"t","v":' + f'"{piece}"'.encode() + b"}" for piece in pieces]
    if deltas:
        log._run(plans.write_plan(draft_id, TOKEN, 0, deltas))
    return draft_id


# -- the writer, on every backend --------------------------------------------------------


def test_a_draft_commits_as_one_message_with_exactly_what_it_spelled(env: Env) -> None:
    log = env.log()
    log.add("user", "what is 2+2?")
    with Writer(log, name="calc") as draft:
        draft.write_reasoning("add ")
        draft.write_reasoning("them")
        draft.write("It is ")
        draft.write_tool_call("call_1", "add", '{"a": 2, ')
        draft.write_tool_call("call_1", arguments='"b": 2}')
        draft.write("4.")
        draft.flush()
        [listed] = log.drafts()
        assert (listed.id, listed.role, listed.name) == (draft.id, "assistant", "calc")
        assert (listed.text, listed.reasoning, listed.status) == ("It is 4.", "add them", "open")
        assert listed.tool_calls == (
            ToolCall(id="call_1", name="add", arguments='{"a": 2, "b": 2}'),
        )
        assert listed.position == draft.position > 0
        assert log.all()[-1].seq == 1  # nothing committed while it is written
    assert (draft.outcome, draft.seq) == ("committed", 2)
    row = log.all()[-1]
    assert isinstance(row, StoredMessage) and row.seq == 2
    assert (row.draft, row.interrupted, row.name) == (draft.id, False, "calc")
    assert row.text == "It is 4." and row.tool_calls == list(listed.tool_calls)
    assert isinstance(row.content, list) and row.content[0].type == "thinking"
    assert log.drafts() == []
    # Its deltas stay readable a while after the end (a late follower finishes it).
    kept = log.draft_deltas(draft.id)
    assert "".join(d.text for d in kept if d.kind == "text") == "It is 4."
    assert [d.pos for d in kept] == list(range(1, len(kept) + 1))
    with pytest.raises(DraftEndedError) as ended:
        draft.write("more")
    assert ended.value.outcome == "committed"
    assert log.count() == 2


def test_an_error_in_the_block_ends_the_draft_by_its_on_interrupt(env: Env) -> None:
    log = env.log()
    with pytest.raises(RuntimeError), Writer(log) as kept:
        kept.write("half an ans")
        raise RuntimeError("the model's stream broke")
    assert kept.outcome == "interrupted"
    [row] = log.all()
    assert (row.text, row.interrupted, row.draft) == ("half an ans", True, kept.id)
    with pytest.raises(RuntimeError), Writer(log, on_interrupt="discard") as dropped:
        dropped.write("gone")
        raise RuntimeError
    assert (dropped.outcome, dropped.seq) == ("interrupted", None)
    with Writer(log) as aborted:
        aborted.write("never mind")
        aborted.abort()
    assert aborted.outcome == "aborted"
    with pytest.raises(RuntimeError), Writer(log) as empty:
        raise RuntimeError  # nothing written: nothing to keep
    assert empty.seq is None
    assert log.count() == 1 and log.drafts() == []


def test_bad_input_is_refused_and_writes_nothing(env: Env) -> None:
    log = env.log(max_message_bytes=200)
    for bad in ({"role": "robot"}, {"name": ""}, {"lease": 5}, {"on_interrupt": "keep"}):
        with pytest.raises(InvalidArgumentError):
            Writer(log, **bad)
    with Writer(log) as draft:
        draft.write("ok")
        draft.flush()
        at = draft.position
        with pytest.raises(InvalidArgumentError):
            draft.write(b"bytes")
        with pytest.raises(InvalidArgumentError):
            draft.write_tool_call("", "f")
        with pytest.raises(CodecError):
            draft.write("lone \ud800 surrogate")
        with pytest.raises(DraftTooLargeError):
            draft.write("x" * 200)
        draft.flush()
        assert draft.position == at
        assert log.drafts()[0].text == "ok"
    assert log.all()[-1].text == "ok"


def test_an_erased_conversation_opens_no_draft(env: Env) -> None:
    log = env.log()
    log.add("user", "hi")
    log.erase()
    with pytest.raises(ConversationErasedError), Writer(log):
        pass
    assert log.drafts() == []


# -- races, on one real server -----------------------------------------------------------


def test_a_lapsed_lease_is_ended_exactly_once_among_many_noticers(
    redis_log: Callable[..., MessageLog],
) -> None:
    conversation = new_id()
    log = redis_log(conversation)
    draft_id = crashed_writer(log, "half ", "an answer")
    assert log.end_lapsed_drafts() == 0  # its lease holds
    time.sleep(1.1)
    noticers = [redis_log(conversation) for _ in range(6)]
    ended: list[int] = []
    start = threading.Barrier(len(noticers))

    def notice(other: MessageLog) -> None:
        start.wait()
        ended.append(other.end_lapsed_drafts())

    threads = [threading.Thread(target=notice, args=(n,)) for n in noticers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(ended) == [0] * 5 + [1]
    [row] = log.all()
    assert (row.text, row.interrupted, row.draft) == ("half an answer", True, draft_id)
    assert log.drafts() == [] and log.end_lapsed_drafts() == 0


def test_a_claim_whose_claimant_died_is_taken_over(redis_log: Callable[..., MessageLog]) -> None:
    conversation = new_id()
    dead, other = redis_log(conversation), redis_log(conversation)
    draft_id = crashed_writer(dead, "kept")
    time.sleep(1.1)
    dead._core.drafts.claim_ms = 300
    claim = dead._run(dead._core.drafts.claim_plan(draft_id, "interrupt"))
    assert (claim.status, claim.outcome) == ("claimed", "interrupted")
    # Its claimant dies here: nothing appended, nothing finished.
    assert other.end_lapsed_drafts() == 0  # the claim holds
    assert other.drafts()[0].status == "ending"
    time.sleep(0.4)
    assert other.end_lapsed_drafts() == 1
    [row] = other.all()
    assert (row.text, row.interrupted) == ("kept", True)
    # The dead claimant, back, finds it ended: no second message.
    assert dead._run(dead._core.drafts.claim_plan(draft_id, "interrupt")).status == "ended"
    assert other.count() == 1


def test_a_writer_whose_lease_lapsed_learns_it_was_interrupted(
    redis_log: Callable[..., MessageLog],
) -> None:
    conversation = new_id()
    log, noticer = redis_log(conversation), redis_log(conversation)
    draft = log.draft(lease=timedelta(seconds=1))
    draft.__enter__()
    draft.write("slow")
    draft.flush()
    draft._ticker.stop()  # a writer stalled past its lease (no heartbeat)
    time.sleep(1.1)
    assert noticer.end_lapsed_drafts() == 1
    with pytest.raises(DraftEndedError) as ended:
        draft.write(" model")
        draft.flush()
    assert ended.value.outcome == "interrupted"
    with pytest.raises(DraftEndedError):
        draft.commit()
    assert [r.text for r in log.all()] == ["slow"]


def test_too_many_drafts_are_refused(redis_log: Callable[..., MessageLog]) -> None:
    log = redis_log()
    for _ in range(draft_scripts.MAX_DRAFTS):
        crashed_writer(log, lease_ms=60_000)
    with pytest.raises(TooManyDraftsError), log.draft():
        pass
    assert len(log.drafts()) == draft_scripts.MAX_DRAFTS


def test_a_hostile_state_or_delta_is_a_corrupt_log(redis_log: Callable[..., MessageLog]) -> None:
    log = redis_log()
    draft_id = crashed_writer(log, "fine", lease_ms=60_000)
    raw = log._redis
    raw.xadd(log.keys.draft(draft_id), {"d": b"not json"}, id="0-9")
    with pytest.raises(CorruptLogError):
        log.drafts()
    raw.hset(log.keys.drafts, draft_id, b'{"role": "assistant"}')
    with pytest.raises(CorruptLogError):
        log.drafts()
    with pytest.raises(InvalidArgumentError):
        log.follow(after="1.nothex:3", drafts=True)


# -- follow(drafts=True) -----------------------------------------------------------------


def collect(follower: Any, until: Callable[[Any], bool], sink: list[Any]) -> None:
    for item in follower:
        sink.append((item, follower.resume))
        if until(item):
            return


def committed(item: Any) -> bool:
    return isinstance(item, StoredMessage) and item.draft is not None


def test_a_follower_sees_the_draft_grow_end_and_become_its_message(
    redis_log: Callable[..., MessageLog],
) -> None:
    conversation = new_id()
    log, watcher = redis_log(conversation), redis_log(conversation)
    log.add("user", "go")
    seen: list[Any] = []
    follower = watcher.follow(after=1, drafts=True)
    thread = threading.Thread(target=collect, args=(follower, committed, seen))
    thread.start()
    time.sleep(0.3)  # the follower is waiting
    with log.draft() as draft:
        for word in ("one ", "two ", "three"):
            draft.write(word)
            draft.flush()
    thread.join(10)
    items = [item for item, _ in seen]
    assert items[0] == DraftStarted(draft.id, "assistant", None, "")
    deltas = [i for i in items if isinstance(i, DraftDelta)]
    assert [d.text for d in deltas] == ["one ", "two ", "three"]
    assert [d.pos for d in deltas] == [1, 2, 3]
    assert items[-2:] == [DraftEnded(draft.id, "committed", 2), log.all()[-1]]
    # Resumed from after any item, a follower gets exactly the rest.
    for cut in range(len(seen) - 1):
        rest: list[Any] = []
        collect(watcher.follow(after=seen[cut][1], drafts=True), committed, rest)
        assert [item for item, _ in rest] == items[cut + 1 :], cut


def test_a_follower_resumed_mid_draft_misses_nothing_and_repeats_nothing(
    redis_log: Callable[..., MessageLog],
) -> None:
    conversation = new_id()
    log, watcher = redis_log(conversation), redis_log(conversation)
    with log.draft() as draft:
        draft.write("a")
        draft.flush()
        first: list[Any] = []
        collect(watcher.follow(drafts=True), lambda i: isinstance(i, DraftDelta), first)
        resume = first[-1][1]
        assert resume == f"0.{draft.id}:1"
        draft.write("b")
        draft.flush()
        draft.write("c")
    rest: list[Any] = []
    collect(watcher.follow(after=resume, drafts=True), committed, rest)
    texts = [i.text for i, _ in [*first, *rest] if isinstance(i, DraftDelta)]
    assert texts == ["a", "b", "c"]
    assert isinstance(rest[-2][0], DraftEnded) and rest[-1][0].text == "abc"


def test_a_subscription_with_drafts_gets_what_a_follower_gets_and_resumes(
    redis_log: Callable[..., MessageLog],
) -> None:
    conversation = new_id()
    log, watcher = redis_log(conversation), redis_log(conversation)
    log.add("user", "go")
    got: list[Any] = []
    done = threading.Event()

    def handle(items: list[Any]) -> None:
        got.extend(items)
        if any(committed(i) for i in items):
            done.set()

    with watcher.subscribe(handle, drafts=True) as subscription:
        assert subscription.resume == "1"
        with log.draft() as draft:
            for word in ("one ", "two "):
                draft.write(word)
                draft.flush()
                time.sleep(0.05)
        assert done.wait(10)
    assert got[0] == DraftStarted(draft.id, "assistant", None, "")
    assert [d.text for d in got if isinstance(d, DraftDelta)] == ["one ", "two "]
    assert got[-2:] == [DraftEnded(draft.id, "committed", 2), log.all()[-1]]
    assert (subscription.position, subscription.resume) == (2, "2")
    # From the resume id after its first delta, a subscription gets exactly the rest.
    rest: list[Any] = []
    finished = threading.Event()

    def keep(items: list[Any]) -> None:
        rest.extend(items)
        if any(committed(i) for i in items):
            finished.set()

    with watcher.subscribe(keep, after=f"1.{draft.id}:1", drafts=True):
        assert finished.wait(10)
    assert rest == got[2:]


def test_subscribe_refuses_a_resume_id_without_drafts(redis_log: Callable[..., MessageLog]) -> None:
    log = redis_log()
    with pytest.raises(InvalidArgumentError, match="drafts=True"):
        log.subscribe(lambda rows: None, after="1." + "a" * 32 + ":1")  # type: ignore[call-overload]
    for bad in ("x", "1.zz", -1):
        with pytest.raises(InvalidArgumentError):
            log.subscribe(lambda rows: None, after=bad, drafts=True)


async def _async_subscription(url: str, conversation: str) -> list[Any]:
    client = redis.asyncio.Redis.from_url(url)
    log, got = AsyncMessageLog(client, conversation), []
    done = asyncio.Event()

    async def handle(items: list[Any]) -> None:
        got.extend(items)
        if any(committed(i) for i in items):
            done.set()

    async with await log.subscribe(handle, drafts=True) as subscription:
        async with log.draft() as draft:
            await draft.write("async ")
            await draft.flush()
            await draft.write("answer")
        await asyncio.wait_for(done.wait(), 10)
    assert subscription.resume == str(subscription.position) == "1"
    await client.aclose()
    return got


def test_an_asyncio_subscription_with_drafts(
    shared_server: Callable[[str], EphemeralServer],
) -> None:
    got = asyncio.run(_async_subscription(shared_server("redis").url, new_id()))
    assert isinstance(got[0], DraftStarted) and isinstance(got[-2], DraftEnded)
    assert "".join(d.text for d in got if isinstance(d, DraftDelta)) == "async answer"
    assert isinstance(got[-1], StoredMessage) and got[-1].text == "async answer"


def test_a_follower_notices_a_lapse_and_ends_the_draft(
    redis_log: Callable[..., MessageLog],
) -> None:
    conversation = new_id()
    log = redis_log(conversation, socket_timeout=2)
    draft_id = crashed_writer(log, "cut ", "short")
    seen: list[Any] = []
    collect(log.follow(drafts=True), committed, seen)  # waits for the lease, then ends it
    items = [item for item, _ in seen]
    assert items[0].draft == draft_id and [i.text for i in items[1:3]] == ["cut ", "short"]
    assert items[-2] == DraftEnded(draft_id, "interrupted", 1)
    assert items[-1].interrupted and items[-1].text == "cut short"


# -- the background: flushes and the heartbeat -------------------------------------------


def test_the_sync_writer_flushes_and_renews_its_lease_in_the_background(
    redis_log: Callable[..., MessageLog],
) -> None:
    conversation = new_id()
    log, reader = redis_log(conversation), redis_log(conversation)
    with log.draft(lease=timedelta(seconds=1)) as draft:
        draft.write("streamed")
        assert wait_for(lambda: [d.text for d in reader.drafts()] == ["streamed"])
        time.sleep(1.5)  # past the lease: only the heartbeat keeps it
        assert reader.end_lapsed_drafts() == 0
    assert draft.outcome == "committed" and reader.all()[-1].text == "streamed"


def test_the_async_writer_flushes_and_renews_its_lease_in_the_background(
    shared_server: Callable[[str], EphemeralServer],
) -> None:
    url, conversation = shared_server("redis").url, new_id()

    async def scenario() -> None:
        client = redis.asyncio.Redis.from_url(url)
        log, reader = AsyncMessageLog(client, conversation), AsyncMessageLog(client, conversation)
        async with log.draft(lease=timedelta(seconds=1)) as draft:
            await draft.write("streamed")
            for _ in range(50):
                if [d.text for d in await reader.drafts()] == ["streamed"]:
                    break
                await asyncio.sleep(0.02)
            else:
                raise AssertionError("the delta was not flushed in the background")
            await asyncio.sleep(1.5)  # past the lease: only the heartbeat keeps it
            assert await reader.end_lapsed_drafts() == 0
        assert draft.outcome == "committed" and (await reader.all())[-1].text == "streamed"
        await client.aclose()

    asyncio.run(scenario())


def wait_for(condition: Callable[[], bool], timeout: float = 2.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_room_held_by_crashed_writers_is_freed_by_the_next_writer(
    redis_log: Callable[..., MessageLog],
) -> None:
    log = redis_log()
    for _ in range(draft_scripts.MAX_DRAFTS):
        crashed_writer(log)  # a 1 s lease, never renewed
    time.sleep(1.1)
    with log.draft() as draft:
        draft.write("room again")
    assert draft.outcome == "committed"
    assert log.count() == 1  # the crashed ones wrote nothing: nothing to keep


def test_a_redaction_of_a_drafts_message_forgets_its_deltas(env: Env) -> None:
    if env.backend == "acl":  # as acl_rules(deletions=True) makes it (test_redact.py)
        env.raw.execute_command("ACL", "SETUSER", ACL_USER, "+xtrim", "+xdel", "+xsetid")
    log = env.log()
    with Writer(log) as draft:
        draft.write("my card is 4111 1111 1111 1111")
    assert log.draft_deltas(draft.id) != []  # kept a minute, for late followers
    log.redact(draft.seq)
    assert log.draft_deltas(draft.id) == []
    assert env.raw.exists(log.keys.draft(draft.id)) == 0
    assert log.all()[0].redacted


# -- hostile draft state, on one real server ---------------------------------------------

JSONISH = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats()
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner),
    max_leaves=8,
)
STATE_FIELDS = st.fixed_dictionaries(
    {},
    optional={
        name: JSONISH | st.sampled_from(["open", "claimed", "ended", "assistant", "commit"])
        for name in ("role", "token", "lease", "expires", "on_interrupt", "pos", "bytes",
                     "status", "claimant", "claim_expires", "outcome", "seq", "started",
                     "ended", "feed", "name")
    },
)  # fmt: skip


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    field=st.one_of(st.just("f" * 32), st.text(max_size=40)),
    state=st.one_of(STATE_FIELDS.map(orjson.dumps), st.binary(max_size=40)),
    delta=st.one_of(
        st.dictionaries(st.sampled_from(["k", "v", "id", "n"]), JSONISH).map(orjson.dumps),
        st.binary(max_size=20),
    ),
)
def test_state_a_tenant_wrote_by_hand_is_read_or_refused_never_followed_out(
    shared_server: Callable[[str], EphemeralServer], field: str, state: bytes, delta: bytes
) -> None:
    """A tenant can write its own conversation's draft keys with any content: every
    draft operation reads it or raises CorruptLogError, writes at most the draft's one
    message, and erase() still removes what the drafts hash names."""
    raw = redis.Redis.from_url(shared_server("redis").url)
    log = MessageLog(raw, new_id())
    log.add("user", "hi")
    raw.hset(log.keys.drafts, field, state)
    raw.xadd(log.keys.draft("f" * 32), {"d": delta}, id="0-1")
    for operation in (log.drafts, log.end_lapsed_drafts, lambda: log.draft_deltas("f" * 32)):
        with contextlib.suppress(CorruptLogError):
            operation()
    tracker = DraftTracker(log._core.drafts, parse_resume(f"1.{'f' * 32}:0"))
    with contextlib.suppress(CorruptLogError):
        log._run(tracker.start_plan(1))
    # Whatever was ended wrote at most its one message, into this conversation (the keys
    # every script touches are built from the log's own keys: erase() below finds them).
    rows = log.all()
    assert rows[0].text == "hi" and len(rows) <= 2
    assert all(row.draft in (None, field) for row in rows)
    log.erase()
    assert raw.exists(log.keys.drafts, log.keys.draft_feed) == 0
    if field == "f" * 32:  # a stream the hash names; one it does not is a stray (the note)
        assert raw.exists(log.keys.draft(field)) == 0
