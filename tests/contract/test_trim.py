"""trim(through_seq) (docs/lifecycle.md, "Trimming and retention"): the entries up to a
message are removed from Redis with the blobs only they used, one ``trim`` edit entry
records it, and every read, view, cursor, follower and ``msglog verify`` treats the log
as starting after it. Every backend (cluster and ACL included), both clients; bad input
writes nothing (a DUMP of every key before and after); hypothesis against a model."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from redis_msglog import (
    EditEntry,
    InvalidArgumentError,
    InvalidEditError,
    LogView,
    MessageLog,
    SeqConflictError,
    StoredMessage,
    acl_rules,
)
from redis_msglog._core.stored.keys import ConversationKeys
from redis_msglog._lua.contract import AppendCall
from redis_msglog.admin import verify_conversation

from ..conftest import ACL_USER, Env, new_id, server_version


@pytest.fixture(autouse=True)
def _deletions_granted(request: pytest.FixtureRequest) -> None:
    """The ACL backend's user as ``acl_rules(deletions=True)`` makes it: trim() may delete."""
    if "env" in request.fixturenames:
        env: Env = request.getfixturevalue("env")
        if env.backend == "acl":
            env.raw.execute_command("ACL", "SETUSER", ACL_USER, "+xtrim", "+xdel", "+xsetid")


def user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


def image(fill: bytes) -> dict[str, Any]:
    return {
        "role": "user",
        "content": [{"type": "image", "data": fill * 64, "media_type": "image/png"}],
    }


def seqs(rows: list[Any]) -> list[int]:
    return [row.seq for row in rows]


def keys_of(log: Any) -> list[str]:
    k = log.keys
    return [k.seq, k.stream, k.blobs, k.view, k.hidden, k.producers]


def snapshot(env: Env, log: Any) -> dict[str, Any]:
    return {key: env.raw.dump(key) for key in keys_of(log)}


def sync_raw(env: Env) -> redis.Redis:
    return env.raw


def test_trim_removes_the_entries_and_reads_start_after_it(env: Env) -> None:
    log = env.log()
    log.append_many([user(f"m{i}") for i in range(1, 8)])
    assert log.trim(3) == 8  # the trim's own entry
    assert env.raw.xlen(log.keys.stream) == 5  # seqs 4..8: 1..3 are gone from Redis
    assert env.raw.xrange(log.keys.stream, "-", "3") == []
    assert log.count() == 8  # still the last seq
    assert seqs(log.all()) == [4, 5, 6, 7]
    assert seqs(log.read(0)) == seqs(log.read(after=2)) == [4, 5, 6, 7]  # a cursor below it
    assert seqs(log.read(after=5)) == [6, 7]
    assert seqs(log.last(10)) == [4, 5, 6, 7] and seqs(log.last(2)) == [6, 7]
    assert log.count(view="visible") == 4
    physical = log.all(view="physical")
    assert seqs(physical) == [4, 5, 6, 7, 8]
    edit = physical[-1]
    assert isinstance(edit, EditEntry) and edit.op == "trim" and edit.through_seq == 3
    assert log.add("user", "after") == 9  # appends go on after the trim
    assert seqs(log.all()) == [4, 5, 6, 7, 9]
    assert seqs(log.read(0, view="physical")) == [4, 5, 6, 7, 8, 9]
    assert seqs(log.last(3, view="physical")) == [7, 8, 9]
    assert log.trim(5) == 10
    assert seqs(log.all()) == [6, 7, 9]
    assert env.raw.xlen(log.keys.stream) == 5  # 6..10


def test_a_physical_read_of_a_trimmed_log_pages_from_its_first_seq(env: Env) -> None:
    log = env.log(page_size=2)  # small pages: paged reads, forwards and backwards
    log.append_many([user(f"m{i}") for i in range(1, 10)])
    log.trim(4)
    assert seqs(log.all(view="physical")) == [5, 6, 7, 8, 9, 10]
    assert seqs(log.last(100, view="physical")) == [5, 6, 7, 8, 9, 10]
    assert seqs(log.all()) == [5, 6, 7, 8, 9]
    assert seqs(log.last(100)) == [5, 6, 7, 8, 9]


