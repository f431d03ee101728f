"""redact(seq, replacement) (docs/lifecycle.md, "Redacting a message"): the message at a
seq is removed from Redis (with the blobs only it used) and a row marked ``redacted``
takes its place in every read, view and follower; one ``redact`` edit entry records it.
Every backend (cluster and ACL included), both clients; bad input writes nothing (a DUMP
of every key before and after); the original's text is nowhere in Redis afterwards."""

from __future__ import annotations

from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from redis.cluster import RedisCluster

from redis_msglog import (
    EditEntry,
    InvalidArgumentError,
    InvalidEditError,
    InvalidMessageError,
    LogView,
    MessageLog,
    PermissionDeniedError,
    StoredMessage,
    acl_rules,
)
from redis_msglog.admin import verify_conversation

from ..conftest import ACL_PASSWORD, ACL_USER, Env, acl_server, new_id, server_version

SECRET = "card 4111-1111-1111-1111 sec-7f3a"


@pytest.fixture(autouse=True)
def _deletions_granted(request: pytest.FixtureRequest) -> None:
    """The ACL backend's user as ``acl_rules(deletions=True)`` makes it: redact may XDEL."""
    if "env" in request.fixturenames:
        env: Env = request.getfixturevalue("env")
        if env.backend == "acl":
            env.raw.execute_command("ACL", "SETUSER", ACL_USER, "+xtrim", "+xdel", "+xsetid")


def user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


def seqs(rows: list[Any]) -> list[int]:
    return [row.seq for row in rows]


def keys_of(log: Any) -> list[str]:
    k = log.keys
    return [k.seq, k.stream, k.blobs, k.view, k.hidden, k.producers]


def snapshot(env: Env, log: Any) -> dict[str, Any]:
    return {key: env.raw.dump(key) for key in keys_of(log)}


def everything(env: Env, log: Any) -> bytes:
    """Every value of every key of the conversation, as one byte string: read, and as
    ``DUMP`` serialises it uncompressed (what an RDB snapshot or a replica's full sync
    would carry: an entry only marked deleted inside a stream node is still there)."""
    out = []
    if env.backend == "cluster":  # DUMP's strings as they are, on every node
        env.raw.config_set("rdbcompression", "no", target_nodes=RedisCluster.ALL_NODES)
    elif env.backend != "fakeredis":
        env.raw.config_set("rdbcompression", "no")
    for key in keys_of(log):
        dumped = env.raw.dump(key)
        out.append(repr(dumped) if dumped is not None else "")
        kind = env.raw.type(key)
        kind = kind.decode() if isinstance(kind, bytes) else kind
        if kind == "stream":
            out.append(repr(env.raw.xrange(key)))
        elif kind == "hash":
            out.append(repr(env.raw.hgetall(key)))
        elif kind == "zset":
            out.append(repr(env.raw.zrange(key, 0, -1)))
        elif kind == "string":
            out.append(repr(env.raw.get(key)))
    return "".join(out).encode()


def follow_rows(env: Env, log: Any, after: int, n: int) -> list[Any]:
    """The first ``n`` rows of ``log.follow(after)``, either client."""
    rows: list[Any] = []
    if env.flavor == "sync":
        for row in log.follow(after=after):
            rows.append(row)
            if len(rows) == n:
                break
        return rows

    async def take() -> list[Any]:
        async for row in log.inner.follow(after=after):
            rows.append(row)
            if len(rows) == n:
                break
        return rows

    return env.loop.run_until_complete(take())


def test_redact_replaces_the_row_in_every_read(env: Env) -> None:
    log = env.log()
    log.append_many([user("m1"), user(SECRET), {"role": "assistant", "content": "ok"}])
    assert SECRET.encode() in everything(env, log)  # the scan of the keys sees it...
    assert log.redact(2, reason="a card number") == 4
    assert SECRET.encode() not in everything(env, log)  # ...and then no more
    assert b"[redacted]" in everything(env, log)
    assert env.raw.xlen(log.keys.stream) == 3  # 1, 3 and the redact entry
    assert log.count() == 4
    rows = log.all()
    assert seqs(rows) == [1, 2, 3]
    assert [r.redacted for r in rows] == [False, True, False]
    assert rows[1].role == "user" and rows[1].content == "[redacted]"
    assert seqs(log.read(after=1)) == [2, 3]
    assert seqs(log.read(after=1, limit=1)) == [2]
    assert seqs(log.last(2)) == [2, 3]
    assert log.last(1)[0].seq == 3
    physical = log.all(view="physical")
    assert seqs(physical) == [1, 2, 3, 4]
    assert isinstance(physical[1], StoredMessage) and physical[1].redacted
    edit = physical[3]
    assert isinstance(edit, EditEntry)
    assert (edit.op, edit.seqs, edit.reason) == ("redact", (2,), "a card number")
    assert seqs(log.read(after=0, limit=2, view="physical")) == [1, 2]
    assert seqs(log.last(3, view="physical")) == [2, 3, 4]
    assert seqs(log.last(4, view="physical")) == [1, 2, 3, 4]
    assert log.count(view="visible") == 3


