"""Switching keeps history: what the frameworks' own Redis stores hold (written by the
REAL stores: the Agents SDK's RedisSession, LlamaIndex's RedisChatStore; LangChain's
layout with langchain-core's own serializer, langchain-community not being installed) is
imported into the log, read back through our integrations message by message, written
once however often the import runs, and refused whole for a key with a corrupt row."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
import redis.asyncio
from agents.extensions.memory.redis_session import RedisSession
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import (
    AIMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    message_to_dict,
    messages_from_dict,
)
from llama_index.core.base.llms.types import ChatMessage, ImageBlock, TextBlock, ToolCallBlock
from llama_index.storage.chat_store.redis import RedisChatStore

from redis_msglog import MessageLog
from redis_msglog._cli import main
from redis_msglog.integrations.langchain import MessageLogChatHistory
from redis_msglog.integrations.llama_index import MessageLogBaseChatStore
from redis_msglog.integrations.migrate import (
    SourceChangedError,
    SourceRowError,
    import_from,
    import_from_redis_chat_message_history,
    import_from_redis_chat_store,
    import_from_redis_session,
)
from redis_msglog.integrations.openai_agents import MessageLogSession
from redis_msglog.testing import EphemeralServer

from ..conftest import new_id
from ..support.cluster import LocalCluster

pytestmark = pytest.mark.frameworks

ITEMS: list[Any] = [
    {"role": "user", "content": "weather in Paris?"},
    {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAA=="},
    {
        "type": "function_call",
        "call_id": "c1",
        "name": "weather",
        "arguments": '{"city": "Paris"}',
        "id": "fc_1",
        "status": "completed",
    },
    {"type": "function_call_output", "call_id": "c1", "output": "18C"},
    {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": None},
    {
        "type": "message",
        "role": "assistant",
        "id": "msg_1",
        "status": "completed",
        "content": [{"type": "output_text", "text": "18C and sunny", "annotations": []}],
    },
]
LC_MESSAGES = [
    SystemMessage("be brief"),
    HumanMessage("add 1 and 2", id="h1"),
    AIMessage("", tool_calls=[{"name": "add", "args": {"a": 1, "b": 2}, "id": "t1"}]),
    ToolMessage("3", tool_call_id="t1"),
    AIMessage("3", response_metadata={"model": "m"}),
]
LI_MESSAGES = [
    ChatMessage(role="system", content="be brief"),
    ChatMessage(
        role="user",
        blocks=[TextBlock(text="what is this?"), ImageBlock(url="https://example.com/a.png")],
    ),
    ChatMessage(
        role="assistant",
        blocks=[ToolCallBlock(tool_call_id="c1", tool_name="look", tool_kwargs={"q": 1})],
    ),
    ChatMessage(role="tool", content="a cat", additional_kwargs={"tool_call_id": "c1"}),
    ChatMessage(role="assistant", content="a cat", additional_kwargs={"k": {"n": None}}),
]


@pytest.fixture(params=["redis", "valkey"])
def url(request: pytest.FixtureRequest, shared_server: Callable[[str], EphemeralServer]) -> str:
    return shared_server(request.param).url


@pytest.fixture
def client(url: str) -> Iterator[redis.Redis]:
    made = redis.Redis.from_url(url)
    yield made
    made.close()


def agents_write(url: str, session_id: str, items: list[Any], **options: Any) -> list[Any]:
    """Items written by the SDK's RedisSession, and what it reads back."""

    async def main() -> list[Any]:
        aclient = redis.asyncio.Redis.from_url(url)
        session = RedisSession(session_id, redis_client=aclient, **options)
        await session.add_items(items)
        read = await session.get_items()
        await session.close()
        await aclient.aclose()  # a client passed in is the caller's to close
        return read

    return asyncio.run(main())


def agents_read(url: str, session_id: str) -> list[Any]:
    async def main() -> list[Any]:
        session = MessageLogSession.from_url(session_id, url=url)
        items = await session.get_items()
        await session.close()
        return items

    return asyncio.run(main())


def lc_write(client: redis.Redis, session_id: str, messages: list[Any], prefix: str) -> None:
    """Written by langchain-community's RedisChatMessageHistory where it is installed;
    else its layout (``add_message``: ``LPUSH`` of ``json.dumps(message_to_dict(m))``),
    with langchain-core's own serializer."""
    try:
        from langchain_community.chat_message_histories import RedisChatMessageHistory
    except ModuleNotFoundError:
        for message in messages:
            client.lpush(prefix + session_id, json.dumps(message_to_dict(message)))
        return
    url = "redis://{host}:{port}/0".format(**client.connection_pool.connection_kwargs)
    RedisChatMessageHistory(session_id, url=url, key_prefix=prefix).add_messages(messages)


def dumps(items: list[Any]) -> list[str]:
    return [json.dumps(item, sort_keys=True) for item in items]