def test_trim_keeps_the_edits_views_right(env: Env) -> None:
    log = env.log()
    log.append_many([user(f"m{i}") for i in range(1, 9)])  # 1..8
    log.retract([2, 6])  # 9
    log.archive(4)  # 10
    log.trim(3)  # 11: rows 1, 3 go (2 was retracted)
    assert seqs(log.all()) == [4, 5, 7, 8]
    assert seqs(log.all(view="archived")) == [4]
    assert seqs(log.all(view="active")) == [5, 7, 8]
    assert log.count(view="archived") == 1 and log.count(view="active") == 3
    log.trim(5)  # 12: past the archive watermark (4), which still marks the archived rows
    assert seqs(log.all(view="archived")) == [] and seqs(log.all(view="active")) == [7, 8]
    assert log.count(view="archived") == 0 and log.count(view="visible") == 2
    log.compact([user("summary")], through_seq=7)  # 13, 14
    assert seqs(log.all()) == [14, 8]
    fold = LogView(log.all(view="physical"), start=6)
    assert seqs(fold.rows) == [14, 8]
    report = verify_conversation(sync_raw(env), "msglog", log.conversation)
    assert report.problems == []


def test_a_trim_removes_the_blobs_only_its_entries_used(env: Env) -> None:
    log = env.log(blob_threshold=16)
    log.append(image(b"a"))  # 1: blob A
    log.append(image(b"b"))  # 2: blob B
    log.append(image(b"b"))  # 3: blob B again (stored once)
    log.append(user("text"))  # 4

    def blobs() -> set[bytes]:
        names = [
            str(k, "utf-8") if isinstance(k, bytes) else k for k in env.raw.hkeys(log.keys.blobs)
        ]
        return {k.encode() for k in names if not k.startswith(("^", "_"))}

    assert len(blobs()) == 2
    log.trim(2)  # A is used by seq 1 only; B by 3 too
    assert len(blobs()) == 1
    (row,) = [r for r in log.all() if r.seq == 3]
    assert not isinstance(row.content, str) and row.content[0].data == b"b" * 64
    log.trim(3)
    assert blobs() == set()
    assert seqs(log.all()) == [4]
    assert verify_conversation(sync_raw(env), "msglog", log.conversation).problems == []


@pytest.mark.parametrize(
    "through, reason",
    [(99, "not in the log"), (6, "an edit entry"), (2, "already trimmed"), (3, "already trimmed")],
)
def test_bad_trims_are_refused_and_write_nothing(env: Env, through: int, reason: str) -> None:
    log = env.log(blob_threshold=16)
    log.append_many([user("a"), user("b"), user("c"), image(b"z"), user("e")])
    log.trim(3)  # 6
    before = snapshot(env, log)
    with pytest.raises(InvalidEditError, match=reason):
        log.trim(through)
    assert snapshot(env, log) == before


@pytest.mark.parametrize("through", [0, -1, "3", 3.0, None, True, 10**16])
def test_a_trim_through_what_is_not_a_seq_is_refused(env: Env, through: Any) -> None:
    log = env.log()
    log.append_many([user("a"), user("b")])
    before = snapshot(env, log)
    with pytest.raises(InvalidEditError):
        log.trim(through)
    assert snapshot(env, log) == before


def test_verify_accepts_exactly_a_recorded_trim(env: Env) -> None:
    log = env.log()
    log.append_many([user(f"m{i}") for i in range(1, 7)])
    log.trim(2)
    raw = sync_raw(env)
    assert verify_conversation(raw, "msglog", log.conversation).problems == []
    # Another entry deleted by hand: still a problem.
    [(entry_id, _)] = raw.xrange(log.keys.stream, "4", "4") or [(b"", None)]
    raw.xdel(log.keys.stream, entry_id or b"")
    problems = verify_conversation(raw, "msglog", log.conversation).problems
    assert any("missing seq 4" in p for p in problems)