def test_a_replacement_takes_the_place(env: Env) -> None:
    log = env.log()
    log.append_many([user("m1"), user(SECRET)])
    log.append(user("m3"))
    log.redact(2, {"role": "user", "content": "card [removed]"})
    rows = log.all()
    assert [(r.seq, r.content, r.redacted) for r in rows] == [
        (1, "m1", False),
        (2, "card [removed]", True),
        (3, "m3", False),
    ]
    assert rows[1].at == log.all(view="physical")[1].at
    assert SECRET.encode() not in everything(env, log)
    assert rows[1].as_message().content == "card [removed]"


def test_a_tool_result_keeps_its_call_id(env: Env) -> None:
    log = env.log()
    log.append_many(
        [
            {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "name": "f"}]},
            {"role": "tool", "content": SECRET, "tool_call_id": "c1"},
        ]
    )
    log.redact(2)
    row = log.all()[1]
    assert (row.role, row.tool_call_id, row.content, row.redacted) == (
        "tool",
        "c1",
        "[redacted]",
        True,
    )


def test_redacted_rows_in_views_with_other_edits(env: Env) -> None:
    log = env.log()
    log.append_many([user(f"m{i}") for i in range(1, 7)])
    log.retract([3])
    log.redact(4)
    log.redact(6, user("six"))
    assert [(r.seq, r.redacted) for r in log.all()] == [
        (1, False), (2, False), (4, True), (5, False), (6, True)
    ]  # fmt: skip
    assert seqs(log.last(3)) == [4, 5, 6]
    assert log.pop() is not None and seqs(log.all()) == [1, 2, 4, 5]
    log.archive(4)
    assert seqs(log.all(view="active")) == [5]
    assert seqs(log.all(view="archived")) == [1, 2, 4]
    log.retract([4])
    assert seqs(log.all()) == [1, 2, 5]
    fold = LogView(log.all(view="physical"), strict=True)
    assert [(r.seq, r.redacted) for r in fold.rows] == [(r.seq, r.redacted) for r in log.all()]


@pytest.mark.parametrize("bad", [0, 9, 7, 3])
def test_bad_seqs_write_nothing(env: Env, bad: int) -> None:
    log = env.log()
    log.append_many([user("m1"), user("m2")])
    log.trim(1)  # 3: the trim entry
    log.append_many([user("m4"), user("m5")])
    log.redact(5)  # 6
    log.append(user("m7"))  # 7
    log.retract([7])  # 8
    before = snapshot(env, log)
    targets = {0: 0, 9: 9, 7: 1, 3: 3}  # zero, beyond, trimmed, an edit entry
    with pytest.raises(InvalidEditError):
        log.redact(targets[bad])
    with pytest.raises(InvalidEditError, match="already redacted"):
        log.redact(5)
    assert snapshot(env, log) == before


def test_bad_arguments_write_nothing(env: Env) -> None:
    log = env.log()
    log.append_many([user("m1"), user("m2")])
    before = snapshot(env, log)
    with pytest.raises(InvalidEditError):
        log.redact("2")
    with pytest.raises(InvalidMessageError):
        log.redact(2, {"role": "nobody", "content": "x"})
    with pytest.raises(InvalidArgumentError):
        log.redact(2, reason="")
    with pytest.raises(InvalidArgumentError):
        log.redact(2, reason=5)
    assert snapshot(env, log) == before


def test_retries_are_exactly_once(env: Env) -> None:
    log = env.log()
    log.append_many([user("m1"), user(SECRET)])
    first = log.redact(2, idempotency_key="r-1")
    assert log.redact(2, idempotency_key="r-1") == first
    assert log.count() == 3


def test_a_follower_sees_the_redaction(env: Env) -> None:
    log = env.log()
    log.append_many([user("m1"), user(SECRET), user("m3")])
    early = follow_rows(env, log, 0, 3)
    assert not any(r.redacted for r in early)
    log.redact(2, user("two"))
    rows = follow_rows(env, log, 0, 4)
    assert [(r.seq, getattr(r, "redacted", None)) for r in rows[:3]] == [
        (1, False), (2, True), (3, False)
    ]  # fmt: skip
    assert isinstance(rows[3], EditEntry) and rows[3].op == "redact"
    after = follow_rows(env, log, 2, 2)  # a cursor at the redacted seq itself
    assert seqs(after) == [3, 4]
    assert rows[3].row is not None and rows[3].row.content == "two"  # read with the entry
    assert "row" not in rows[3].model_dump()  # never stored, never serialised
    fold = LogView(early)
    fold.apply(rows[3])
    assert shown(fold.rows) == shown(log.all())
    assert shown(fold.rows)[1] == (2, "two", True)


