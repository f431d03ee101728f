"""AsyncMessageLog: the asyncio client, a thin shell over :mod:`redis_msglog.core`.

It mirrors :class:`redis_msglog.MessageLog` method for method; see there for semantics.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from datetime import timedelta
from types import TracebackType
from typing import Any, TypeVar, overload

from redis import exceptions as redis_errors
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from . import adapters
from .core import (
    DEFAULT_IDEMPOTENCY_WINDOW,
    DEFAULT_MAX_MESSAGE_BYTES,
    DEFAULT_PAGE_SIZE,
    Batch,
    Pause,
    Plan,
    Read,
    ReplyLost,
    ShellBase,
    storage_error,
)
from .durability import Durability
from .follow import FollowCursor, follow_block_ms
from .models import AgentMessage, Role, StoredMessage
from .retry import DEFAULT_RETRY, RetryPolicy
from .routing import AsyncRouter, Command, asking_before_each, socket_timeout, without_asking

T = TypeVar("T")
AsyncOnAppend = Callable[[list[StoredMessage]], "Awaitable[object] | object"]


class AsyncMessageLog(ShellBase):
    """A conversation's durable, append-only message log in Redis (asyncio).

    Same arguments as :class:`redis_msglog.MessageLog`, with a ``redis.asyncio.Redis`` or
    ``redis.asyncio.cluster.RedisCluster`` client; ``on_append`` may be a plain or an
    async callable.

    Cancellation: an append cancelled while in flight has either committed or not (the
    script is atomic); its connection is discarded, never reused mid-reply. Calling again
    with the same ``idempotency_key`` is always safe: it returns the first commit's seq or
    writes the message once. (Pass your own key if you may retry after a cancellation:
    a generated one dies with the cancelled call.)
    """

    def __init__(
        self,
        redis: Redis | RedisCluster,
        conversation: str,
        on_append: AsyncOnAppend | None = None,
        prefix: str = "msglog",
        *,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        page_size: int = DEFAULT_PAGE_SIZE,
        retry: RetryPolicy = DEFAULT_RETRY,
        idempotency_window: timedelta = DEFAULT_IDEMPOTENCY_WINDOW,
        ttl: timedelta | None = None,
        durability: Durability | None = None,
    ) -> None:
        self._setup_core(
            redis,
            conversation,
            prefix=prefix,
            max_message_bytes=max_message_bytes,
            page_size=page_size,
            retry=retry,
            idempotency_window=idempotency_window,
            ttl=ttl,
            durability=durability,
        )
        self._redis = redis
        self._router = AsyncRouter(redis, self._core.keys.stream)
        self._on_append = on_append

    # -- writing -------------------------------------------------------------------

    async def add(self, role: Role, content: str, *, idempotency_key: str | None = None) -> int:
        """Append ``{"role": role, "content": content}``; return its seq."""
        return await self.append(
            {"role": role, "content": content}, idempotency_key=idempotency_key
        )

    async def append(
        self, msg: AgentMessage | Mapping[str, Any], *, idempotency_key: str | None = None
    ) -> int:
        """Append one message; return the seq the server assigned to it (see
        :meth:`redis_msglog.MessageLog.append` for ``idempotency_key`` and errors).

        If the task is cancelled while the append is in flight, it has either committed
        or not; calling again with the same ``idempotency_key`` is always safe."""
        return await self._commit(self._core.batch((msg,)), idempotency_key)

    async def append_many(
        self,
        msgs: Iterable[AgentMessage | Mapping[str, Any]],
        *,
        idempotency_key: str | None = None,
    ) -> int:
        """Append a batch atomically; return the last seq (``count()`` if empty)."""
        batch = self._core.batch(msgs)
        return await self._commit(batch, idempotency_key) if batch.encoded else await self.count()

    async def _commit(self, batch: Batch, idempotency_key: str | None) -> int:
        commit = await self._run(self._append_plan(batch, idempotency_key))
        if commit.fresh and self._on_append is not None:
            result = self._on_append(self._core.committed_rows(batch, commit))
            if inspect.isawaitable(result):
                await result
        self._core.raise_if_not_durable(batch, commit)
        return commit.last_seq

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

    # -- following commits from every worker -----------------------------------------

    def follow(
        self, after: int = 0, *, reconnect_within: float | None = 30.0
    ) -> AsyncIterator[StoredMessage]:
        """Every message with seq > ``after``, in seq order, then each new one as any
        worker commits it (see :meth:`redis_msglog.MessageLog.follow`).

        Cancelling the consuming task, or leaving the ``async for``, releases the
        connection (a read cancelled mid-wait is disconnected, never reused)."""
        cursor = FollowCursor(
            self._core, after, block_ms=self._block_ms(), reconnect_within=reconnect_within
        )
        return _rows(self._pages(cursor))

    def subscribe(self, callback: AsyncOnAppend, *, after: int | None = None) -> AsyncSubscription:
        """Call ``callback(rows)`` (plain or async) from a background task for commits
        made by any worker; the same delivery rules as
        :meth:`redis_msglog.MessageLog.subscribe`. Must be called with a running loop;
        start from ``after`` (default: the count when the task first reads)."""
        return AsyncSubscription(self, callback, after)

    async def _pages(self, cursor: FollowCursor) -> AsyncIterator[list[StoredMessage]]:
        """Non-empty pages of new rows, in order, forever."""
        while True:
            try:
                reply = await self._redis.execute_command(*cursor.command())
            except (redis_errors.RedisError, redis_errors.RedisClusterException) as exc:
                if not cursor.retryable(exc):
                    raise storage_error(exc, self.keys) from exc
                await asyncio.sleep(cursor.failed(exc))
                continue
            if rows := cursor.accept(reply):
                yield rows

    def _block_ms(self) -> int:
        return follow_block_ms(socket_timeout(self._redis))

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
                elif isinstance(step, Pause):
                    await asyncio.sleep(step.seconds)
                else:
                    reply = await self._write_once(step.command, step.then)
            except (redis_errors.RedisError, ReplyLost) as exc:
                error = exc

    async def _read(self, commands: tuple[Command, ...]) -> list[Any]:
        # Raw replies; see MessageLog._read.
        replies: dict[int, Any] = {}
        await self._router.run(
            lambda conn, asking: conn.retry.call_with_retry(
                lambda: _round_trip(conn, commands, replies, asking),
                lambda _error: conn.disconnect(),
            )
        )
        return [replies[i] for i in range(len(commands))]

    async def _write_once(self, command: Command, then: Command | None) -> Any:
        # Never through redis-py's retry policy: a blind re-send of an append writes twice.
        return await self._router.run(lambda conn, asking: _send_once(conn, command, then, asking))


async def _send_once(conn: Any, command: Command, then: Command | None, asking: bool) -> Any:
    commands = asking_before_each((command,), asking) + ([then] if then else [])
    try:
        await conn.send_packed_command(conn.pack_commands(commands))
        replies: list[Any] = []
        for _ in commands:
            try:
                replies.append(await conn.read_response())
            except redis_errors.ResponseError as exc:
                # A refused WAIT/WAITAOF is a durability shortfall, not a failure.
                replies.append(exc)
        first, *durability = without_asking(replies, asking)
        if isinstance(first, redis_errors.ResponseError):
            raise first
        return (first, durability[0]) if then else first
    except redis_errors.ResponseError:
        raise  # the server answered; the connection is fine
    except (redis_errors.ConnectionError, redis_errors.TimeoutError, OSError) as exc:
        await conn.disconnect()
        raise ReplyLost(str(exc)) from exc


async def _round_trip(
    conn: Any, commands: tuple[Command, ...], replies: dict[int, Any], asking: bool
) -> None:
    """Send the commands not yet in ``replies`` and read theirs (see sync._round_trip)."""
    todo = [i for i in range(len(commands)) if i not in replies]
    packed = asking_before_each([commands[i] for i in todo], asking)
    await conn.send_packed_command(conn.pack_commands(packed))
    raw: list[Any] = []
    for _ in packed:
        try:
            raw.append(await conn.read_response())
        except redis_errors.ResponseError as exc:
            raw.append(exc)
    errors = []
    for index, reply in zip(todo, without_asking(raw, asking), strict=True):
        if isinstance(reply, redis_errors.ResponseError):
            errors.append(reply)
        else:
            replies[index] = reply
    if errors:
        raise errors[0]


async def _rows(pages: AsyncIterator[list[StoredMessage]]) -> AsyncIterator[StoredMessage]:
    async for page in pages:
        for row in page:
            yield row


class AsyncSubscription:
    """A task feeding commits to a callback; see :meth:`AsyncMessageLog.subscribe`.

    ``await close()`` (or ``async with``) cancels it, releasing its connection at once.
    """

    def __init__(self, log: AsyncMessageLog, callback: AsyncOnAppend, after: int | None) -> None:
        if after is not None:
            FollowCursor(log._core, after, block_ms=1, reconnect_within=None)  # validates
        self.position = after
        self.error: BaseException | None = None
        self._log = log
        self._callback = callback
        self._task = asyncio.get_running_loop().create_task(
            self._deliver(), name=f"msglog-subscription-{log.conversation}"
        )

    async def _deliver(self) -> None:
        if self.position is None:
            self.position = await self._log.count()
        cursor = FollowCursor(
            self._log._core, self.position, block_ms=self._log._block_ms(), reconnect_within=None
        )
        try:
            async for rows in self._log._pages(cursor):
                result = self._callback(rows)
                if inspect.isawaitable(result):
                    await result
                self.position = rows[-1].seq
        except Exception as exc:  # kept for close(): a task has no caller to raise to
            self.error = exc

    @property
    def running(self) -> bool:
        """Whether the task is still delivering."""
        return not self._task.done()

    async def close(self) -> None:
        """Stop delivering; re-raise the callback's (or the server's) error if the
        subscription died of one."""
        self._task.cancel()
        await asyncio.wait([self._task])  # unlike awaiting it, lets our own cancel through
        if self.error is not None:
            raise self.error

    async def __aenter__(self) -> AsyncSubscription:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()
