"""What a view read costs and what it sees (docs/edits.md, "Cost" and "Snapshots").

The cost is checked by its structure, never by a clock: the commands the view script
runs, and the bytes of the view hash it reads, for ``last(10)`` and ``count(view=...)``
do not grow with the segments (compactions) or the hidden ranges (retractions) of the
view (``benchmarks/view_cost.py`` gives the server time). A view read under a steady
editor completes with one snapshot (one script call returns the view's runs of seqs);
only a view of more runs than one call returns can still have to be read again, and
that is its own error. Also: the cap of ``retract``,
views written by earlier versions (one ``segments`` field), and ``msglog verify``.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from redis_msglog import (
    ConversationKeys,
    CorruptLogError,
    InvalidEditError,
    LogView,
    MessageLog,
    PagedReadRetryError,
    StorageError,
)
from redis_msglog._core.read import views as views_module
from redis_msglog.admin import verify_conversation
from redis_msglog.testing import EphemeralServer

from ..conftest import Env, new_id, require_frameworks
from .test_edits import OPS, _apply, assert_views_match_the_fold, seqs, snapshot


def user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


# -- cost, by structure --------------------------------------------------------------


def _built(client: redis.Redis, *, compactions: int, retracted: int) -> MessageLog:
    """A log with about ``2 * compactions`` segments and ``retracted`` hidden ranges,
    whose tail (30 messages, the archive watermark among them) is the same whatever
    the two numbers."""
    log = MessageLog(client, new_id())
    for i in range(compactions):
        log.append_many([user(f"a{i}"), user(f"b{i}")])
        log.compact([user(f"summary {i}")], through_seq=0)  # a segment in front, one closed
    if retracted:
        first = log.append_many([user(f"r{i}") for i in range(2 * retracted)]) - 2 * retracted
        doomed = list(range(first + 1, first + 2 * retracted + 1, 2))  # every other one
        for start in range(0, len(doomed), views_module.MAX_RETRACT):
            log.retract(doomed[start : start + views_module.MAX_RETRACT])
    last = log.append_many([user(f"tail {i}") for i in range(30)])
    log.archive(last - 20)
    return log


class ScriptTrace:
    """The commands scripts run while ``run()`` runs, seen through ``MONITOR``."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client

    def __call__(self, run: Callable[[], object]) -> list[list[str]]:
        sentinel = f"trace-end-{new_id()}"
        with self.client.monitor() as monitor:
            run()
            self.client.echo(sentinel)
            commands: list[list[str]] = []
            while True:
                seen = monitor.next_command()
                if sentinel in seen["command"]:
                    return commands
                if seen["client_type"] == "lua":
                    commands.append(seen["command"].split(" "))


def _view_bytes(client: redis.Redis, keys: ConversationKeys, commands: list[list[str]]) -> int:
    """The bytes of the view hash fields the commands read."""
    total = 0
    for name, *args in commands:
        if name.upper() in ("HGET", "HMGET") and args[0] == keys.view:
            total += sum(int(client.hstrlen(keys.view, field)) for field in args[1:])
    return total


def _cost(client: redis.Redis, log: MessageLog, read: Callable[[], object]) -> tuple[int, int]:
    read()  # the script is loaded, the log known to have edits
    commands = ScriptTrace(client)(read)
    assert commands, "the read ran no script"
    return len(commands), _view_bytes(client, log.keys, commands)


READS: dict[str, Callable[[MessageLog], object]] = {
    "last(10)": lambda log: log.last(10),
    "last(10, active)": lambda log: log.last(10, view="active"),
    "count(visible)": lambda log: log.count(view="visible"),
    "count(active)": lambda log: log.count(view="active"),
    "count(archived)": lambda log: log.count(view="archived"),
}


@pytest.mark.parametrize("read", list(READS))
def test_a_view_read_does_not_grow_with_segments_or_hidden_ranges(
    private_server: Callable[..., EphemeralServer], read: str
) -> None:
    client = redis.Redis.from_url(private_server("redis").url, decode_responses=True)
    few = _built(client, compactions=3, retracted=3)
    many = _built(client, compactions=400, retracted=2500)
    assert len(few.all()) < 60 < 2000 < len(many.all())
    assert client.zcard(many.keys.hidden) > 2500  # the ranges, and the segments by seq
    small_commands, small_bytes = _cost(client, few, lambda: READS[read](few))
    large_commands, large_bytes = _cost(client, many, lambda: READS[read](many))
    assert large_commands <= small_commands + 2, (small_commands, large_commands)
    assert large_bytes <= 2 * small_bytes + 64, (small_bytes, large_bytes)