def test_verify_flags_a_first_seq_no_trim_records(env: Env) -> None:
    log = env.log()
    log.append_many([user(f"m{i}") for i in range(1, 7)])
    log.trim(2)
    raw = sync_raw(env)
    raw.hset(log.keys.view, "first", "4")  # says more was trimmed than was
    problems = verify_conversation(raw, "msglog", log.conversation).problems
    assert any("trimmed through seq 2" in p for p in problems)


def follow_rows(env: Env, log: Any, after: int, n: int) -> list[Any]:
    """The first ``n`` rows of ``log.follow(after)``, either client."""
    if env.flavor == "sync":
        rows = []
        for row in log.follow(after=after):
            rows.append(row)
            if len(rows) == n:
                break
        return rows

    async def take() -> list[Any]:
        got = []
        async for row in log.inner.follow(after=after):
            got.append(row)
            if len(got) == n:
                break
        return got

    return env.loop.run_until_complete(take())


def test_a_follower_sees_the_trim_as_an_edit_and_a_late_one_starts_after_it(env: Env) -> None:
    log = env.log()
    log.append_many([user(f"m{i}") for i in range(1, 5)])
    log.trim(2)  # 5
    rows = follow_rows(env, log, 0, 3)
    assert seqs(rows) == [3, 4, 5] and isinstance(rows[-1], EditEntry)
    assert seqs(follow_rows(env, log, 1, 1)) == [3]  # a cursor inside the trimmed entries
    assert seqs(follow_rows(env, log, 4, 1)) == [5]


def test_an_acl_user_may_trim_only_with_deletions_granted(shared_server: Any) -> None:
    server = shared_server("redis")
    admin = redis.Redis.from_url(server.url)
    for name, deletions in (("trim-no", False), ("trim-yes", True)):
        admin.execute_command(
            "ACL",
            "SETUSER",
            name,
            "reset",
            "on",
            ">pw",
            *acl_rules(redis_version=server_version(admin), deletions=deletions),
        )
    conversation = new_id()
    MessageLog(admin, conversation).append_many([user("a"), user("b")])
    before = admin.dump(f"msglog:{{{conversation}}}:stream")
    refused = MessageLog(
        redis.Redis.from_url(server.url, username="trim-no", password="pw"), conversation
    )
    with pytest.raises(Exception, match=r"(?i)permission|can't"):
        refused.trim(1)
    assert admin.dump(f"msglog:{{{conversation}}}:stream") == before
    allowed = MessageLog(
        redis.Redis.from_url(server.url, username="trim-yes", password="pw"), conversation
    )
    assert allowed.trim(1) == 3 and seqs(allowed.all()) == [2]


# -- against a model, over random sequences -----------------------------------------------

OPS = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(1, 3)),
        st.tuples(st.just("retract"), st.integers(0, 50)),
        st.tuples(st.just("trim"), st.integers(0, 50)),
        st.tuples(st.just("bad-trim"), st.integers(0, 50)),
    ),
    min_size=1,
    max_size=14,
)


