"""MessageLog: the synchronous client, a thin shell over :mod:`redis_msglog._core`."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import timedelta
from types import TracebackType
from typing import Any, TypeVar, overload

from redis import Redis
from redis import exceptions as redis_errors
from redis.cluster import RedisCluster

from . import adapters
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
from ._routing import Command, Router, asking_before_each, socket_timeout, without_asking
from .models import AgentMessage, Role, StoredMessage

T = TypeVar("T")
OnAppend = Callable[[list[StoredMessage]], object]


class MessageLog(ShellBase):
    """A conversation's durable, append-only message log in Redis (synchronous).

    Any number of workers, in any process or host, may share one conversation: every
    message gets a gap-free ``seq`` assigned by the server atomically with the write.

    Args:
        redis: a ``redis.Redis`` or ``redis.cluster.RedisCluster`` client
            (``decode_responses`` either way).
        conversation: the conversation id; any non-empty string.
        on_append: called after each append commits, in this process, with the rows
            exactly as persisted (one call per ``append_many``). Its exceptions propagate
            to the caller; the rows stay committed.
        prefix: the first part of every key and channel name (see the README's layout).
        max_message_bytes: the largest encoded message accepted (default 8 MiB).
        page_size: entries fetched per round trip by ``all``, ``read``, ``last(n)`` and
            ``follow``.
        retry: how long appends and reads keep trying while the server (or the cluster
            node owning the conversation) cannot take them: by default up to 30 s, enough
            for a cluster failover (safe: every try of an append carries one idempotency
            key); ``redis_msglog.NO_RETRY`` sends once.
        idempotency_window: how long the server remembers a caller's ``idempotency_key``.
        durability: wait after each append for replicas (``WAIT``) and/or the append-only
            file (``WAITAOF``); a shortfall raises :class:`~redis_msglog.NotDurableError`
            (the append committed). See :class:`~redis_msglog.Durability`.
        ttl: retention: every append resets the conversation's expiry (its counter, stream
            and idempotency records) to ``ttl``, so an abandoned conversation disappears
            whole. ``None`` (the default): kept until deleted.
    """

    def __init__(
        self,
        redis: Redis | RedisCluster,
        conversation: str,
        on_append: OnAppend | None = None,
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
        self._router = Router(redis, self._core.keys.stream)
        self._on_append = on_append

    # -- writing -------------------------------------------------------------------

    def add(self, role: Role, content: str, *, idempotency_key: str | None = None) -> int:
        """Append ``{"role": role, "content": content}``; return its seq."""
        return self.append({"role": role, "content": content}, idempotency_key=idempotency_key)

    def append(
        self, msg: AgentMessage | Mapping[str, Any], *, idempotency_key: str | None = None
    ) -> int:
        """Append one message; return the seq the server assigned to it.

        With ``idempotency_key``, a later call with the same key on this conversation
        (within ``idempotency_window``) writes nothing, fires no hook and returns the seq
        assigned the first time; the same key with different messages raises
        :class:`~redis_msglog.IdempotencyConflictError`.

        Raises :class:`~redis_msglog.InvalidMessageError`, :class:`~redis_msglog.CodecError`
        or :class:`~redis_msglog.MessageTooLargeError` before anything is sent, and a
        :class:`~redis_msglog.StorageError` subclass if the server fails. A lost reply is
        re-sent under the ``retry`` policy with the same key, so it never duplicates; when
        every try fails, :class:`~redis_msglog.AppendInDoubtError` says it may have
        committed and carries the key to retry with.
        """
        return self._commit(self._core.batch((msg,)), idempotency_key)

    def append_many(
        self,
        msgs: Iterable[AgentMessage | Mapping[str, Any]],
        *,
        idempotency_key: str | None = None,
    ) -> int:
        """Append a batch atomically (all rows or none); return the last seq assigned.

        An empty batch writes nothing and returns :meth:`count`. One bad message rejects
        the whole batch before anything is sent. ``idempotency_key`` as in :meth:`append`.
        """
        batch = self._core.batch(msgs)
        return self._commit(batch, idempotency_key) if batch.encoded else self.count()

    def _commit(self, batch: Batch, idempotency_key: str | None) -> int:
        commit = self._run(self._append_plan(batch, idempotency_key))
        if commit.fresh and self._on_append is not None:
            self._on_append(self._core.committed_rows(batch, commit))
        self._core.raise_if_not_durable(batch, commit)
        return commit.last_seq

    # -- reading -------------------------------------------------------------------

    def all(self) -> list[StoredMessage]:
        """The full history in seq order (paged internally, no cap)."""
        return self._run(self._core.read_plan(0, None))

    def read(self, after: int = 0, limit: int | None = None) -> list[StoredMessage]:
        """Messages with seq > ``after``, in order, at most ``limit``: a cursor whose cost
        does not grow with the history's length."""
        return self._run(self._core.read_plan(after, limit))

    @overload
    def last(self) -> StoredMessage | None: ...
    @overload
    def last(self, n: int) -> list[StoredMessage]: ...
    def last(self, n: int | None = None) -> StoredMessage | list[StoredMessage] | None:
        """The most recent message (``None`` on an empty log), or the last ``n`` in
        chronological order (``ValueError`` for a negative ``n``)."""
        if n is None:
            rows = self._run(self._core.last_plan(1))
            return rows[0] if rows else None
        return self._run(self._core.last_plan(n))

    def count(self) -> int:
        """Total messages ever appended: the seq high-water mark (one ``GET``)."""
        return self._run(self._core.count_plan())

    # -- following commits from every worker -----------------------------------------

    def follow(
        self, after: int = 0, *, reconnect_within: float | None = 30.0
    ) -> Iterator[StoredMessage]:
        """Every message with seq > ``after``, in seq order, then each new one as any
        worker commits it, for as long as the caller iterates.

        Never a gap or a duplicate: each read is a blocking ``XREAD`` from the last seq
        seen, so a slow consumer or a lost connection (server restart, ``CLIENT KILL``)
        resumes exactly where it was. The connection goes back to the pool between reads.
        If the server stays unreachable for ``reconnect_within`` seconds (``None``: wait
        forever), raises :class:`~redis_msglog.ServerUnavailableError`.
        """
        cursor = FollowCursor(
            self._core, after, block_ms=self._block_ms(), reconnect_within=reconnect_within
        )  # built now, so bad arguments raise here and not at the first next()
        return (row for page in self._pages(cursor, lambda: False) for row in page)

    def subscribe(self, callback: OnAppend, *, after: int | None = None) -> Subscription:
        """Call ``callback(rows)`` in a background thread for commits made by any worker.

        Delivery: every message with seq > ``after`` (default: the current ``count()``,
        so only new commits), exactly once and in seq order, in batches, while the
        subscription is open. ``Subscription.position`` is the last seq handed to a
        callback that returned; to resume after a restart, store it and pass it back as
        ``after`` (at-least-once if stored after handling). If ``callback`` raises, the
        subscription stops and :meth:`Subscription.close` re-raises the error.
        """
        wait_ms = min(Subscription.WAIT_MS, self._block_ms())
        cursor = FollowCursor(
            self._core,
            self.count() if after is None else after,
            block_ms=wait_ms,
            reconnect_within=None,
        )
        return Subscription(self, callback, cursor)

    def _pages(
        self, cursor: FollowCursor, stopped: Callable[[], bool]
    ) -> Iterator[list[StoredMessage]]:
        """Non-empty pages of new rows, in order, until ``stopped()``."""
        client: Any = self._redis  # XREAD goes through the client: it routes and retries
        while not stopped():
            try:
                reply = client.execute_command(*cursor.command())
            except (redis_errors.RedisError, redis_errors.RedisClusterException) as exc:
                if not cursor.retryable(exc):
                    raise storage_error(exc, self.keys) from exc
                time.sleep(cursor.failed(exc))
                continue
            if rows := cursor.accept(reply):
                yield rows

    def _block_ms(self) -> int:
        return follow_block_ms(socket_timeout(self._redis))

    # -- provider formats (see redis_msglog.adapters for the rules) ------------------

    def to_openai(self) -> list[dict[str, Any]]:
        """The full history as OpenAI Chat Completions messages."""
        return adapters.to_openai(self.all())

    def to_anthropic(self) -> list[dict[str, Any]]:
        """The full history as Anthropic Messages turns (``system`` dropped: pass it as
        the request's top-level ``system`` parameter)."""
        return adapters.to_anthropic(self.all())

    def to_langchain(self) -> list[dict[str, Any]]:
        """The full history as LangChain ``{"role", "content"}`` messages (user,
        assistant and system only)."""
        return adapters.to_langchain(self.all())

    # -- carrying plan steps to the server -------------------------------------------

    def _run(self, plan: Plan[T]) -> T:
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
                    reply = self._read(step.commands)
                elif isinstance(step, Pause):
                    time.sleep(step.seconds)
                else:
                    reply = self._write_once(step.command, step.then)
            except (redis_errors.RedisError, ReplyLost) as exc:
                error = exc

    def _read(self, commands: tuple[Command, ...]) -> list[Any]:
        # Raw replies (redis-py's response callbacks would reshape every stream entry);
        # the connection's own retry policy applies. Re-sends after a failure are the
        # core's, under the log's RetryPolicy.
        replies: dict[int, Any] = {}
        self._router.run(
            lambda conn, asking: conn.retry.call_with_retry(
                lambda: _round_trip(conn, commands, replies, asking),
                lambda _error: conn.disconnect(),
            )
        )
        return [replies[i] for i in range(len(commands))]

    def _write_once(self, command: Command, then: Command | None) -> Any:
        # Never through redis-py's retry policy: a blind re-send of an append writes twice.
        return self._router.run(lambda conn, asking: _send_once(conn, command, then, asking))


