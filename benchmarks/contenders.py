"""The contenders: a raw redis-py baseline, our two clients, and the peers a user would
pick instead. Each is a small handle over one conversation with the same operations, so
a workload is written once. Peers are imported lazily: one that is not installed (the
``bench`` extra) is reported as missing, not as a failure."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson
import redis
import redis.asyncio
from redis.typing import StreamRangeResponse

import redis_msglog
from redis_msglog import AsyncMessageLog, MessageLog

Message = dict[str, Any]  # {"role": ..., "content": ...}


class Missing(Exception):
    """The contender's package is not installed."""


@dataclass
class Contender:
    name: str
    is_async: bool
    make: Callable[[str, str], Any]  # (url, conversation) -> handle
    note: str = ""


# -- raw redis-py: the least a client can do for the same work ------------------------------


class RawSync:
    """``XADD`` of the pre-encoded payload; ``XRANGE`` paging/``XREVRANGE`` + ``orjson``."""

    def __init__(self, url: str, conversation: str) -> None:
        self.redis = redis.Redis.from_url(url)
        self.key = f"raw:{{{conversation}}}:stream"

    def prepare(self, messages: list[Message]) -> list[bytes]:
        return [orjson.dumps(m) for m in messages]

    def append(self, payload: bytes) -> None:
        self.redis.xadd(self.key, {"msg": payload})

    def append_many(self, payloads: list[bytes]) -> None:
        pipe = self.redis.pipeline(transaction=False)
        for payload in payloads:
            pipe.xadd(self.key, {"msg": payload})
        pipe.execute()

    def fill(self, payloads: list[bytes]) -> None:
        for i in range(0, len(payloads), 1000):
            self.append_many(payloads[i : i + 1000])

    def last(self, n: int) -> list[Any]:
        rows = _messages(self.redis.xrevrange(self.key, count=n))
        rows.reverse()
        return rows

    def all(self) -> list[Any]:
        rows: list[Any] = []
        start = "-"
        while True:
            page = self.redis.xrange(self.key, min=start, count=1000) or []
            rows.extend(_messages(page))
            if len(page) < 1000:
                return rows
            start = "(" + _text(page[-1][0])

    def keys(self) -> list[str]:
        return [self.key]


def _messages(entries: StreamRangeResponse | None) -> list[Any]:
    """The decoded ``msg`` field of each entry of an XRANGE or XREVRANGE reply."""
    return [orjson.loads(fields[b"msg"]) for _, fields in entries or [] if fields is not None]


def _text(value: bytes | str | None) -> str:
    assert value is not None
    return value.decode() if isinstance(value, bytes) else value


class RawAsync:
    """``RawSync`` on ``redis.asyncio``: the baseline of the asyncio client."""

    def __init__(self, url: str, conversation: str) -> None:
        self.redis = redis.asyncio.Redis.from_url(url)
        self.key = f"raw:{{{conversation}}}:stream"

    def prepare(self, messages: list[Message]) -> list[bytes]:
        return [orjson.dumps(m) for m in messages]

    async def append(self, payload: bytes) -> None:
        await self.redis.xadd(self.key, {"msg": payload})

    async def append_many(self, payloads: list[bytes]) -> None:
        pipe = self.redis.pipeline(transaction=False)
        for payload in payloads:
            pipe.xadd(self.key, {"msg": payload})
        await pipe.execute()

    async def fill(self, payloads: list[bytes]) -> None:
        for i in range(0, len(payloads), 1000):
            await self.append_many(payloads[i : i + 1000])

    async def last(self, n: int) -> list[Any]:
        rows = _messages(await self.redis.xrevrange(self.key, count=n))
        rows.reverse()
        return rows

    async def all(self) -> list[Any]:
        rows: list[Any] = []
        start = "-"
        while True:
            page = await self.redis.xrange(self.key, min=start, count=1000) or []
            rows.extend(_messages(page))
            if len(page) < 1000:
                return rows
            start = "(" + _text(page[-1][0])

    def keys(self) -> list[str]:
        return [self.key]

    async def close(self) -> None:
        await self.redis.aclose()


# -- ours -----------------------------------------------------------------------------------