def test_a_redis_session_imports_item_by_item_and_once(url: str, client: redis.Redis) -> None:
    sid = new_id()
    theirs = agents_write(url, sid, ITEMS, ttl=600)
    [first] = import_from_redis_session(client, [sid])
    assert (first.source_rows, first.new, first.already_there) == (6, 6, 0)
    assert dumps(agents_read(url, sid)) == dumps(theirs) == dumps(ITEMS)  # item by item
    log = MessageLog(client, sid)
    last = log.count()
    [again] = import_from_redis_session(client, [sid])  # run twice: written once
    assert (again.new, again.already_there, log.count()) == (0, 6, last)
    more = [{"role": "user", "content": "and tomorrow?"}]
    agents_write(url, sid, more)  # the framework kept writing during the switch
    [catch_up] = import_from_redis_session(client, [sid])
    assert (catch_up.new, catch_up.already_there, catch_up.source_rows) == (1, 6, 7)
    assert dumps(agents_read(url, sid)) == dumps(ITEMS + more)


def test_a_custom_key_prefix_and_many_keys(url: str, client: redis.Redis) -> None:
    sids = [new_id() for _ in range(3)]
    for n, sid in enumerate(sids):
        agents_write(url, sid, ITEMS[: n + 1], key_prefix="app:s")
    results = import_from_redis_session(client, sids, key_prefix="app:s", batch_size=1)
    assert [(r.source_key, r.new) for r in results] == [
        (f"app:s:{sid}:messages", n + 1) for n, sid in enumerate(sids)
    ]
    missing = new_id()  # no such session: nothing to import, nothing written
    [none] = import_from_redis_session(client, [missing])
    assert (none.source_rows, none.new) == (0, 0) and MessageLog(client, missing).count() == 0


@pytest.mark.parametrize("prefix", ["message_store:", "chat:"])
def test_a_langchain_history_imports_message_by_message(
    url: str, client: redis.Redis, prefix: str
) -> None:
    sid = new_id()
    lc_write(client, sid, LC_MESSAGES, prefix)
    # what RedisChatMessageHistory.messages reads: LRANGE reversed, messages_from_dict
    theirs = messages_from_dict([json.loads(m) for m in client.lrange(prefix + sid, 0, -1)[::-1]])
    results = import_from_redis_chat_message_history(client, [sid], key_prefix=prefix)
    assert (results[0].source_rows, results[0].new) == (5, 5)
    ours = MessageLogChatHistory(sid, client).messages
    assert [m.model_dump() for m in ours] == [m.model_dump() for m in theirs]
    assert [m.model_dump() for m in ours] == [m.model_dump() for m in LC_MESSAGES]
    assert import_from_redis_chat_message_history(client, [sid], key_prefix=prefix)[0].new == 0


def test_a_llama_index_chat_store_imports_message_by_message(url: str, client: redis.Redis) -> None:
    key = new_id()
    sync, aclient = redis.Redis.from_url(url), redis.asyncio.Redis.from_url(url)
    theirs_store = RedisChatStore(redis_client=sync, aredis_client=aclient, ttl=600)
    theirs_store.set_messages(key, LI_MESSAGES)
    theirs = theirs_store.get_messages(key)
    sync.close()
    asyncio.run(aclient.aclose())
    [result] = import_from_redis_chat_store(client, [key], ttl=3600)
    assert (result.source_rows, result.new) == (5, 5)
    ours = MessageLogBaseChatStore(client)
    assert [m.model_dump() for m in ours.get_messages(key)] == [m.model_dump() for m in theirs]
    assert key in ours.get_keys()  # registered in the store's default scope
    assert import_from_redis_chat_store(client, [key])[0].new == 0


BAD_ROWS: list[Any] = [
    b"\xff\xfe not utf-8",
    b"not json",
    b"[1, 2]",
    b'"a string"',
    b'{"role": 7}',
]


@pytest.mark.parametrize("bad", BAD_ROWS, ids=repr)
@pytest.mark.parametrize("source", ["openai-agents", "langchain", "llama-index"])
def test_a_corrupt_row_is_refused_naming_key_and_position(
    client: redis.Redis, source: str, bad: bytes
) -> None:
    good, broken = new_id(), new_id()
    rows = {
        "openai-agents": [json.dumps(i).encode() for i in ITEMS[:3]],
        "langchain": [json.dumps(message_to_dict(m)).encode() for m in LC_MESSAGES[:3]],
        "llama-index": [m.model_dump_json().encode() for m in LI_MESSAGES[:3]],
    }[source]
    keys: dict[str, Callable[[str], str]] = {
        "openai-agents": lambda i: f"agents:session:{i}:messages",
        "langchain": lambda i: f"message_store:{i}",
        "llama-index": lambda i: i,
    }
    key = keys[source]
    client.rpush(key(good), *rows)
    client.rpush(key(broken), rows[0], bad, rows[1])  # the bad row is at position 1 (...
    if source == "langchain":  # ... in the conversation's order: LPUSH lists read reversed
        client.delete(key(broken))
        client.rpush(key(broken), rows[1], bad, rows[0])
    with pytest.raises(SourceRowError) as caught:
        import_from(source, client, [good, broken])
    assert (caught.value.key, caught.value.position) == (key(broken), 1)
    assert repr(key(broken)) in str(caught.value) and "row 1" in str(caught.value)
    assert MessageLog(client, broken).count() == 0  # nothing half-written for that key
    assert len(MessageLog(client, good).all()) == 3  # the key before it is complete


