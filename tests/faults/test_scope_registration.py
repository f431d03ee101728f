"""A scoped log's registration under lost replies: both steps are idempotent, so a
reply lost after the server ran a step is re-sent, and the append that follows commits
exactly once, listed exactly once (both clients)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable

import pytest
import redis
import redis.asyncio

from redis_msglog import AsyncMessageLog, Directory, MessageLog
from redis_msglog.testing import EphemeralServer

from ..support.proxy import ReplyDroppingProxy

pytestmark = pytest.mark.slow  # processes racing a scope erase


@pytest.mark.parametrize("flavor", ["sync", "async"])
@pytest.mark.parametrize("after_execute", [True, False])
def test_lost_registration_replies_are_re_sent_and_write_once(
    shared_server: Callable[[str], EphemeralServer], flavor: str, after_execute: bool
) -> None:
    server = shared_server("redis")
    top = f"t{uuid.uuid4().hex[:10]}"
    scope = (top, "user-1")
    conversation = f"{top}:c"
    # Both scope scripts carry the scope's text; the append does not.
    with ReplyDroppingProxy(
        server.port, trigger=f"{top}/user-1".encode(), after_execute=after_execute
    ) as proxy:
        proxy.drops = 3  # the owner step's reply, then the index step's, then again
        if flavor == "sync":
            log = MessageLog(redis.Redis.from_url(proxy.url), conversation, scope=scope)
            assert log.add("user", "hi") == 1
            assert log.add("user", "again") == 2
        else:

            async def main() -> None:
                client = redis.asyncio.Redis.from_url(proxy.url)
                log = AsyncMessageLog(client, conversation, scope=scope)
                assert await log.add("user", "hi") == 1
                assert await log.add("user", "again") == 2
                await client.aclose()

            asyncio.run(main())
        assert proxy.dropped == 3
    page = Directory(redis.Redis.from_url(server.url)).list((top,))
    assert [(c.conversation, c.scope, c.last_seq) for c in page.conversations] == [
        (conversation, scope, 2)
    ]
