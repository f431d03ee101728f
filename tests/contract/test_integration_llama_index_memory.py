"""LlamaIndex: MessageLogBaseChatStore under LlamaIndex's own ChatMemoryBuffer (the memory
that takes a ``BaseChatStore``, the slot RedisChatStore fills), on every backend, through
the sync methods and the asyncio ones; the append-only mapping of each call."""

from __future__ import annotations

from typing import Any

import pytest
from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.llms import MockLLM
from llama_index.core.memory import ChatMemoryBuffer, ChatSummaryMemoryBuffer

from redis_msglog import EditEntry, MessageLog, StoredMessage
from redis_msglog.errors import InvalidArgumentError
from redis_msglog.integrations.llama_index import MessageLogBaseChatStore

from ..conftest import Env, new_id

pytestmark = [
    pytest.mark.frameworks,
    pytest.mark.parametrize("backend", ["redis", "valkey", "fakeredis", "cluster"], indirect=True),
]


def words(text: str) -> list[str]:
    return text.split()


def msg(role: str, text: str) -> ChatMessage:
    return ChatMessage(role=role, content=text)


def store_of(env: Env, **options: Any) -> MessageLogBaseChatStore:
    """The sync flavor: a sync client only. The async one: both, because
    ``ChatMemoryBuffer.aget`` runs the sync ``get`` on a thread (its writes and
    ``aget_all`` are the store's asyncio methods)."""
    if env.flavor == "sync":
        return MessageLogBaseChatStore(env.make_sync_client(), **options)
    client = env.make_async_client()
    env._async_clients.append(client)  # closed with the env
    return MessageLogBaseChatStore(env.make_sync_client(), async_redis=client, **options)


def call(env: Env, store: MessageLogBaseChatStore, name: str, *args: Any) -> Any:
    """The sync method ``name``, or its asyncio twin run on the env's loop."""
    if env.flavor == "sync":
        return getattr(store, name)(*args)
    twin = {"add_message": "async_add_message"}.get(name, f"a{name}")
    return env.loop.run_until_complete(getattr(store, twin)(*args))


def texts(messages: list[ChatMessage]) -> list[str | None]:
    return [m.content for m in messages]


def test_chat_memory_buffer_reads_and_writes_through_the_log(env: Env) -> None:
    key, store = new_id(), store_of(env, ttl=3600)
    memory = ChatMemoryBuffer.from_defaults(
        chat_store=store, chat_store_key=key, token_limit=6, tokenizer_fn=words
    )
    turns = [
        ("user", "one two"),
        ("assistant", "three"),
        ("user", "four five"),
        ("assistant", "six seven"),
    ]
    for role, text in turns:
        if env.flavor == "sync":
            memory.put(msg(role, text))
        else:
            env.loop.run_until_complete(memory.aput(msg(role, text)))
    if env.flavor == "sync":
        window, everything = memory.get(), memory.get_all()
    else:
        window = env.loop.run_until_complete(memory.aget())
        everything = env.loop.run_until_complete(memory.aget_all())
    assert texts(everything) == [t for _, t in turns]
    assert texts(window) == ["four five", "six seven"]  # the token window: whole turns
    log = MessageLog(env.raw, key)
    assert [(r.role, r.text) for r in log.all()] == turns  # every other reader sees them
    assert 0 < env.raw.ttl(log._core.keys.stream) <= 3600  # int ttl, as RedisChatStore takes it
    if env.flavor == "sync":
        memory.set([msg("user", "fresh")])
        assert texts(memory.get_all()) == ["fresh"]
        memory.reset()
        assert memory.get_all() == []
    else:
        env.loop.run_until_complete(memory.aset([msg("user", "fresh")]))
        assert texts(env.loop.run_until_complete(memory.aget_all())) == ["fresh"]
        env.loop.run_until_complete(memory.areset())
        assert env.loop.run_until_complete(memory.aget_all()) == []
    physical = [r.text for r in log.all(view="physical") if isinstance(r, StoredMessage)]
    assert physical == [t for _, t in turns] + ["fresh"]  # nothing deleted