def test_a_key_that_is_not_a_list_is_refused(client: redis.Redis) -> None:
    sid = new_id()
    client.hset(f"agents:session:{sid}:messages", "a", "b")
    with pytest.raises(SourceRowError) as caught:
        import_from_redis_session(client, [sid])
    assert caught.value.position is None and "hash" in str(caught.value)


def test_a_rewritten_source_is_refused(url: str, client: redis.Redis) -> None:
    sid = new_id()
    agents_write(url, sid, ITEMS[:3])
    import_from_redis_session(client, [sid])
    client.delete(f"agents:session:{sid}:messages")  # the framework cleared and rewrote it
    agents_write(url, sid, ITEMS[3:])
    log = MessageLog(client, sid)
    last = log.count()
    with pytest.raises(SourceChangedError):
        import_from_redis_session(client, [sid])
    assert log.count() == last


def test_imports_racing_on_one_key_write_it_once(url: str, client: redis.Redis) -> None:
    sid = new_id()
    many = [{"role": "user", "content": f"m{i}"} for i in range(300)]
    agents_write(url, sid, many)
    errors: list[BaseException] = []

    def run() -> None:
        own = redis.Redis.from_url(url)
        try:
            import_from_redis_session(own, [sid], batch_size=7)
        except BaseException as exc:
            errors.append(exc)
        finally:
            own.close()

    threads = [threading.Thread(target=run) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert [r.text for r in MessageLog(client, sid).all()] == [f"m{i}" for i in range(300)]


def test_into_a_cluster_from_a_standalone_source(
    url: str, client: redis.Redis, shared_cluster: Callable[[], LocalCluster]
) -> None:
    sid = new_id()
    agents_write(url, sid, ITEMS)
    target = shared_cluster().client()
    [result] = import_from("openai-agents", target, [sid], source=client)
    assert result.new == 6 and len(MessageLog(target, sid).all()) == 6
    target.close()


def test_the_cli_imports_and_reports_counts(url: str, client: redis.Redis) -> None:
    sids, prefix = [new_id(), new_id()], f"p{new_id()}"
    for sid in sids:
        agents_write(url, sid, ITEMS)
    runner = CliRunner()
    args = ["--url", url, "--prefix", prefix, "import", "--from", "openai-agents", *sids]
    first = runner.invoke(main, args)
    assert first.exit_code == 0, first.output
    assert "6 rows in the source, 6 in the log (6 new, 0 already there)" in first.output
    again = runner.invoke(main, args)
    assert again.exit_code == 0 and again.output.count("(0 new, 6 already there)") == 2
    assert len(MessageLog(client, sids[0], prefix=prefix).all()) == 6
    client.rpush(f"agents:session:{sids[1]}:messages", b"{broken")
    broken = runner.invoke(main, args)
    assert broken.exit_code == 1 and "row 6" in broken.output and sids[1] in broken.output
    usage = runner.invoke(main, ["--url", url, "import", "a", "b", "c"])
    assert usage.exit_code == 2  # without --from: FILE CONVERSATION


HOSTILE = settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=8,
)
ROWS = st.one_of(
    st.binary(max_size=40),
    JSON_VALUES.map(lambda v: json.dumps(v).encode()),
    st.dictionaries(st.sampled_from(["role", "type", "content", "id"]), JSON_VALUES).map(
        lambda v: json.dumps(v).encode()
    ),
)


@HOSTILE
@given(rows=st.lists(ROWS, min_size=1, max_size=4))
def test_hostile_rows_import_exactly_or_not_at_all(client: redis.Redis, rows: list[bytes]) -> None:
    """Whatever a RedisSession list holds: every row imported and given back by
    MessageLogSession as the JSON it was, or a SourceRowError naming the first bad row
    and nothing written for that key."""
    sid = new_id()
    client.rpush(f"agents:session:{sid}:messages", *rows)
    try:
        [result] = import_from_redis_session(client, [sid])
    except SourceRowError as exc:
        assert exc.key == f"agents:session:{sid}:messages" and exc.position is not None
        assert MessageLog(client, sid).count() == 0
        return
    url = "redis://{host}:{port}/0".format(**client.connection_pool.connection_kwargs)
    assert result.new == len(rows)
    assert dumps(agents_read(url, sid)) == dumps([json.loads(r) for r in rows])
