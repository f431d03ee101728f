"""AsyncMessageLog: the asyncio client, a thin shell over :mod:`redis_msglog._core`.

It mirrors :class:`redis_msglog.MessageLog` method for method; see there for semantics.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Mapping
from datetime import timedelta
from types import TracebackType
from typing import Any, ClassVar, TypeVar, overload

from redis import exceptions as redis_errors
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from . import adapters, errors
from ._core import (
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
from ._durability import Durability
from ._follow import FollowCursor, follow_block_ms
from ._retry import DEFAULT_RETRY, RetryPolicy
from ._routing import AsyncRouter, Command, asking_before_each, socket_timeout, without_asking
from .models import AgentMessage, Role, StoredMessage

T = TypeVar("T")
AsyncOnAppend = Callable[[list[StoredMessage]], "Awaitable[object] | object"]


def _cancel_requests() -> int:
    """Cancellations requested of the current task and not withdrawn (0 before 3.11)."""
    task = asyncio.current_task()
    return task.cancelling() if task is not None and hasattr(task, "cancelling") else 0


async def _honouring_cancel(awaitable: Awaitable[T]) -> T:
    """``await awaitable``, then raise ``CancelledError`` if the task was cancelled meanwhile.

    A cancel can be lost on the way: redis-py sends under ``asyncio.wait_for``, which
    before Python 3.12 returns the result when the cancel lands as the send completes.
    The request is still counted by ``Task.cancelling()`` (3.11+), so it is honoured here;
    comparing with the count before the await leaves a cancel that was already handled
    (cleanup code in an ``except CancelledError``) alone."""
    before = _cancel_requests()
    result = await awaitable
    if _cancel_requests() > before:
        raise asyncio.CancelledError
    return result


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
        *,
        prefix: str = "msglog",
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
            on_append,
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
        with _Start.reporting(self.keys.stream) as committed:
            commit = await self._run(self._append_plan(batch, idempotency_key))
            if commit.fresh:
                committed(commit.last_seq - len(batch.encoded) + 1)
        if commit.fresh and self._on_append is not None:
            result = self._on_append(self._core.committed_rows(batch, commit))
            if inspect.isawaitable(result):
                await _honouring_cancel(result)
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
        connection (a read cancelled mid-wait is disconnected, never reused). A cancel
        that lands as a read completes ends the follower too (Python 3.11+: redis-py may
        swallow it, ``Task.cancelling()`` still counts it)."""
        cursor = FollowCursor(
            self._core, after, block_ms=self._block_ms(), reconnect_within=reconnect_within
        )
        return _rows(self._pages(cursor))

    def subscribe(self, callback: AsyncOnAppend, *, after: int | None = None) -> AsyncSubscription:
        """Call ``callback(rows)`` (plain or async) from a background task for commits
        made by any worker; the same delivery rules as
        :meth:`redis_msglog.MessageLog.subscribe`. Must be called with a running loop.

        Starts after ``after``; by default, after the messages committed before
        ``subscribe`` returns. The task reads ``count()`` when it first runs, so appends
        made through this library on the same event loop in the meantime are tracked and
        delivered too: ``sub = log.subscribe(cb); await log.add(...)`` always delivers
        the new message. Appends from other threads or processes have no order with
        ``subscribe()``: when one must not be missed, pass ``after=await log.count()``.

        An unreachable server is waited out, at the start as later on; a callback or
        server error stops the subscription and ``close()`` re-raises it."""
        return AsyncSubscription(self, callback, after)

    async def _pages(
        self, cursor: FollowCursor, stopped: Callable[[], bool] = lambda: False
    ) -> AsyncIterator[list[StoredMessage]]:
        """Non-empty pages of new rows, in order, until ``stopped()``. Each read is sent
        like any other (not by ``execute_command``), so a cancel lost by redis-py is
        honoured between the send and the blocking wait."""
        while not stopped():
            try:
                (reply,) = await _honouring_cancel(self._read((cursor.command(),)))
            except (redis_errors.RedisError, redis_errors.RedisClusterException) as exc:
                if not cursor.retryable(exc):
                    raise storage_error(exc, self.keys) from exc
                await asyncio.sleep(cursor.failed(exc))
                continue
            if isinstance(reply, Mapping):  # raw RESP3 XREAD, {stream: entries}: as RESP2
                reply = list(reply.items())
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
                    reply = await _honouring_cancel(self._read(step.commands))
                elif isinstance(step, Pause):
                    await asyncio.sleep(step.seconds)
                else:
                    reply = await _honouring_cancel(self._write_once(step.command, step.then))
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
        # A cancel honoured mid-exchange leaves replies unread: AsyncRouter discards conn.
        await _honouring_cancel(conn.send_packed_command(conn.pack_commands(commands)))
        replies: list[Any] = []
        for _ in commands:
            try:
                replies.append(await _honouring_cancel(conn.read_response()))
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
    await _honouring_cancel(conn.send_packed_command(conn.pack_commands(packed)))
    raw: list[Any] = []
    for _ in packed:
        try:
            raw.append(await _honouring_cancel(conn.read_response()))
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


