"""The reference API's contract, on every backend and through both shells."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import orjson
import pytest

from redis_msglog import AgentMessage, ConversationKeys, LogRewoundError, StoredMessage, ToolCall
from redis_msglog._core.stored.codec import micros_to_datetime

from ..conftest import Env, new_id

TOOL_TURN = {
    "role": "assistant",
    "content": "",
    "toolCalls": [{"id": "call_1", "name": "search", "args": {"q": "redis", "n": 3}}],
}
TOOL_RESULT = {"role": "tool", "content": '{"hits": 3}', "name": "search", "toolCallId": "call_1"}


def test_add_assigns_gap_free_seqs_from_one(env: Env) -> None:
    log = env.log()
    assert [log.add("user", f"m{i}") for i in range(5)] == [1, 2, 3, 4, 5]
    assert log.count() == 5
    assert [m.content for m in log.all()] == [f"m{i}" for i in range(5)]


def test_append_accepts_models_camel_and_snake_case(env: Env) -> None:
    log = env.log()
    snake = {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": "c", "name": "f", "args": [1, "x"]}],
    }
    model = AgentMessage(role="tool", content="ok", tool_call_id="c")
    assert log.append(TOOL_TURN) == 1
    assert log.append(snake) == 2
    assert log.append(model) == 3
    first, second, third = log.all()
    assert first.tool_calls == [ToolCall(id="call_1", name="search", args={"q": "redis", "n": 3})]
    assert second.tool_calls is not None and second.tool_calls[0].args == [1, "x"]
    assert third.tool_call_id == "c" and third.role == "tool"


def test_stored_rows_carry_seq_and_server_time(env: Env) -> None:
    log = env.log()
    before = datetime.now(timezone.utc)
    log.append_many([TOOL_TURN, TOOL_RESULT])
    rows = log.all()
    assert [r.seq for r in rows] == [1, 2]
    for row in rows:
        assert isinstance(row, StoredMessage)
        assert row.at.tzinfo is not None and row.at.utcoffset() == timedelta(0)
        # The server's clock, not ours: same machine here, so within a few seconds.
        assert abs(row.at - before) < timedelta(seconds=30)
    assert rows[0].at == rows[1].at  # one commit, one timestamp
    assert rows[1].model_dump(exclude={"seq", "at", "redacted"}) == {
        "role": "tool",
        "content": '{"hits": 3}',
        "name": "search",
        "tool_calls": None,
        "tool_call_id": "call_1",
        "id": None,
        "metadata": None,
        "extras": None,
        "usage": None,
        "draft": None,
        "interrupted": False,
    }


def test_append_many_returns_last_seq_and_empty_batch_returns_count(env: Env) -> None:
    log = env.log()
    assert log.append_many([]) == 0
    assert log.append_many([{"role": "user", "content": str(i)} for i in range(3)]) == 3
    assert log.append_many([]) == 3
    assert log.append_many(iter([{"role": "user", "content": "gen"}])) == 4
    assert env.raw.xlen(ConversationKeys.build("msglog", log.conversation).stream) == 4


def test_last_and_last_n(env: Env) -> None:
    log = env.log()
    assert log.last() is None
    assert log.last(3) == []
    log.append_many([{"role": "user", "content": str(i)} for i in range(1, 8)])
    last = log.last()
    assert last is not None and last.seq == 7 and last.content == "7"
    assert [m.seq for m in log.last(3)] == [5, 6, 7]
    assert log.last(0) == []
    assert [m.seq for m in log.last(100)] == list(range(1, 8))
    with pytest.raises(ValueError):
        log.last(-1)


def test_paging_crosses_page_boundaries(env: Env) -> None:
    log = env.log(page_size=3)
    log.append_many([{"role": "user", "content": str(i)} for i in range(1, 11)])
    assert [m.seq for m in log.all()] == list(range(1, 11))
    assert [m.seq for m in log.last(7)] == list(range(4, 11))
    assert [m.seq for m in log.read(after=2, limit=5)] == [3, 4, 5, 6, 7]
    assert [m.seq for m in log.read(after=8)] == [9, 10]
    assert [m.seq for m in log.read(after=0, limit=100)] == list(range(1, 11))


def test_read_is_a_cursor(env: Env) -> None:
    log = env.log()
    log.append_many([{"role": "user", "content": str(i)} for i in range(1, 6)])
    assert [m.seq for m in log.read()] == [1, 2, 3, 4, 5]
    assert [m.seq for m in log.read(after=3)] == [4, 5]
    assert [m.seq for m in log.read(after=1, limit=2)] == [2, 3]
    assert log.read(after=5) == []
    with pytest.raises(LogRewoundError, match="beyond the end"):
        log.read(after=99)  # a cursor past the end: a rewound log, or another log's cursor
    assert log.read(limit=0) == []
    for bad in ({"after": -1}, {"limit": -1}):
        with pytest.raises(ValueError):
            log.read(**bad)


def test_two_logs_on_one_conversation_share_it(env: Env) -> None:
    conversation = new_id()
    writer_a, writer_b = env.log(conversation), env.log(conversation)
    assert writer_a.add("user", "from a") == 1
    assert writer_b.add("assistant", "from b") == 2
    assert [m.content for m in writer_a.all()] == ["from a", "from b"]


def test_on_append_gets_rows_exactly_as_persisted(env: Env) -> None:
    calls: list[list[StoredMessage]] = []
    log = env.log(on_append=calls.append)
    log.add("user", "hi")
    log.append_many([TOOL_TURN, TOOL_RESULT])
    log.append_many([])  # writes nothing, fires nothing
    assert [[r.seq for r in call] for call in calls] == [[1], [2, 3]]
    assert [row for call in calls for row in call] == log.all()


def test_hook_failure_propagates_and_rows_stay_committed(env: Env) -> None:
    def explode(rows: list[StoredMessage]) -> None:
        raise RuntimeError("hook failed")

    log = env.log(on_append=explode)
    with pytest.raises(RuntimeError, match="hook failed"):
        log.add("user", "kept")
    assert log.count() == 1
    assert log.all()[0].content == "kept"


def test_unicode_and_json_looking_content_round_trip(env: Env) -> None:
    log = env.log()
    texts = ["héllo wörld", "日本語テキスト", "emoji 🧪🚀", '{"role": "system"}', "\x00nul\x00", ""]
    log.append_many([{"role": "user", "content": t} for t in texts])
    assert [m.content for m in log.all()] == texts


def test_multi_megabyte_content_round_trips(env: Env) -> None:
    log = env.log()
    big = ("ünïcödé-" * 400_000)[:3_000_000]  # ~3M chars, ~4.4 MB of UTF-8
    assert log.add("assistant", big) == 1
    stored = log.last()
    assert stored is not None and stored.content == big


def test_ids_with_braces_are_escaped_and_never_collide(env: Env) -> None:
    ids = ["a{b}c", "a%7Bb%7Dc", "{", "}", "%", "a}{b", "plain"]
    keys = {ConversationKeys.build("msglog", c).stream for c in ids}
    assert len(keys) == len(ids)
    prefix = f"msglog:{new_id()}"  # fixed ids: keep this run apart from the others
    for index, conversation in enumerate(ids):
        env.log(conversation, prefix=prefix).add("user", str(index))
    for index, conversation in enumerate(ids):
        assert [m.content for m in env.log(conversation, prefix=prefix).all()] == [str(index)]


def test_key_layout_is_what_the_readme_documents(env: Env) -> None:
    prefix = f"msglog:{new_id()}"  # under msglog:*, the ACL backend's key pattern
    log = env.log("conv-42", prefix=prefix)
    log.append(TOOL_TURN)
    assert log.keys.seq == f"{prefix}:{{conv-42}}:seq"
    assert log.keys.channel == f"{prefix}:{{conv-42}}:events"
    assert env.raw.get(f"{prefix}:{{conv-42}}:seq") == b"1"
    entries = env.raw.xrange(f"{prefix}:{{conv-42}}:stream")
    assert entries is not None
    [(entry_id, fields)] = entries
    assert isinstance(entry_id, bytes)
    seq, _, at = entry_id.partition(b"-")  # entry ID "<seq>-<at>": the commit time in it
    assert seq == b"1" and fields is not None
    assert int(at) > 1_700_000_000_000_000  # microseconds since the epoch
    assert set(fields) == {b"msg"}
    assert orjson.loads(fields[b"msg"]) == TOOL_TURN  # camelCase, no null fields
    [row] = log.all()
    assert row.at == micros_to_datetime(int(at))


def test_clients_with_decode_responses(env: Env) -> None:
    from redis_msglog import AsyncMessageLog, MessageLog

    from ..conftest import SyncView

    conversation = new_id()
    log: MessageLog | SyncView
    if env.flavor == "sync":
        log = MessageLog(env.make_sync_client(decode_responses=True), conversation)
    else:
        client = env.make_async_client(decode_responses=True)
        env._async_clients.append(client)
        log = SyncView(AsyncMessageLog(client, conversation), env.loop)
    log.append_many([TOOL_TURN, TOOL_RESULT])
    assert [m.seq for m in log.all()] == [1, 2]
    assert log.last(1)[0].tool_call_id == "call_1"


def test_stored_message_can_be_appended_to_another_log(env: Env) -> None:
    source, target = env.log(), env.log()
    source.append(TOOL_TURN)
    row = source.last()
    assert row is not None
    target.append(row)
    copied = target.last()
    assert copied is not None
    assert copied.as_message() == row.as_message()