# -- snapshots under a steady editor --------------------------------------------------


def _edited_log(url: str, base: int, page_size: int) -> tuple[MessageLog, int]:
    log = MessageLog(redis.Redis.from_url(url), new_id(), page_size=page_size)
    log.append_many([user(f"base {i}") for i in range(base)])
    first_edit_row = log.add("user", "edit 0")
    log.retract([1])  # the log has edits: its views are read by the view script
    return log, first_edit_row


def _edit_once(editor: MessageLog, state: list[int]) -> None:
    """Add an "edit" row, then retract the previous one: every snapshot of the view
    holds the base rows and one or two "edit" rows."""
    state.append(editor.add("user", f"edit {len(state)}"))
    editor.retract([state[-2]])


def _assert_one_snapshot(rows: list[Any], base: int) -> None:
    contents = [row.content for row in rows]
    assert contents[: base - 1] == [f"base {i}" for i in range(1, base)]
    assert 1 <= len(contents) - (base - 1) <= 2
    assert all(text.startswith("edit ") for text in contents[base - 1 :])


def test_a_view_read_completes_under_a_steady_editor(shared_server: Any) -> None:
    url = shared_server("redis").url
    base = 60
    log, first = _edited_log(url, base, page_size=5)  # many pages, before this fix
    editor = MessageLog(redis.Redis.from_url(url), log.conversation)
    stop = threading.Event()
    edits: list[int] = [first]
    failures: list[BaseException] = []

    def edit() -> None:
        try:
            while not stop.is_set():
                _edit_once(editor, edits)
        except BaseException as exc:  # reported by the test, not lost in the thread
            failures.append(exc)

    thread = threading.Thread(target=edit)
    thread.start()
    try:
        for _ in range(150):
            _assert_one_snapshot(log.all(), base)
            assert len(log.last(base + 5)) in (base, base + 1)
    finally:
        stop.set()
        thread.join(timeout=30)
    assert not failures and len(edits) > 20  # the editor was really editing meanwhile
    assert_views_match_the_fold(log)


@pytest.fixture
def edit_after_every_call(
    shared_server: Any, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[MessageLog, int]]:
    """A log whose every view script call is followed by an edit (deterministic)."""
    url = shared_server("redis").url
    log, first = _edited_log(url, 60, page_size=5)
    editor = MessageLog(redis.Redis.from_url(url), log.conversation)
    edits = [first]
    original = views_module.ViewReads._call

    def call_then_edit(self: Any, *args: Any) -> Any:
        reply = yield from original(self, *args)
        _edit_once(editor, edits)
        return reply

    monkeypatch.setattr(views_module.ViewReads, "_call", call_then_edit)
    yield log, 60


def test_a_view_read_is_one_call_up_to_its_runs_budget(
    edit_after_every_call: tuple[MessageLog, int],
) -> None:
    log, base = edit_after_every_call
    for _ in range(3):
        _assert_one_snapshot(log.all(), base)