def test_verify_accepts_redactions_and_reports_tampering(env: Env) -> None:
    log = env.log()
    log.append_many([user("m1"), user(SECRET), user("m3"), user("m4")])
    log.redact(2, reason="card")
    log.redact(4, user("four"))
    log.append(user("m7"))
    assert verify_conversation(env.raw, "msglog", log.conversation).problems == []
    log.trim(2)  # through the redacted row: it goes too
    assert env.raw.hget(log.keys.view, "r:2") is None
    assert env.raw.hget(log.keys.view, "redacted") in (b"1", "1")
    assert verify_conversation(env.raw, "msglog", log.conversation).problems == []
    # A redacted row no redact entry records, and a recorded one whose row is gone:
    env.raw.hset(log.keys.view, "r:3", env.raw.hget(log.keys.view, "r:4"))
    env.raw.execute_command("XDEL", log.keys.stream, "3-0", "3-99999999999999999")
    for entry_id, _ in env.raw.xrange(log.keys.stream, "3", "3") or []:
        env.raw.xdel(log.keys.stream, entry_id or "")
    env.raw.hdel(log.keys.view, "r:4")
    problems = verify_conversation(env.raw, "msglog", log.conversation).problems
    assert any("no redact entry records" in p and "seq 3" in p for p in problems)
    assert any("redacted seq 4" in p and "no redacted row" in p for p in problems)


def image(fill: bytes, text: str = "") -> dict[str, Any]:
    parts: list[dict[str, Any]] = [{"type": "image", "data": fill * 64, "media_type": "image/png"}]
    return {
        "role": "user",
        "content": [*parts, *([{"type": "text", "text": text}] if text else [])],
    }


def test_the_blobs_only_the_redacted_row_used_are_removed(env: Env) -> None:
    log = env.log(blob_threshold=16)
    log.append(image(b"a", SECRET))  # 1: blob A, only here
    log.append_many([image(b"b"), user("m3")])  # 2: blob B, used again by 4
    log.append(image(b"b"))  # 4

    def blobs() -> set[Any]:
        return {k for k in env.raw.hkeys(log.keys.blobs) if k[:1] not in (b"^", b"_", "^", "_")}

    assert len(blobs()) == 2
    log.redact(1)
    assert len(blobs()) == 1  # A was the redacted row's alone
    log.redact(2)
    assert len(blobs()) == 1  # B is still used by seq 4
    assert not isinstance(log.all()[-1].content, str)
    assert log.all()[-1].content[0].data == b"b" * 64
    assert SECRET.encode() not in everything(env, log) and b"a" * 64 not in everything(env, log)
    with pytest.raises(InvalidMessageError, match="inline"):
        log.redact(3, image(b"c"))  # a replacement over the blob threshold


def test_erase_and_fork_of_a_redacted_log(env: Env) -> None:
    log = env.log()
    log.append_many([user("m1"), user(SECRET), user("m3")])
    log.redact(2)
    fork = env.log(log.fork(new_id()).conversation)  # the redacted row is copied, as it is
    assert [r.content for r in fork.all()] == ["m1", "[redacted]", "m3"]
    assert SECRET.encode() not in everything(env, fork)
    log.erase()
    assert env.raw.exists(log.keys.view) == 0 and log.all() == []


def test_the_rewrite_keeps_the_streams_expiry(env: Env) -> None:
    """The rewritten stream is a new key: a log object without ``ttl`` redacting a log
    written with one left the stream without an expiry (kept forever) until the script
    carried the expiry over."""
    from datetime import timedelta

    writer = env.log(ttl=timedelta(hours=1))
    writer.append_many([user("m1"), user(SECRET), user("m3")])
    plain = env.log(writer.conversation)  # no ttl of its own
    plain.redact(2)
    assert 0 < env.raw.pttl(writer.keys.stream) <= 3_600_000
    assert [r.redacted for r in writer.all()] == [False, True, False]