class _Start:
    """Where a subscription with ``after=None`` starts, fixed as of ``subscribe()``.

    ``subscribe`` returns before its task has read the count, so an append awaited right
    after it may commit before that read and would be missed. While the count is read,
    every append made through this library on the same event loop to the same stream key
    reports the first seq it committed; the start is the count, lowered to just before the
    lowest reported seq. An append that begins after the count was read commits after it,
    so it needs no report. (Keyed by stream key, not server: a same-named log on another
    server can only make the start earlier, never skip a message.)"""

    _watching: ClassVar[dict[tuple[int, str], set[_Start]]] = {}

    def __init__(self, stream: str) -> None:
        self._key = (id(asyncio.get_running_loop()), stream)
        self._first: int | None = None  # lowest seq committed by a reporting append
        self._appends: set[asyncio.Future[None]] = set()  # reporting appends in flight
        self._watching.setdefault(self._key, set()).add(self)

    @classmethod
    @contextlib.contextmanager
    def reporting(cls, stream: str) -> Iterator[Callable[[int], None]]:
        """Around an append: yields ``committed(first_seq)`` to call if it wrote."""
        loop = asyncio.get_running_loop()
        starts = list(cls._watching.get((id(loop), stream), ()))
        if not starts:
            yield lambda first: None
            return
        done = loop.create_future()
        for start in starts:
            start._appends.add(done)

        def committed(first: int) -> None:
            for start in starts:
                start._first = first if start._first is None else min(start._first, first)

        try:
            yield committed
        finally:
            done.set_result(None)
            for start in starts:
                start._appends.discard(done)

    def stop_watching(self) -> None:
        """Appends from now on need not report (idempotent)."""
        starts = self._watching.get(self._key, set())
        starts.discard(self)
        if not starts:
            self._watching.pop(self._key, None)

    async def position(self, count: int) -> int:
        """The start, given the ``count`` read by the subscription's task."""
        self.stop_watching()  # later appends commit after the count was read
        if self._appends:
            await asyncio.wait(set(self._appends))  # wait without cancelling them
        return count if self._first is None else min(count, self._first - 1)


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
        self._closing = False
        # Watching for appends from now on, before the caller can make one.
        self._start = start = _Start(log.keys.stream) if after is None else None
        self._task = asyncio.get_running_loop().create_task(
            self._deliver(), name=f"msglog-subscription-{log.conversation}"
        )
        if start is not None:  # however the task ends, even cancelled before it ran
            self._task.add_done_callback(lambda _: start.stop_watching())

    async def _deliver(self) -> None:
        try:
            if self._start is not None:
                self.position = await self._start.position(await self._count())
            assert self.position is not None
            cursor = FollowCursor(
                self._log._core,
                self.position,
                block_ms=self._log._block_ms(),
                reconnect_within=None,
            )
            async for rows in self._log._pages(cursor, lambda: self._closing):
                result = self._callback(rows)
                if inspect.isawaitable(result):
                    await _honouring_cancel(result)
                self.position = rows[-1].seq
        except Exception as exc:  # kept for close(): a task has no caller to raise to
            self.error = exc

    async def _count(self) -> int:
        """``count()``, an unreachable server waited out as a follower waits."""
        cursor = FollowCursor(self._log._core, 0, block_ms=1, reconnect_within=None)
        while True:
            try:
                return await self._log.count()
            except errors.ServerUnavailableError as exc:
                await asyncio.sleep(cursor.failed(exc))

    @property
    def running(self) -> bool:
        """Whether the task is still delivering."""
        return not self._task.done()

    async def close(self) -> None:
        """Stop delivering and wait for the task to end; re-raise the callback's (or the
        server's) error if the subscription died of one. From inside the callback, the
        subscription stops once the callback returns."""
        self._closing = True  # seen at the next read even if the cancel is lost (3.10)
        if asyncio.current_task() is self._task:
            return
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