def test_a_larger_view_changing_under_every_page_is_its_own_error(
    edit_after_every_call: tuple[MessageLog, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    log, _ = edit_after_every_call
    monkeypatch.setattr(views_module, "VIEW_READ_RUNS", 1)  # one run of rows a call
    with pytest.raises(PagedReadRetryError, match="read it with a limit") as raised:
        log.all()
    assert isinstance(raised.value, StorageError)  # what callers caught before
    rows = log.read(after=0, limit=5)  # one call: a snapshot, whatever the edits
    assert [row.content for row in rows] == [f"base {i}" for i in range(1, 6)]


# -- the cap of retract --------------------------------------------------------------


def test_retract_takes_at_most_its_cap_and_writes_nothing_beyond(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    cap = views_module.MAX_RETRACT
    log = env.log()
    log.append_many([user(f"m{i}") for i in range(cap + 1)])
    before = snapshot(env, log)
    with pytest.raises(InvalidEditError, match=f"at most {cap} seqs"):
        log.retract(range(1, cap + 2))
    monkeypatch.setattr(views_module, "MAX_RETRACT", cap + 1)  # the server refuses too
    with pytest.raises(InvalidEditError, match=f"more than {cap} seqs"):
        log.retract(range(1, cap + 2))
    assert snapshot(env, log) == before
    assert log.retract(range(1, cap + 1)) == cap + 2  # the cap itself is fine
    assert seqs(log.all()) == [cap + 1]


# -- views written by earlier versions ---------------------------------------------------


def to_earlier_form(raw: redis.Redis, keys: ConversationKeys) -> None:
    """Rewrite the view keys as earlier versions wrote them: the segments in one field
    ``segments`` ("13-14,7-11,16-"), no counts, no segments by seq in the hidden zset."""
    fields = {_text(k): _text(v) for k, v in raw.hgetall(keys.view).items()}
    if not fields or "segments" in fields:
        return  # no view yet, or already of the earlier form
    front, back = int(fields["front"]), int(fields["back"])
    segments = ",".join(fields[f"g{pos}"] for pos in range(front, back + 1))
    raw.hdel(keys.view, *[f for f in fields if f[0] == "g" or f in _NEW_FIELDS])
    raw.hset(keys.view, "segments", segments)
    members = [m for m in map(_text, raw.zrange(keys.hidden, 0, -1)) if m.startswith("@")]
    if members:
        raw.zrem(keys.hidden, *members)


_NEW_FIELDS = {"front", "back", "rows", "archivedrows"}


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


@pytest.mark.parametrize("kind", ["redis", "fakeredis"])
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=OPS, earlier=st.lists(st.booleans(), min_size=14, max_size=14))
def test_views_of_earlier_versions_are_read_and_rewritten_by_the_next_edit(
    kind: str, shared_server: Any, ops: list[tuple[str, int]], earlier: list[bool]
) -> None:
    if kind == "redis":
        client: redis.Redis = redis.Redis.from_url(shared_server("redis").url)
    else:
        import fakeredis

        client = fakeredis.FakeRedis()
    log = MessageLog(client, new_id(), page_size=3)
    fold = LogView()
    for (op, arg), downgrade in zip(ops, earlier, strict=False):
        if downgrade:
            to_earlier_form(client, log.keys)
            fold = assert_views_match_the_fold(log)  # the earlier form, read
        _apply(log, op, arg, fold)
        fold = assert_views_match_the_fold(log)  # rewritten by an edit, or still earlier


def test_the_next_edit_rewrites_a_view_of_an_earlier_version(env: Env) -> None:
    log = env.log()
    log.append_many([user(f"m{i}") for i in range(8)])
    log.compact([user("summary")], through_seq=3)
    log.retract([5])
    log.archive(6)
    to_earlier_form(env.raw, log.keys)
    assert env.raw.hexists(log.keys.view, "segments")
    fold = assert_views_match_the_fold(log)  # read as it is
    before = snapshot(env, log)
    log.all(), log.last(2), log.count(view="active")  # reads change nothing
    assert snapshot(env, log) == before
    log.retract([7])
    assert not env.raw.hexists(log.keys.view, "segments")
    assert env.raw.hget(log.keys.view, "rows") is not None
    fold = assert_views_match_the_fold(log)
    assert seqs(fold.rows) == [10, 4, 6, 8]


@settings(max_examples=25, deadline=None)
@given(ops=OPS)
def test_views_read_in_many_small_calls_equal_the_fold(ops: list[tuple[str, int]]) -> None:
    import fakeredis

    saved = views_module.VIEW_READ_RUNS
    views_module.VIEW_READ_RUNS = 1  # every call one run of rows
    try:
        log = MessageLog(fakeredis.FakeRedis(), new_id(), page_size=2)
        fold = LogView()
        for op, arg in ops:
            _apply(log, op, arg, fold)
            fold = assert_views_match_the_fold(log)
            for after, limit in itertools.product((0, min(2, fold.last_seq)), (1, 3, 7)):
                expected = [s for s in seqs(fold.rows) if s > after][:limit]
                assert seqs(log.read(after=after, limit=limit)) == expected
                active = [s for s in seqs(fold.active()) if s > after][:limit]
                assert seqs(log.read(after=after, limit=limit, view="active")) == active
    finally:
        views_module.VIEW_READ_RUNS = saved


# -- msglog verify ---------------------------------------------------------------------


@pytest.mark.parametrize("field", ["rows", "archivedrows"])
def test_verify_reports_view_counts_that_are_not_the_fold(env: Env, field: str) -> None:
    log = env.log()
    log.append_many([user(f"m{i}") for i in range(6)])
    log.retract([2])
    log.archive(4)
    assert verify_conversation(env.raw, "msglog", log.conversation).problems == []
    env.raw.hincrby(log.keys.view, field, 1)
    problems = verify_conversation(env.raw, "msglog", log.conversation).problems
    assert any("count" in text for text in problems), problems


@pytest.mark.frameworks
def test_llama_index_deletes_more_rows_than_one_retract_takes(
    shared_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    require_frameworks()
    import asyncio

    from llama_index.core.base.llms.types import ChatMessage
    from llama_index.core.storage.chat_store.base_db import MessageStatus

    from redis_msglog.integrations import llama_index

    monkeypatch.setattr(views_module, "MAX_RETRACT", 3)
    monkeypatch.setattr(llama_index, "MAX_RETRACT", 3)
    url = shared_server("redis").url
    key = new_id()

    async def main() -> tuple[list[Any], list[Any], int]:
        store = llama_index.MessageLogChatStore.from_url(url)
        messages = [ChatMessage(role="user", content=f"m{i}") for i in range(12)]
        await store.add_messages(key, messages)
        await store.archive_oldest_messages(key, 2)  # m0, m1 archived
        deleted = await store.delete_oldest_messages(key, 7)  # m2..m8, in three retracts
        await store.delete_messages(key, status=MessageStatus.ARCHIVED)
        left = await store.get_messages(key, status=None)
        count = await store.count_messages(key, None)
        await store.aclose()
        return deleted, left, count

    deleted, left, count = asyncio.run(main())
    assert [m.content for m in deleted] == [f"m{i}" for i in range(2, 9)]
    assert [m.content for m in left] == ["m9", "m10", "m11"] and count == 3


EVERY_CALL = ("retract", "archive", "compact", "all", "last", "count")
DAMAGES: list[tuple[Callable[[Any, ConversationKeys], object], tuple[str, ...]]] = [
    # A view read or an edit reads the runs it walks, and the fields every call reads:
    # each damage is found by the calls that reach it (``msglog verify`` reaches all).
    (lambda raw, keys: raw.hset(keys.view, "g0", "garbage"), ("compact", "all", "last")),
    (lambda raw, keys: raw.hset(keys.view, "g1", "4-"), ("retract", "archive", "all", "count")),
    (lambda raw, keys: raw.hdel(keys.view, "g0"), ("compact", "all", "last")),
    (lambda raw, keys: raw.hset(keys.view, "back", "x"), EVERY_CALL),
    (lambda raw, keys: raw.hset(keys.view, "rows", "x"), EVERY_CALL),
    (lambda raw, keys: raw.hdel(keys.view, "archivedrows"), EVERY_CALL),
    (lambda raw, keys: raw.zadd(keys.hidden, {"@x": -4}), ("retract", "archive", "count")),
]


@pytest.mark.parametrize("damage, reached_by", DAMAGES)
def test_damaged_runs_and_counts_are_an_error_and_nothing_is_written(
    env: Env, damage: Callable[[Any, ConversationKeys], object], reached_by: tuple[str, ...]
) -> None:
    log = env.log()
    log.append_many([user(f"m{i}") for i in range(6)])
    log.compact([user("summary")], through_seq=2)  # runs g0 (the summary), g1, g2 (open)
    log.archive(4)
    damage(env.raw, log.keys)
    before = snapshot(env, log)
    calls: dict[str, Callable[[], object]] = {
        "retract": lambda: log.retract([4]),
        "archive": lambda: log.archive(5),
        "compact": lambda: log.compact([user("again")], through_seq=5),
        "all": lambda: log.all(),
        "last": lambda: log.last(10),
        "count": lambda: log.count(view="active"),
    }
    for name in reached_by:
        with pytest.raises(CorruptLogError):
            calls[name]()
    assert snapshot(env, log) == before
    report = verify_conversation(env.raw, "msglog", log.conversation)
    assert report.problems, "msglog verify must report it"