def _send_once(conn: Any, command: Command, then: Command | None, asking: bool) -> Any:
    commands = asking_before_each((command,), asking) + ([then] if then else [])
    try:
        conn.send_packed_command(conn.pack_commands(commands))
        replies: list[Any] = []
        for _ in commands:
            try:
                replies.append(conn.read_response())
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
        conn.disconnect()
        raise ReplyLost(str(exc)) from exc


def _round_trip(
    conn: Any, commands: tuple[Command, ...], replies: dict[int, Any], asking: bool
) -> None:
    """Send the commands not yet in ``replies`` in one write and read every reply into
    ``replies`` (by index); then raise the first error reply.

    A reply kept from an earlier try is not asked for again after a redirection: during
    a slot migration it came from the node that still held its key, and the importing
    node, which has not received that key yet, would answer as if it did not exist."""
    todo = [i for i in range(len(commands)) if i not in replies]
    packed = asking_before_each([commands[i] for i in todo], asking)
    conn.send_packed_command(conn.pack_commands(packed))
    raw: list[Any] = []
    for _ in packed:
        try:
            raw.append(conn.read_response())
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


class Subscription:
    """A background thread feeding commits to a callback; see :meth:`MessageLog.subscribe`.

    Close it (or use it as a context manager) to stop; the thread notices within the
    subscription's ``XREAD`` wait (at most half a second).
    """

    WAIT_MS = 500

    def __init__(self, log: MessageLog, callback: OnAppend, cursor: FollowCursor) -> None:
        self.position = cursor.position
        self.error: BaseException | None = None
        self._callback = callback
        self._stop = threading.Event()
        self._pages = log._pages(cursor, self._stop.is_set)
        self._thread = threading.Thread(
            target=self._deliver, name=f"msglog-subscription-{log.conversation}", daemon=True
        )
        self._thread.start()

    def _deliver(self) -> None:
        try:
            for rows in self._pages:
                self._callback(rows)
                self.position = rows[-1].seq
        except BaseException as exc:  # kept for close(): a thread has no caller to raise to
            self.error = exc

    @property
    def running(self) -> bool:
        """Whether the thread is still delivering."""
        return self._thread.is_alive()

    def close(self, timeout: float | None = None) -> None:
        """Stop delivering and wait for the thread; re-raise the callback's (or the
        server's) error if the subscription died of one. From inside the callback, the
        subscription stops once the callback returns."""
        self._stop.set()
        if threading.current_thread() is self._thread:
            return  # a thread cannot join itself; the loop sees the stop after the callback
        self._thread.join(timeout)
        if self.error is not None:
            raise self.error

    def __enter__(self) -> Subscription:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