def test_each_call_is_an_edit_of_the_log(env: Env) -> None:
    key, store = new_id(), store_of(env)
    call(env, store, "set_messages", key, [msg("user", t) for t in "ABCD"])
    removed = call(env, store, "delete_message", key, 1)
    assert removed == msg("user", "B")
    assert call(env, store, "delete_message", key, -1) is None  # as RedisChatStore
    assert call(env, store, "delete_message", key, 3) is None  # beyond the end
    assert call(env, store, "delete_last_message", key) == msg("user", "D")
    call(env, store, "add_message", key, msg("user", "X"), 1)  # inserted at a position
    call(env, store, "add_message", key, msg("user", "E"))
    assert texts(call(env, store, "get_messages", key)) == ["A", "X", "C", "E"]
    log = MessageLog(env.raw, key)
    ops = [e.op for e in log.all(view="physical") if isinstance(e, EditEntry)]
    assert ops == ["compact", "retract", "retract", "compact"]  # set, delete, pop, insert
    assert texts(call(env, store, "delete_messages", key)) == ["A", "X", "C", "E"]
    assert call(env, store, "get_messages", key) == []
    assert call(env, store, "delete_messages", key) is None  # empty: as SimpleChatStore
    assert call(env, store, "delete_last_message", key) is None


def test_get_keys_reads_the_scope_index(env: Env) -> None:
    scope = ("li", new_id())
    store, other = store_of(env, scope=scope), store_of(env, scope=(*scope, "sub"))
    keys = [new_id() for _ in range(3)]
    for key in keys:
        call(env, store, "add_message", key, msg("user", key))
    call(env, other, "add_message", "elsewhere-" + new_id(), msg("user", "x"))
    MessageLog(env.raw, new_id()).add("user", "not in any scope")
    assert call(env, store, "get_keys")[:3] == keys  # oldest-created first
    assert len(call(env, store, "get_keys")) == 4  # the sub-scope's key is below the scope
    assert len(call(env, other, "get_keys")) == 1


def test_bad_arguments_are_typed_errors(env: Env) -> None:
    with pytest.raises(InvalidArgumentError):
        MessageLogBaseChatStore()
    with pytest.raises(InvalidArgumentError):
        store_of(env, scope=("a:b",))
    with pytest.raises(InvalidArgumentError):
        store_of(env, ttl=-5)
    sync_only = MessageLogBaseChatStore(env.make_sync_client())
    with pytest.raises(InvalidArgumentError):
        env.loop.run_until_complete(sync_only.aget_messages("k"))
    client = env.make_async_client()
    env._async_clients.append(client)
    with pytest.raises(InvalidArgumentError):
        MessageLogBaseChatStore(async_redis=client).get_messages("k")


def test_chat_summary_memory_buffer_summarizes_through_the_store(env: Env) -> None:
    key, store = new_id(), store_of(env)
    memory = ChatSummaryMemoryBuffer.from_defaults(
        llm=MockLLM(max_tokens=3),
        chat_store=store,
        chat_store_key=key,
        token_limit=8,
        tokenizer_fn=words,
    )
    turns = [msg("user" if i % 2 == 0 else "assistant", f"turn {i} words") for i in range(6)]
    for turn in turns:
        memory.put(turn)
    window = memory.get()  # summarizes the oldest: LlamaIndex's reset() then set()
    assert window[0].role == "system" and texts(window[1:]) == texts(turns[-len(window) + 1 :])
    assert texts(call(env, store, "get_messages", key)) == texts(window)
    physical = MessageLog(env.raw, key).all(view="physical")
    kept = [r.text for r in physical if isinstance(r, StoredMessage)]
    assert kept[:6] == [t.content for t in turns]  # the summarized turns stay in the log
