"""Content parts through real servers: every part kind appended and read back exactly by
both clients, stored as one JSON document per entry, and a bad part writing nothing (the
model and codec side is ``tests/no_server/test_models_parts.py``)."""

from __future__ import annotations

import asyncio
import base64
import uuid
from typing import Any

import orjson
import pytest
import redis

from redis_msglog import (
    AgentMessage,
    InvalidMessageError,
    MessageLog,
)

from ..no_server.test_models_parts import EVERY_PART, PIXEL


def test_every_part_kind_round_trips_through_a_real_server(shared_server: Any) -> None:
    client = redis.Redis.from_url(shared_server("redis").url)
    log = MessageLog(client, f"parts-{uuid.uuid4().hex}")
    log.append_many(EVERY_PART)
    log.add("user", "and a plain one")
    rows = log.all()
    expected = [AgentMessage.model_validate(m) for m in EVERY_PART]
    assert [r.as_message() for r in rows[:-1]] == expected
    assert rows[-1].content == "and a plain one"
    # One JSON document per entry, as redis-cli shows it.
    entries = client.xrange(log.keys.stream, "2", "2")  # "2-0".."2-<max>": the entry of seq 2
    assert entries and entries[0][1] is not None
    entry = entries[0][1]
    assert orjson.loads(entry[b"msg"])["content"][1]["data"] == base64.b64encode(PIXEL).decode()
    # A bad part writes nothing.
    before = log.count()
    with pytest.raises(InvalidMessageError, match=r"message 1: content\.0"):
        log.append_many(
            [{"role": "user", "content": "ok"}, {"role": "user", "content": [{"type": "x"}]}]
        )
    assert log.count() == before


def test_every_part_kind_round_trips_through_the_asyncio_client(shared_server: Any) -> None:
    import redis.asyncio

    from redis_msglog import AsyncMessageLog

    async def run() -> list[AgentMessage]:
        client = redis.asyncio.Redis.from_url(shared_server("redis").url)
        try:
            log = AsyncMessageLog(client, f"parts-{uuid.uuid4().hex}")
            await log.append_many(EVERY_PART)
            return [row.as_message() for row in await log.all()]
        finally:
            await client.aclose()

    assert asyncio.run(run()) == [AgentMessage.model_validate(m) for m in EVERY_PART]
