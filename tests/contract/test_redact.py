"""redact(seq, replacement) (docs/lifecycle.md, "Redacting a message"): the message at a
seq is removed from Redis (with the blobs only it used) and a row marked ``redacted``
takes its place in every read, view and follower; one ``redact`` edit entry records it.
Every backend (cluster and ACL included), both clients; bad input writes nothing (a DUMP
of every key before and after); the original's text is nowhere in Redis afterwards."""

from __future__ import annotations

from typing import Any

import pytest

from redis_msglog import (
    EditEntry,
    InvalidArgumentError,
    InvalidEditError,
    InvalidMessageError,
    LogView,
    StoredMessage,
)

from ..conftest import ACL_USER, Env

SECRET = "card 4111-1111-1111-1111 sec-7f3a"


@pytest.fixture(autouse=True)
def _deletions_granted(request: pytest.FixtureRequest) -> None:
    """The ACL backend's user as ``acl_rules(deletions=True)`` makes it: redact may XDEL."""
    if "env" in request.fixturenames:
        env: Env = request.getfixturevalue("env")
        if env.backend == "acl":
            env.raw.execute_command("ACL", "SETUSER", ACL_USER, "+xtrim", "+xdel")


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
    """Every value of every key of the conversation, as one byte string."""
    out = []
    for key in keys_of(log):
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
    assert log.redact(2, reason="a card number") == 4
    assert SECRET.encode() not in everything(env, log)
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
    log.redact(2)
    rows = follow_rows(env, log, 0, 4)
    assert [(r.seq, getattr(r, "redacted", None)) for r in rows[:3]] == [
        (1, False), (2, True), (3, False)
    ]  # fmt: skip
    assert isinstance(rows[3], EditEntry) and rows[3].op == "redact"
    after = follow_rows(env, log, 2, 2)  # a cursor at the redacted seq itself
    assert seqs(after) == [3, 4]
    fold = LogView(early)
    fold.apply(rows[3])
    assert [(r.seq, r.redacted) for r in fold.rows] == [(r.seq, r.redacted) for r in log.all()]