class OursSync:
    def __init__(self, url: str, conversation: str, **options: Any) -> None:
        self.redis = redis.Redis.from_url(url)
        self.log = MessageLog(self.redis, conversation, **options)

    def prepare(self, messages: list[Message]) -> list[Message]:
        return messages

    def append(self, msg: Message) -> None:
        self.log.append(msg)

    def append_many(self, msgs: list[Message]) -> None:
        self.log.append_many(msgs)

    def fill(self, msgs: list[Message]) -> None:
        for i in range(0, len(msgs), 1000):
            self.log.append_many(msgs[i : i + 1000])

    def last(self, n: int) -> list[Any]:
        return self.log.last(n)

    def all(self) -> list[Any]:
        return self.log.all()

    def count(self) -> int:
        return self.log.count()

    def keys(self) -> list[str]:
        return [self.log.keys.seq, self.log.keys.stream]


class OursAsync:
    def __init__(self, url: str, conversation: str, **options: Any) -> None:
        self.redis = redis.asyncio.Redis.from_url(url)
        self.log = AsyncMessageLog(self.redis, conversation, **options)

    def prepare(self, messages: list[Message]) -> list[Message]:
        return messages

    async def append(self, msg: Message) -> None:
        await self.log.append(msg)

    async def append_many(self, msgs: list[Message]) -> None:
        await self.log.append_many(msgs)

    async def last(self, n: int) -> list[Any]:
        return await self.log.last(n)

    async def all(self) -> list[Any]:
        return await self.log.all()

    async def count(self) -> int:
        return await self.log.count()

    async def close(self) -> None:
        await self.redis.aclose()


# -- peers ----------------------------------------------------------------------------------


class LangChain:
    """langchain-community's ``RedisChatMessageHistory``: a list, ``LPUSH`` per message."""

    def __init__(self, url: str, conversation: str) -> None:
        try:
            from langchain_community.chat_message_histories import RedisChatMessageHistory
            from langchain_core.messages import AIMessage, HumanMessage, message_to_dict
        except ImportError as exc:
            raise Missing(str(exc)) from exc
        self.history = RedisChatMessageHistory(conversation, url=url)
        self._types = {"user": HumanMessage, "assistant": AIMessage}
        self._to_dict = message_to_dict

    def prepare(self, messages: list[Message]) -> list[Any]:
        return [self._types[m["role"]](content=m["content"]) for m in messages]

    def append(self, msg: Any) -> None:
        self.history.add_message(msg)

    def append_many(self, msgs: list[Any]) -> None:
        self.history.add_messages(msgs)

    def fill(self, msgs: list[Any]) -> None:
        client = self.history.redis_client
        for i in range(0, len(msgs), 1000):  # its own format, written in bulk
            pipe = client.pipeline(transaction=False)
            for m in msgs[i : i + 1000]:
                pipe.lpush(self.history.key, json.dumps(self._to_dict(m)))
            pipe.execute()

    def last(self, n: int) -> list[Any]:
        rows: list[Any] = self.history.messages[-n:]  # no "last n": it reads everything
        return rows

    def all(self) -> list[Any]:
        rows: list[Any] = self.history.messages
        return rows

    def keys(self) -> list[str]:
        return [self.history.key]


class AgentsSession:
    """The OpenAI Agents SDK's ``RedisSession`` (asyncio only)."""

    def __init__(self, url: str, conversation: str) -> None:
        try:
            from agents.extensions.memory.redis_session import RedisSession
        except ImportError as exc:
            raise Missing(str(exc)) from exc
        self.redis = redis.asyncio.Redis.from_url(url)
        self.session = RedisSession(conversation, redis_client=self.redis)

    def prepare(self, messages: list[Message]) -> list[Any]:
        return [{"role": m["role"], "content": m["content"]} for m in messages]

    async def append(self, msg: Any) -> None:
        await self.session.add_items([msg])

    async def append_many(self, msgs: list[Any]) -> None:
        await self.session.add_items(msgs)

    async def fill(self, msgs: list[Any]) -> None:
        for i in range(0, len(msgs), 1000):
            await self.session.add_items(msgs[i : i + 1000])

    async def last(self, n: int) -> list[Any]:
        rows: list[Any] = await self.session.get_items(limit=n)
        return rows

    async def all(self) -> list[Any]:
        rows: list[Any] = await self.session.get_items()
        return rows

    async def keys(self) -> list[str]:
        return [_text(k) for k in await self.redis.keys(f"*{self.session.session_id}*")]

    async def close(self) -> None:
        await self.redis.aclose()