@pytest.mark.parametrize("kind", ["redis", "fakeredis"])
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=OPS)
def test_trims_match_a_model_of_the_rows(
    kind: str, shared_server: Any, ops: list[tuple[str, int]]
) -> None:
    if kind == "redis":
        client: redis.Redis = redis.Redis.from_url(shared_server("redis").url)
    else:
        import fakeredis

        client = fakeredis.FakeRedis()
    log = MessageLog(client, new_id(), page_size=3)
    rows: list[int] = []  # the model: the visible seqs
    messages: set[int] = set()  # seqs of messages not trimmed
    first, last = 1, 0
    for op, arg in ops:
        if op == "append":
            log.append_many([user("m")] * arg)
            new = list(range(last + 1, last + arg + 1))
            rows += new
            messages.update(new)
            last += arg
        elif op == "retract" and rows:
            log.retract([rows[arg % len(rows)]])
            rows.remove(rows[arg % len(rows)])
            last += 1
        elif op == "trim" and messages:
            through = sorted(messages)[arg % len(messages)]
            assert log.trim(through) == last + 1
            rows = [s for s in rows if s > through]
            messages = {s for s in messages if s > through}
            first, last = through + 1, last + 1
        elif op == "bad-trim" and last:
            through = arg % (last + 2) + 1
            if through in messages:
                continue
            with pytest.raises(InvalidEditError):
                log.trim(through)
        assert seqs(log.all()) == rows
        assert seqs(log.last(2)) == rows[-2:]
        assert log.count() == last and log.count(view="visible") == len(rows)
        physical = log.all(view="physical")
        assert (physical[0].seq if physical else first) == first
        assert all(isinstance(e, (StoredMessage, EditEntry)) for e in physical)
        assert client.xlen(log.keys.stream) == last - (first - 1)
    if last:
        assert verify_conversation(client, "msglog", log.conversation).problems == []


EDIT_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(1, 3)),
        st.tuples(st.just("retract"), st.integers(0, 50)),
        st.tuples(st.just("compact"), st.integers(0, 50)),
        st.tuples(st.just("archive"), st.integers(0, 50)),
        st.tuples(st.just("trim"), st.integers(0, 50)),
    ),
    min_size=1,
    max_size=16,
)


def _edit(log: MessageLog, fold: LogView, messages: list[int], op: str, arg: int) -> list[int]:
    """Make the edit ``op``; return the message seqs still kept."""
    rows = fold.rows
    if op == "append":
        log.append_many([user("m")] * arg)
    elif op == "retract" and rows:
        log.retract([rows[arg % len(rows)].seq])
    elif op == "compact" and rows:
        log.compact([user("summary")], through_seq=rows[arg % len(rows)].seq)
    elif op == "archive" and fold.active():
        log.archive(fold.active()[arg % len(fold.active())].seq)
    elif op == "trim" and messages:
        through = messages[arg % len(messages)]
        log.trim(through)
        return [s for s in messages if s > through]
    return messages


@pytest.mark.parametrize("kind", ["valkey", "fakeredis"])
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=EDIT_OPS)
def test_trims_among_edits_match_a_followers_fold(
    kind: str, shared_server: Any, ops: list[tuple[str, int]]
) -> None:
    """A follower's fold of every entry as it was written (before any trim removed it) is
    what every view reads, and ``msglog verify`` finds nothing wrong."""
    if kind == "valkey":
        client: redis.Redis = redis.Redis.from_url(shared_server("valkey").url)
    else:
        import fakeredis

        client = fakeredis.FakeRedis()
    log = MessageLog(client, new_id(), page_size=3)
    fold = LogView(strict=True)
    messages: list[int] = []  # message seqs not trimmed
    for op, arg in ops:
        messages = _edit(log, fold, messages, op, arg)
        for entry in log.read(fold.last_seq, view="physical"):
            fold.apply(entry)
            if isinstance(entry, StoredMessage):
                messages.append(entry.seq)
        assert seqs(log.all()) == seqs(fold.rows)
        assert seqs(log.all(view="active")) == seqs(fold.active())
        assert seqs(log.all(view="archived")) == seqs(fold.archived())
        assert log.count(view="visible") == len(fold.rows)
        assert log.count(view="archived") == len(fold.archived())
        assert seqs(log.last(2)) == seqs(fold.rows)[-2:]
    if fold.last_seq:
        assert verify_conversation(client, "msglog", log.conversation).problems == []