def test_the_acl_refuses_a_redaction_without_deletions(shared_server: Any) -> None:
    """acl_rules() without deletions=True: XDEL is refused before anything is written;
    with it, the redaction goes through."""
    server = acl_server(shared_server)  # the user as acl_rules() makes it: no XDEL
    user_client = redis.Redis.from_url(server.url, username=ACL_USER, password=ACL_PASSWORD)
    admin = redis.Redis.from_url(server.url)
    log = MessageLog(user_client, new_id())
    log.append_many([user("m1"), user(SECRET)])
    keys = [log.keys.seq, log.keys.stream, log.keys.view, log.keys.hidden, log.keys.blobs]
    before = {key: admin.dump(key) for key in keys}
    with pytest.raises(PermissionDeniedError, match="XDEL"):
        log.redact(2)
    assert {key: admin.dump(key) for key in keys} == before
    rules = acl_rules(redis_version=server_version(admin), deletions=True)
    admin.execute_command("ACL", "SETUSER", ACL_USER, "reset", "on", f">{ACL_PASSWORD}", *rules)
    try:
        assert log.redact(2) == 3
        assert log.all()[1].redacted
    finally:
        acl_server(shared_server)  # the user as the other tests expect it


REDACT_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(1, 3)),
        st.tuples(st.just("redact"), st.integers(0, 50)),
        st.tuples(st.just("redact"), st.integers(0, 50)),
        st.tuples(st.just("retract"), st.integers(0, 50)),
        st.tuples(st.just("pop"), st.integers(0, 1)),
        st.tuples(st.just("compact"), st.integers(0, 50)),
        st.tuples(st.just("archive"), st.integers(0, 50)),
        st.tuples(st.just("trim"), st.integers(0, 50)),
    ),
    min_size=1,
    max_size=16,
)


def _redact_edit(log: Any, fold: LogView, messages: list[int], op: str, arg: int) -> list[int]:
    """Make the edit ``op``; return the message seqs still kept (not trimmed)."""
    rows = fold.rows
    if op == "append":
        log.append_many([user(f"m{fold.last_seq + 1 + k}") for k in range(arg)])
    elif op == "redact" and messages:
        seq = messages[arg % len(messages)]
        try:
            log.redact(seq, reason=f"r{seq}")
        except InvalidEditError as exc:
            assert "already redacted" in str(exc)
    elif op == "retract" and rows:
        log.retract([rows[arg % len(rows)].seq])
    elif op == "pop":
        log.pop()
    elif op == "compact" and rows:
        log.compact([user("summary")], through_seq=rows[arg % len(rows)].seq)
    elif op == "archive" and fold.active():
        log.archive(fold.active()[arg % len(fold.active())].seq)
    elif op == "trim" and messages:
        through = messages[arg % len(messages)]
        log.trim(through)
        return [s for s in messages if s > through]
    return messages


def shown(rows: list[Any]) -> list[tuple[int, Any, bool]]:
    return [(r.seq, r.content, r.redacted) for r in rows]


@pytest.mark.parametrize("kind", ["valkey", "fakeredis"])
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=REDACT_OPS)
def test_redactions_among_edits_match_a_followers_fold(
    kind: str, shared_server: Any, ops: list[tuple[str, int]]
) -> None:
    """A follower's fold of every entry as it was written is what every view and read
    returns (the redacted rows in place, as markers), at every page size and cut, and
    ``msglog verify`` finds nothing wrong."""
    if kind == "valkey":
        client: redis.Redis = redis.Redis.from_url(shared_server("valkey").url)
    else:
        import fakeredis

        client = fakeredis.FakeRedis()
    log = MessageLog(client, new_id(), page_size=3)
    fold = LogView(strict=True)
    messages: list[int] = []
    for op, arg in ops:
        messages = _redact_edit(log, fold, messages, op, arg)
        for entry in log.read(fold.last_seq, view="physical"):
            fold.apply(entry)
            if isinstance(entry, StoredMessage):
                messages.append(entry.seq)
        assert shown(log.all()) == shown(fold.rows)
        assert shown(log.all(view="active")) == shown(fold.active())
        assert shown(log.all(view="archived")) == shown(fold.archived())
        assert log.count(view="visible") == len(fold.rows)
        for n in (1, 2, 4):
            assert shown(log.last(n)) == shown(fold.rows)[-n:]
        assert shown(log.read(after=0, limit=2)) == shown(fold.rows)[:2]
        physical = log.all(view="physical")
        first = physical[0].seq if physical else 1
        assert seqs(physical) == list(range(first, fold.last_seq + 1))
        assert seqs(log.last(4, view="physical")) == seqs(physical)[-4:]
        if physical:
            assert seqs(log.read(after=first, limit=3, view="physical")) == seqs(physical)[1:4]
    if fold.last_seq:
        assert verify_conversation(client, "msglog", log.conversation).problems == []