class LlamaIndex:
    """LlamaIndex's ``RedisChatStore``: a list, ``RPUSH`` per message."""

    def __init__(self, url: str, conversation: str) -> None:
        try:
            from llama_index.core.llms import ChatMessage
            from llama_index.storage.chat_store.redis import RedisChatStore
        except ImportError as exc:
            raise Missing(str(exc)) from exc
        self.store = RedisChatStore(redis_url=url)
        self.key = conversation
        self._message = ChatMessage

    def prepare(self, messages: list[Message]) -> list[Any]:
        return [self._message(role=m["role"], content=m["content"]) for m in messages]

    def append(self, msg: Any) -> None:
        self.store.add_message(self.key, msg)

    def append_many(self, msgs: list[Any]) -> None:
        for msg in msgs:  # it has no batch append (set_messages replaces the history)
            self.store.add_message(self.key, msg)

    def fill(self, msgs: list[Any]) -> None:
        client = self.store._redis_client
        for i in range(0, len(msgs), 1000):
            pipe = client.pipeline(transaction=False)
            for m in msgs[i : i + 1000]:
                pipe.rpush(self.key, m.model_dump_json())
            pipe.execute()

    def last(self, n: int) -> list[Any]:
        messages: list[Any] = self.store.get_messages(self.key)  # no "last n" either
        return messages[-n:]

    def all(self) -> list[Any]:
        messages: list[Any] = self.store.get_messages(self.key)
        return messages

    def keys(self) -> list[str]:
        return [self.key]


class LlamaIndexAsync(LlamaIndex):
    async def append(self, msg: Any) -> None:  # type: ignore[override]
        await self.store.async_add_message(self.key, msg)


def _ours_no_retry(url: str, conversation: str) -> OursSync:
    from redis_msglog import NO_RETRY

    return OursSync(url, conversation, retry=NO_RETRY)


RAW = "raw redis-py"
RAW_ASYNC = "raw redis.asyncio"
OURS = "msglog sync"
OURS_ASYNC = "msglog async"
OURS_NO_RETRY = "msglog sync, NO_RETRY"
PEERS = [
    "langchain RedisChatMessageHistory",
    "openai-agents RedisSession",
    "llama-index RedisChatStore",
]

SYNC = [
    Contender(RAW, False, RawSync),
    Contender(OURS, False, OursSync),
    Contender(OURS_NO_RETRY, False, _ours_no_retry, "no idempotency key per append"),
    Contender(PEERS[0], False, LangChain),
    Contender(PEERS[2], False, LlamaIndex),
]
ASYNC = [
    Contender(RAW_ASYNC, True, RawAsync, "the asyncio client's baseline"),
    Contender(OURS_ASYNC, True, OursAsync),
    Contender(PEERS[1], True, AgentsSession),
]
ASYNC_MANY = [  # workload 4: many conversations from one event loop
    Contender(RAW_ASYNC, True, RawAsync),
    Contender(OURS_ASYNC, True, OursAsync),
    Contender(PEERS[1], True, AgentsSession),
    Contender(PEERS[2], True, LlamaIndexAsync),
]
ASYNC_NAMES = frozenset(x.name for x in ASYNC + ASYNC_MANY)
"""Contenders compared with raw ``redis.asyncio`` rather than raw sync redis-py."""


def cold_reads(handle: Any, cold: bool, max_bytes: int | None = None) -> None:
    """Turn the warm-read cache of one of our handles off (``cold``: every read is a
    process's first) or on, with ``max_bytes`` (default: the library's default budget);
    other contenders have none."""
    # getattr: the harness also runs versions from before the cache (A/B comparisons)
    configure = getattr(redis_msglog, "configure_read_cache", None)
    if configure is not None and isinstance(handle, (OursSync, OursAsync)):
        budget = max_bytes or redis_msglog.DEFAULT_READ_CACHE_BYTES
        configure(handle.redis, 0 if cold else budget)
