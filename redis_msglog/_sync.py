# Generated from _aio.py by scripts/unasync.py: edit that file, then run the script.
"""MessageLog: the synchronous client, a thin shell over the I/O-free core.

Generated from ``_aio.py``, the single source of both clients (see there).
"""

from __future__ import annotations

from collections.abc import Iterator, Callable, Iterable, Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar, overload

from redis import exceptions as redis_errors
from redis import Redis
from redis.cluster import RedisCluster

from . import _io_sync as io
from . import adapters
from ._blobs import DEFAULT_BLOB_THRESHOLD, BlobMode
from ._cache import all_plan, read_cache
from ._core import (
    DEFAULT_IDEMPOTENCY_WINDOW,
    DEFAULT_MAX_MESSAGE_BYTES,
    DEFAULT_PAGE_SIZE,
    Batch,
)
from ._durability import Durability
from ._follow import FollowCursor, follow_block_ms
from ._retry import DEFAULT_RETRY, RetryPolicy
from ._routing import Router, asking_before_each, pack, socket_timeout, without_asking
from ._shell import CLIENT_FAILURES, ShellBase, step_failure
from ._steps import Command, Pause, Plan, Read, ReplyLost, StepFailure, Write
from ._subscription import OnAppend, Subscription
from .models import AgentMessage, Role, StoredMessage

if TYPE_CHECKING:
    from langchain_core.messages import BaseMessage

T = TypeVar("T")