def test_a_trim_is_exactly_once_and_takes_expected_seq(env: Env) -> None:
    log = env.log()
    log.append_many([user(f"m{i}") for i in range(1, 6)])
    assert log.trim(2, idempotency_key="trim-1") == 6
    before = snapshot(env, log)
    assert log.trim(2, idempotency_key="trim-1") == 6  # the first call's result, again
    assert snapshot(env, log) == before
    with pytest.raises(SeqConflictError):
        log.trim(3, expected_seq=5)
    assert snapshot(env, log) == before
    assert log.trim(3, expected_seq=6) == 7


# -- max_age: retention by age, on write ---------------------------------------------------


def test_max_age_trims_the_aged_head_on_a_plain_append(env: Env) -> None:
    log = env.log(max_age=timedelta(seconds=1))
    log.append_many([user(f"m{i}") for i in range(1, 6)])  # 1..5
    log.retract([5])  # 6
    assert seqs(log.all()) == [1, 2, 3, 4]  # an edit trims nothing
    time.sleep(1.2)
    assert log.add("user", "new") == 8  # 7: the trim (through 5, the last aged message)
    physical = log.all(view="physical")
    assert seqs(physical) == [6, 7, 8]
    trim = physical[1]
    assert isinstance(trim, EditEntry) and trim.op == "trim" and trim.through_seq == 5
    assert seqs(log.all()) == [8] and log.count() == 8
    assert log.add("user", "newer") == 9  # nothing aged (6 is an edit): no trim
    assert seqs(log.all()) == [8, 9]
    assert verify_conversation(sync_raw(env), "msglog", log.conversation).problems == []


def test_max_age_trims_at_most_one_step_per_append(env: Env) -> None:
    log = env.log(max_age=timedelta(seconds=1))
    for _ in range(3):
        log.append_many([user("m")] * 90)  # 270 entries
    time.sleep(1.2)
    log.add("user", "a")  # trims 100 (1..100), then its message
    assert seqs(log.all())[0] == 101
    log.add("user", "b")  # 101..200
    assert seqs(log.all())[0] == 201
    log.add("user", "c")  # 201..270: the rest (the trims' entries are not aged yet)
    assert seqs(log.all()) == [272, 274, 276]


@pytest.mark.parametrize("max_age", [timedelta(0), timedelta(milliseconds=999), 90, "1d"])
def test_a_bad_max_age_is_refused(env: Env, max_age: Any) -> None:
    with pytest.raises(InvalidArgumentError):
        env.log(max_age=max_age)


def test_a_plain_append_without_max_age_sends_it_empty() -> None:
    call = AppendCall(keys=ConversationKeys.build("msglog", "c"), messages=(b"{}",), call="")
    sent = call.keys_and_args()
    assert call.script_name == "append_plain.lua"  # which takes no max_age at all
    assert AppendCall.argument(sent, "max_age_us") == ""
    assert list(AppendCall.sent_keys(sent)) == ["seq", "stream"]


def contents(env: Env, log: Any) -> list[Any]:
    """The contents of a log's rows (a fork of an async log is an AsyncMessageLog)."""
    rows = log.all() if env.flavor == "sync" else env.loop.run_until_complete(log.all())
    return [row.content for row in rows]


def test_a_trimmed_log_forks_from_its_first_seq(env: Env) -> None:
    log = env.log()
    log.append_many([user(f"m{i}") for i in range(1, 7)])  # 1..6
    log.retract([5])  # 7
    log.trim(2)  # 8
    fork = log.fork(new_id())
    assert contents(env, fork) == ["m3", "m4", "m6"]
    early = log.fork(new_id(), at_seq=4)
    assert contents(env, early) == ["m3", "m4"]
    with pytest.raises(InvalidEditError, match="trimmed"):
        log.fork(new_id(), at_seq=2)
    log.compact([user("summary")], through_seq=4)  # 9, 10: a cut at a kept row: fine
    assert contents(env, log.fork(new_id())) == ["summary", "m6"]
