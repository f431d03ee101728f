"""Microsoft Agent Framework in the agent loop (``benchmarks.agent_loop``): its
history-provider calls, ``get_messages(session)`` then ``save_messages(session, 4
messages)`` (what an ``Agent`` run's ``before_run`` and ``after_run`` make), on
agent-framework-redis's ``RedisHistoryProvider`` and on our
``MessageLogHistoryProvider``.

agent-framework-redis is not in the ``bench`` extra: it pins ``redis<7.2.1``, which
conflicts with the redis-py this project uses; where it is installed, its column is
measured, and reported as not installed otherwise. The answer carries a message id, as a
service's does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import redis.asyncio

if TYPE_CHECKING:
    from benchmarks.agent_loop import Turn


def _messages(t: Turn) -> list[Any]:
    from agent_framework import Content, Message  # imported when a run starts

    call = Content.from_function_call(call_id=t.call_id, name="search_docs", arguments=t.arguments)
    result = Content.from_function_result(call_id=t.call_id, result=t.result)
    return [
        Message("user", [t.question]),
        Message("assistant", [call], message_id=f"call-msg-{t.i:05d}"),
        Message("tool", [result]),
        Message("assistant", [t.answer], message_id=f"answer-{t.i:05d}"),
    ]


class AgentFrameworkHistory:
    """``get_messages`` then ``save_messages`` on a history provider."""

    def __init__(self, provider: Any, session: str, close: Any) -> None:
        self.provider = provider
        self.session = session
        self._close = close

    async def read(self) -> int:
        return len(await self.provider.get_messages(self.session))

    async def append(self, t: Turn) -> None:
        await self.provider.save_messages(self.session, _messages(t))

    async def close(self) -> None:
        await self._close()


def _theirs(url: str, conversation: str) -> AgentFrameworkHistory:
    from agent_framework_redis import (  # type: ignore[import-not-found,unused-ignore]
        RedisHistoryProvider,
    )

    provider = RedisHistoryProvider(redis_url=url)
    return AgentFrameworkHistory(provider, conversation, provider.aclose)


def _ours(url: str, conversation: str) -> AgentFrameworkHistory:
    from redis_msglog.integrations.agent_framework import MessageLogHistoryProvider

    client = redis.asyncio.Redis.from_url(url)
    provider = MessageLogHistoryProvider(redis=client)
    return AgentFrameworkHistory(provider, conversation, client.aclose)


def contenders(contender: Callable[..., Any], missing: type[Exception]) -> list[Any]:
    """The two contenders, made with ``agent_loop``'s ``Contender`` and ``Missing`` (passed
    in: ``python -m benchmarks.agent_loop`` runs that module as ``__main__``)."""

    def make(build: Callable[[str, str], AgentFrameworkHistory]) -> Callable[..., Any]:
        def made(url: str, conversation: str) -> AgentFrameworkHistory:
            try:
                return build(url, conversation)
            except ImportError as exc:  # the package is not installed
                raise missing(str(exc)) from exc

        return made

    return [
        contender("Agent Framework", "RedisHistoryProvider", make(_theirs), own_store=True),
        contender("Agent Framework", "msglog MessageLogHistoryProvider", make(_ours)),
    ]
