"""AsyncMessageLog: the asyncio client, a thin shell over :mod:`redis_msglog.core`.

It mirrors :class:`redis_msglog.MessageLog` method for method; see there for semantics.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, TypeVar, overload

from redis import exceptions as redis_errors
from redis.asyncio import Redis

from . import adapters
from .core import (
    DEFAULT_MAX_MESSAGE_BYTES,
    DEFAULT_PAGE_SIZE,
    Batch,
    Command,
    Plan,
    Read,
    ReplyLost,
    ShellBase,
)
from .models import AgentMessage, Role, StoredMessage

T = TypeVar("T")
AsyncOnAppend = Callable[[list[StoredMessage]], "Awaitable[object] | object"]


class AsyncMessageLog(ShellBase):
    """A conversation's durable, append-only message log in Redis (asyncio).

    Same arguments as :class:`redis_msglog.MessageLog`, with a ``redis.asyncio.Redis``
    client; ``on_append`` may be a plain or an async callable.

    Cancellation: an append cancelled while in flight has either committed or not (the
    script is atomic); its connection is discarded, never reused mid-reply.
    """

    def __init__(
        self,
        redis: Redis,
        conversation: str,
        on_append: AsyncOnAppend | None = None,
        prefix: str = "msglog",
        *,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        page_size: int = DEFAULT_PAGE_SIZE,
    ) -> None:
        self._setup_core(
            redis,
            conversation,
            prefix=prefix,
            max_message_bytes=max_message_bytes,
            page_size=page_size,
        )
        self._redis = redis
        self._on_append = on_append

    # -- writing -------------------------------------------------------------------

    async def add(self, role: Role, content: str) -> int:
        """Append ``{"role": role, "content": content}``; return its seq."""
        return await self.append({"role": role, "content": content})

    async def append(self, msg: AgentMessage | Mapping[str, Any]) -> int:
        """Append one message; return the seq the server assigned to it."""
        return await self._commit(self._core.batch((msg,)))

    async def append_many(self, msgs: Iterable[AgentMessage | Mapping[str, Any]]) -> int:
        """Append a batch atomically; return the last seq (``count()`` if empty)."""
        batch = self._core.batch(msgs)
        return await self._commit(batch) if batch.encoded else await self.count()

    async def _commit(self, batch: Batch) -> int:
        last_seq, at = await self._run(self._core.append_plan(batch))
        if self._on_append is not None:
            result = self._on_append(self._core.committed_rows(batch, last_seq, at))
            if inspect.isawaitable(result):
                await result
        return last_seq

    # -- reading -------------------------------------------------------------------

    async def all(self) -> list[StoredMessage]:
        """The full history in seq order (paged internally, no cap)."""
        return await self._run(self._core.read_plan(0, None))

    async def read(self, after: int = 0, limit: int | None = None) -> list[StoredMessage]:
        """Messages with seq > ``after``, in order, at most ``limit``."""
        return await self._run(self._core.read_plan(after, limit))

    @overload
    async def last(self) -> StoredMessage | None: ...
    @overload
    async def last(self, n: int) -> list[StoredMessage]: ...
    async def last(self, n: int | None = None) -> StoredMessage | list[StoredMessage] | None:
        """The most recent message (or ``None``), or the last ``n`` in chronological order."""
        if n is None:
            rows = await self._run(self._core.last_plan(1))
            return rows[0] if rows else None
        return await self._run(self._core.last_plan(n))

    async def count(self) -> int:
        """Total messages ever appended: the seq high-water mark (one ``GET``)."""
        return await self._run(self._core.count_plan())

    # -- provider formats (see redis_msglog.adapters for the rules) ------------------

    async def to_openai(self) -> list[dict[str, Any]]:
        """The full history as OpenAI Chat Completions messages."""
        return adapters.to_openai(await self.all())

    async def to_anthropic(self) -> list[dict[str, Any]]:
        """The full history as Anthropic Messages turns (``system`` dropped: pass it as
        the request's top-level ``system`` parameter)."""
        return adapters.to_anthropic(await self.all())

    async def to_langchain(self) -> list[dict[str, Any]]:
        """The full history as LangChain ``{"role", "content"}`` messages (user,
        assistant and system only)."""
        return adapters.to_langchain(await self.all())

    # -- carrying plan steps to the server -------------------------------------------

    async def _run(self, plan: Plan[T]) -> T:
        reply: Any = None
        error: BaseException | None = None
        while True:
            try:
                step = plan.send(reply) if error is None else plan.throw(error)
            except StopIteration as done:
                result: T = done.value
                return result
            reply, error = None, None
            try:
                if isinstance(step, Read):
                    reply = await self._read(step.commands)
                else:
                    reply = await self._write_once(step.command)
            except (redis_errors.RedisError, ReplyLost) as exc:
                error = exc

    async def _read(self, commands: tuple[Command, ...]) -> list[Any]:
        if len(commands) == 1:
            return [await self._redis.execute_command(*commands[0])]
        pipe = self._redis.pipeline(transaction=False)
        for command in commands:
            pipe.execute_command(*command)
        return await pipe.execute()

    async def _write_once(self, command: Command) -> Any:
        # Our own connection handling, so redis-py's retry policy can never re-send it.
        pool = self._redis.connection_pool
        conn = await pool.get_connection()  # connects: a failure here means nothing was sent
        try:
            await conn.send_command(*command)
            return await conn.read_response()
        except redis_errors.ResponseError:
            raise  # the server answered; the connection is fine
        except (redis_errors.ConnectionError, redis_errors.TimeoutError, OSError) as exc:
            await conn.disconnect()
            raise ReplyLost(str(exc)) from exc
        except BaseException:
            # Cancelled or interrupted mid-reply: the connection's stream is unusable.
            await conn.disconnect(nowait=True)
            raise
        finally:
            await pool.release(conn)