class MessageLog(ShellBase):
    """A conversation's durable, append-only message log in Redis (sync).

    Any number of workers, in any process or host, may share one conversation: every
    message gets a gap-free ``seq`` assigned by the server atomically with the write.

    Args:
        redis: a ``redis.Redis`` or ``redis.cluster.RedisCluster`` client
            (``decode_responses`` either way).
        conversation: the conversation id; any non-empty string.
        on_append: called after each append commits, in this process, with the rows
            exactly as persisted (one call per ``append_many``). Its exceptions propagate
            to the caller; the rows stay committed. (The asyncio client also awaits an
            async hook.)
        prefix: the first part of every key and channel name (see docs/operations.md).
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
        ttl: retention: every append resets the conversation's expiry (its counter, stream,
            blobs and idempotency records) to ``ttl``, so an abandoned conversation
            disappears whole. ``None`` (the default): kept until deleted.
        blob_threshold: a binary content part (image, audio, file) larger than this many
            bytes is stored once per conversation off the row, in the same atomic append
            (default 256 KiB; ``None``: always inline). ``max_message_bytes`` applies to
            the row after that. Reads put the bytes back unless asked for references.

    Cancellation, asyncio only: an append cancelled while in flight has either committed or
    not (the script is atomic); its connection is discarded, never reused mid-reply.
    Calling again with the same ``idempotency_key`` is always safe. (Pass your own key if
    you may retry after a cancellation: a generated one dies with the cancelled call.)
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
        blob_threshold: int | None = DEFAULT_BLOB_THRESHOLD,
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
            blob_threshold=blob_threshold,
        )
        self._redis = redis
        self._router = Router(redis, self._core.keys.stream)
        self._on_append = on_append

    # -- writing -------------------------------------------------------------------

    def add(
        self,
        role: Role,
        content: str,
        *,
        idempotency_key: str | None = None,
        expected_seq: int | None = None,
    ) -> int:
        """Append ``{"role": role, "content": content}``; return its seq."""
        return self.append(
            {"role": role, "content": content},
            idempotency_key=idempotency_key,
            expected_seq=expected_seq,
        )

    def append(
        self,
        msg: AgentMessage | Mapping[str, Any],
        *,
        idempotency_key: str | None = None,
        expected_seq: int | None = None,
    ) -> int:
        """Append one message; return the seq the server assigned to it.

        With ``idempotency_key``, a later call with the same key on this conversation
        (within ``idempotency_window``) writes nothing, fires no hook and returns the seq
        assigned the first time; the same key with different messages raises
        :class:`~redis_msglog.IdempotencyConflictError`.

        With ``expected_seq``, the append commits only if the log's last seq is exactly
        that (checked inside the append script, atomically with the write): otherwise
        :class:`~redis_msglog.SeqConflictError`, carrying the current last seq, and
        nothing is written. Of many writers that read seq ``N`` and append with
        ``expected_seq=N``, exactly one wins. With an ``idempotency_key`` too, a replay of
        a committed call returns its seq even though the log has moved on.

        Raises :class:`~redis_msglog.InvalidMessageError`, :class:`~redis_msglog.CodecError`
        or :class:`~redis_msglog.MessageTooLargeError` before anything is sent, and a
        :class:`~redis_msglog.StorageError` subclass if the server fails. A lost reply is
        re-sent under the ``retry`` policy with the same key, so it never duplicates; when
        every try fails, :class:`~redis_msglog.AppendInDoubtError` says it may have
        committed and carries the key to retry with.
        """
        batch = self._core.batch((msg,))
        return self._commit(batch, idempotency_key, expected_seq)

    def append_many(
        self,
        msgs: Iterable[AgentMessage | Mapping[str, Any]],
        *,
        idempotency_key: str | None = None,
        expected_seq: int | None = None,
    ) -> int:
        """Append a batch atomically (all rows or none); return the last seq assigned.

        An empty batch writes nothing and returns :meth:`count` (with ``expected_seq``, it
        raises :class:`~redis_msglog.SeqConflictError` if the count differs). One bad
        message rejects the whole batch before anything is sent. ``idempotency_key`` and
        ``expected_seq`` as in :meth:`append`.
        """
        batch = self._core.batch(msgs)
        if batch.encoded:
            return self._commit(batch, idempotency_key, expected_seq)
        count = self.count()
        self._core.check_expected(count, expected_seq)
        return count

    def _commit(
        self, batch: Batch, idempotency_key: str | None, expected_seq: int | None = None
    ) -> int:
        commit = self._run(self._append_plan(batch, idempotency_key, expected_seq))
        self._warn(commit)
        if commit.fresh and self._on_append is not None:
            io.call_hook(self._on_append, self._core.committed_rows(batch, commit))
        self._core.raise_if_not_durable(batch, commit)
        return commit.last_seq

    # -- reading -------------------------------------------------------------------

    def all(self, *, blobs: BlobMode = "hydrate") -> list[StoredMessage]:
        """The full history in seq order (paged internally, no cap): a gap-free prefix,
        consistent even while others append, or :class:`~redis_msglog.CorruptLogError`.

        ``blobs``: binaries stored off the rows come back as bytes (``"hydrate"``, one
        more round trip when there are any) or as references (``"refs"``: the part's
        ``blob`` is the SHA-256 of the bytes, ``data`` is ``None``); likewise below.

        A conversation this client has read before costs one round trip and the new
        rows only: the rows read last time are kept (per client, within a byte budget;
        see :func:`~redis_msglog.configure_read_cache`) and checked against the server
        in the same round trip, so a rewound, recreated or edited log is read again."""
        return self._run(all_plan(self._core, read_cache(self._redis), blobs))

    def read(
        self, after: int = 0, limit: int | None = None, *, blobs: BlobMode = "hydrate"
    ) -> list[StoredMessage]:
        """Messages with seq > ``after``, in order, at most ``limit``: a cursor whose cost
        does not grow with the history's length."""
        return self._run(self._core.read_plan(after, limit, blobs))

    @overload
    def last(self, *, blobs: BlobMode = ...) -> StoredMessage | None: ...
    @overload
    def last(self, n: int, *, blobs: BlobMode = ...) -> list[StoredMessage]: ...
    def last(
        self, n: int | None = None, *, blobs: BlobMode = "hydrate"
    ) -> StoredMessage | list[StoredMessage] | None:
        """The most recent message (``None`` on an empty log), or the last ``n`` in
        chronological order (``ValueError`` for a negative ``n``)."""
        if n is None:
            rows = self._run(self._core.last_plan(1, blobs))
            return rows[0] if rows else None
        return self._run(self._core.last_plan(n, blobs))

    def count(self) -> int:
        """Total messages ever appended: the seq high-water mark (one round trip of
        ``XLEN``, ``GET``, ``XLEN``, checked against each other)."""
        return self._run(self._core.count_plan())

    # -- following commits from every worker -----------------------------------------

    def follow(
        self,
        after: int = 0,
        *,
        reconnect_within: float | None = 30.0,
        blobs: BlobMode = "hydrate",
    ) -> Iterator[StoredMessage]:
        """Every message with seq > ``after``, in seq order, then each new one as any
        worker commits it, for as long as the caller iterates.

        Never a gap or a duplicate: each read is a blocking ``XREAD`` from the last seq
        seen, so a slow consumer or a lost connection (server restart, ``CLIENT KILL``)
        resumes exactly where it was. The connection goes back to the pool between reads
        (asyncio: cancelling the consuming task, or leaving the loop, releases it at once).
        If the server stays unreachable for ``reconnect_within`` seconds (``None``: wait
        forever), raises :class:`~redis_msglog.ServerUnavailableError`.
        """
        cursor = FollowCursor(
            self._core,
            after,
            block_ms=self._block_ms(),
            reconnect_within=reconnect_within,
            blobs=blobs,
        )  # built now, so bad arguments raise here and not at the first row
        return self._rows(cursor)

    def subscribe(
        self, callback: OnAppend, *, after: int | None = None
    ) -> Subscription:
        """Call ``callback(rows)`` in the background (a thread; asyncio: a task, and the
        callback may be async) for commits made by any worker.

        Delivery: every message with seq > ``after`` (default: the ``count()`` read before
        this returns, so exactly the commits made after it), exactly once and in seq
        order, in batches, while the subscription is open. An unreachable server is
        waited out. ``position`` is the last seq handed to a callback that returned; to
        resume after a restart, store it and pass it back as ``after`` (at-least-once if
        stored after handling). If ``callback`` raises, the subscription stops and
        ``close()`` re-raises the error.
        """
        start = self.count() if after is None else after
        wait_ms = min(Subscription.WAIT_MS, self._block_ms())
        cursor = FollowCursor(self._core, start, block_ms=wait_ms, reconnect_within=None)
        return Subscription(self, callback, cursor)

    def _rows(self, cursor: FollowCursor) -> Iterator[StoredMessage]:
        for page in self._pages(cursor):
            for row in page:
                yield row

    def _pages(
        self, cursor: FollowCursor, stopped: Callable[[], bool] = lambda: False
    ) -> Iterator[list[StoredMessage]]:
        """Non-empty pages of new rows, in order, until ``stopped()``: each page a plan,
        carried like any other read."""
        while not stopped():
            if rows := self._run(cursor.page_plan()):
                yield rows

    def _block_ms(self) -> int:
        return follow_block_ms(socket_timeout(self._redis))

    # -- provider formats (see redis_msglog.adapters for the rules) ------------------

    def to_openai(self) -> list[dict[str, Any]]:
        """The full history as OpenAI Chat Completions messages."""
        return adapters.to_openai(self.all())

    def to_anthropic(self) -> list[dict[str, Any]]:
        """The full history as Anthropic Messages turns (the system prompt left out:
        :meth:`anthropic_system` is the request's top-level ``system`` parameter)."""
        return adapters.to_anthropic(self.all())

    def to_langchain(self) -> list[dict[str, Any]]:
        """The full history as LangChain ``{"role", "content"}`` messages (user,
        assistant and system only)."""
        return adapters.to_langchain(self.all())

    def to_responses(self) -> list[dict[str, Any]]:
        """The full history as OpenAI Responses API input items (reasoning items only
        where OpenAI produced them)."""
        return adapters.to_responses(self.all())

    def to_langchain_messages(self) -> list[BaseMessage]:
        """The full history as LangChain ``BaseMessage`` objects, one per message, nothing
        left out (tool calls and results, ids, content blocks). Needs langchain-core."""
        return adapters.to_langchain_messages(self.all())

    def anthropic_system(self) -> str | list[dict[str, Any]] | None:
        """The ``system`` parameter for :meth:`to_anthropic`'s turns: the history's system
        prompt as it was imported (a ``str``, or text blocks), ``None`` if there is none.

        Each of these methods reads the full history; to build a request from one read,
        call the pure functions on the rows: ``rows = log.all()``, then
        ``adapters.to_anthropic(rows)`` and ``adapters.anthropic_system(rows)``."""
        return adapters.anthropic_system(self.all())

    # -- importing provider formats: one atomic append_many each ----------------------

    def append_openai(
        self, messages: Sequence[Any], *, idempotency_key: str | None = None
    ) -> int:
        """Append OpenAI Chat Completions messages, converted by
        :func:`~redis_msglog.from_openai`, with one :meth:`append_many` (all or none);
        return the last seq (:meth:`count` for an empty list, which writes nothing).

        Input the importer rejects raises :class:`~redis_msglog.InvalidMessageError`
        (naming the message's index and path) before anything is sent.
        ``idempotency_key`` as in :meth:`append`: the conversion is deterministic, so a
        retry with the same input and key never writes twice. ``to_openai()`` gives the
        same messages back."""
        return self.append_many(
            adapters.from_openai(messages), idempotency_key=idempotency_key
        )

    def append_responses(
        self, items: Sequence[Any], *, idempotency_key: str | None = None
    ) -> int:
        """Append OpenAI Responses API items (input items, or a response's ``output``
        items), converted by :func:`~redis_msglog.from_responses`, with one
        :meth:`append_many`; return the last seq. As :meth:`append_openai` otherwise;
        ``to_responses()`` gives the same items back."""
        return self.append_many(
            adapters.from_responses(items), idempotency_key=idempotency_key
        )

    def append_anthropic(
        self,
        turns: Sequence[Any],
        *,
        system: str | Sequence[Any] | None = None,
        idempotency_key: str | None = None,
    ) -> int:
        """Append Anthropic Messages turns, converted by
        :func:`~redis_msglog.from_anthropic` (``system``, the request's top-level
        parameter, as a leading system message), with one :meth:`append_many`; return the
        last seq. As :meth:`append_openai` otherwise; ``to_anthropic()`` gives the same
        turns back and ``anthropic_system()`` the ``system``."""
        return self.append_many(
            adapters.from_anthropic(turns, system=system), idempotency_key=idempotency_key
        )

    def append_langchain(
        self, messages: Sequence[Any], *, idempotency_key: str | None = None
    ) -> int:
        """Append LangChain ``BaseMessage`` objects, converted by
        :func:`~redis_msglog.from_langchain` (needs langchain-core), with one
        :meth:`append_many`; return the last seq. As :meth:`append_openai` otherwise;
        ``to_langchain_messages()`` gives equal messages back."""
        return self.append_many(
            adapters.from_langchain(messages), idempotency_key=idempotency_key
        )

    # -- carrying plan steps to the server -------------------------------------------

    def _run(self, plan: Plan[T]) -> T:
        """Carry the plan's steps to the server; a failed step goes back into the plan as
        the core's outcome (never as redis-py's exception)."""
        reply: Any = None
        failure: StepFailure | None = None
        while True:
            try:
                step = plan.send(reply) if failure is None else plan.throw(failure)
            except StopIteration as done:
                result: T = done.value
                return result
            reply, failure = None, None
            try:
                if isinstance(step, Read):
                    reply = io.honouring_cancel(self._read(step.commands))
                elif isinstance(step, Pause):
                    io.sleep(step.seconds)
                else:
                    reply = io.honouring_cancel(self._write_once(step))
            except (*CLIENT_FAILURES, ReplyLost) as exc:
                failure = step_failure(exc)

    def _read(self, commands: tuple[Command, ...]) -> list[Any]:
        # Raw replies (redis-py's response callbacks would reshape every stream entry).
        # No redis-py retry: re-sends are the core's, under the log's RetryPolicy.
        replies: dict[int, Any] = {}
        self._router.run(lambda conn, asking: _round_trip(conn, commands, replies, asking))
        return [replies[i] for i in range(len(commands))]

    def _write_once(self, step: Write) -> Any:
        # Never through redis-py's retry policy: a blind re-send of an append writes twice.
        return self._router.run(
            lambda conn, asking: _send_once(conn, step.command, step.then, asking)
        )


def _send_once(conn: Any, command: Command, then: Command | None, asking: bool) -> Any:
    """Send ``command`` (and ``then`` behind it) once; a failure after sending is
    :class:`ReplyLost`: the server may have run it."""
    commands = asking_before_each((command,), asking) + ([then] if then else [])
    try:
        # A cancel honoured mid-exchange leaves replies unread: the router discards conn.
        io.send(conn, pack(conn, commands))
        replies: list[Any] = []
        for _ in commands:
            try:
                replies.append(io.honouring_cancel(conn.read_response()))
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
        raise ReplyLost(str(exc) or type(exc).__name__, exc) from exc


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
    io.send(conn, pack(conn, packed))
    raw: list[Any] = []
    for _ in packed:
        try:
            raw.append(io.honouring_cancel(conn.read_response()))
        except redis_errors.ResponseError as exc:
            raw.append(exc)
    failures = []
    for index, reply in zip(todo, without_asking(raw, asking), strict=True):
        if isinstance(reply, redis_errors.ResponseError):
            failures.append(reply)
        else:
            replies[index] = reply
    if failures:
        raise failures[0]
