"""AsyncMessageLog: the asyncio client, a thin shell over the I/O-free core.

This file is the single source of both clients: ``_sync.py`` (``MessageLog``) is
generated from it by ``scripts/unasync.py`` (``await`` dropped, ``Async`` names replaced),
and a test fails when the two drift. What truly differs is in ``_io_async.py`` /
``_io_sync.py`` and ``_subscription.py``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal, TypeVar, overload

from redis import exceptions as redis_errors
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from . import _io_async as io
from . import adapters
from ._blobs import DEFAULT_BLOB_THRESHOLD, BlobMode, check_blob_mode
from ._cache import read_cache
from ._core import (
    DEFAULT_IDEMPOTENCY_WINDOW,
    DEFAULT_MAX_MESSAGE_BYTES,
    DEFAULT_PAGE_SIZE,
    Batch,
    Commit,
    PreparedAppend,
    require_callable,
    require_non_negative,
    require_seq,
)
from ._durability import Durability
from ._follow import FollowCursor, follow_block_ms
from ._retry import DEFAULT_RETRY, RetryPolicy
from ._routing import AsyncRouter, asking_before_each, pack, socket_timeout, without_asking
from ._shell import CLIENT_FAILURES, REFUSALS, ShellBase, step_failure
from ._steps import Command, Pause, Plan, Read, ReplyLost, StepFailure, Write
from ._subscription import AsyncOnAppend, AsyncOnCommit, AsyncSubscription
from ._views import AttrChanges, Edit, check_fork_point, fork_edit, retract_edit, through_edit
from .edits import Attributes, Entry, LogView, MessageView, View
from .errors import InvalidArgumentError, InvalidEditError
from .models import AgentMessage, Role, StoredMessage

if TYPE_CHECKING:
    from langchain_core.messages import BaseMessage

T = TypeVar("T")


class AsyncMessageLog(ShellBase):
    """A conversation's durable, append-only message log in Redis (asyncio).

    Any number of workers, in any process or host, may share one conversation: every
    message gets a gap-free ``seq`` assigned by the server atomically with the write.

    Args:
        redis: a ``redis.asyncio.Redis`` or ``redis.asyncio.cluster.RedisCluster`` client
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
            for a cluster failover (safe: every try of an append carries the same
            identity, the caller's key or the process's producer id and call number);
            ``redis_msglog.NO_RETRY`` sends once.
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
    you may retry after a cancellation: a call made without one cannot be named again.)
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
        self._router = AsyncRouter(redis, self._core.keys.stream)
        self._on_append = on_append
        self._options: dict[str, Any] = {
            "prefix": prefix,
            "max_message_bytes": max_message_bytes,
            "page_size": page_size,
            "retry": retry,
            "idempotency_window": idempotency_window,
            "ttl": ttl,
            "durability": durability,
            "blob_threshold": blob_threshold,
        }  # for fork(): the new log is configured like this one

    # -- writing -------------------------------------------------------------------

    async def add(
        self,
        role: Role,
        content: str,
        *,
        idempotency_key: str | None = None,
        expected_seq: int | None = None,
    ) -> int:
        """Append ``{"role": role, "content": content}``; return its seq."""
        return await self.append(
            {"role": role, "content": content},
            idempotency_key=idempotency_key,
            expected_seq=expected_seq,
        )

    async def append(
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
        return await self._commit(batch, idempotency_key, expected_seq)

    async def append_many(
        self,
        msgs: Iterable[AgentMessage | Mapping[str, Any]],
        *,
        idempotency_key: str | None = None,
        expected_seq: int | None = None,
        attrs: Mapping[str, str | None] | None = None,
    ) -> int:
        """Append a batch atomically (all rows or none); return the last seq assigned.

        An empty batch writes nothing and returns :meth:`count` (with ``expected_seq``, it
        raises :class:`~redis_msglog.SeqConflictError` if the count differs). One bad
        message rejects the whole batch before anything is sent. ``idempotency_key`` and
        ``expected_seq`` as in :meth:`append`.

        ``attrs``: conversation attributes to set (``None``: delete) in the same atomic
        call, recorded in an ``attrs`` entry before the messages (see :meth:`set_attrs`).
        """
        batch = self._core.batch(msgs, attrs=attrs)
        if batch.encoded or batch.edit is not None:
            return await self._commit(batch, idempotency_key, expected_seq)
        count = await self.count()
        self._core.check_expected(count, expected_seq)
        return count

    async def _commit(
        self, batch: Batch, idempotency_key: str | None, expected_seq: int | None = None
    ) -> int:
        return (await self._commit_batch(batch, idempotency_key, expected_seq)).last_seq

    async def _commit_batch(
        self, batch: Batch, idempotency_key: str | None, expected_seq: int | None
    ) -> Commit:
        commit = await self._send_quick(self._prepare_append(batch, idempotency_key, expected_seq))
        self._warn(commit)
        if commit.fresh and batch.encoded and self._on_append is not None:
            await io.call_hook(self._on_append, self._core.committed_rows(batch, commit))
        self._core.raise_if_not_durable(batch, commit)
        return commit

    # -- edits: entries of the log, never rewrites (docs/edits.md) ------------------
    #
    # Each is one atomic call of the append script, like an append: idempotency_key,
    # expected_seq, retries after a lost reply, durability and ttl work the same way. A
    # bad argument, or a seq the view does not hold, raises InvalidEditError and writes
    # nothing.

    async def retract(
        self,
        seqs: Iterable[int],
        *,
        idempotency_key: str | None = None,
        expected_seq: int | None = None,
        attrs: Mapping[str, str | None] | None = None,
    ) -> int:
        """Hide the messages ``seqs`` from every view (they stay in the physical log)
        with one edit entry; return its seq. Each must be a row of the view: a seq that
        is beyond the end, an edit, or already retracted or compacted away raises
        :class:`~redis_msglog.InvalidEditError`."""
        batch = self._core.batch((), retract_edit(seqs), attrs)
        return await self._commit(batch, idempotency_key, expected_seq)

    async def pop(
        self,
        *,
        idempotency_key: str | None = None,
        expected_seq: int | None = None,
        blobs: BlobMode = "hydrate",
        attrs: Mapping[str, str | None] | None = None,
    ) -> StoredMessage | None:
        """Retract the newest row of the view and return it, atomically: two workers
        popping at once pop two different messages. ``None`` (nothing written) when the
        view is empty."""
        check_blob_mode(blobs)  # before the edit commits
        batch = self._core.batch((), Edit("pop"), attrs)
        commit = await self._commit_batch(batch, idempotency_key, expected_seq)
        return await self._run(self._core.popped_plan(commit, blobs))

    async def compact(
        self,
        messages: Iterable[AgentMessage | Mapping[str, Any]],
        *,
        through_seq: int,
        idempotency_key: str | None = None,
        expected_seq: int | None = None,
        attrs: Mapping[str, str | None] | None = None,
    ) -> int:
        """Replace the rows of the view up to and including ``through_seq`` (by position
        in the view; 0: none) with ``messages`` (a summary, say), which are appended
        as new entries and shown first; the rows after ``through_seq`` follow them.
        Nothing is deleted: the compacted rows stay in the physical log. Returns the last
        seq written."""
        batch = self._core.batch(
            messages, through_edit("compact", through_seq, zero_ok=True), attrs
        )
        return await self._commit(batch, idempotency_key, expected_seq)

    async def replace(
        self,
        messages: Iterable[AgentMessage | Mapping[str, Any]],
        *,
        idempotency_key: str | None = None,
        expected_seq: int | None = None,
        attrs: Mapping[str, str | None] | None = None,
    ) -> int:
        """Make ``messages`` the whole view, atomically (a compaction of everything);
        return the last seq written."""
        batch = self._core.batch(messages, Edit("compact", "end"), attrs)
        return await self._commit(batch, idempotency_key, expected_seq)

    async def clear(
        self,
        *,
        idempotency_key: str | None = None,
        expected_seq: int | None = None,
        attrs: Mapping[str, str | None] | None = None,
    ) -> int:
        """Empty the view with one edit entry (``replace([])``); nothing is deleted."""
        return await self.replace(
            (), idempotency_key=idempotency_key, expected_seq=expected_seq, attrs=attrs
        )

    async def archive(
        self,
        through_seq: int,
        *,
        idempotency_key: str | None = None,
        expected_seq: int | None = None,
        attrs: Mapping[str, str | None] | None = None,
    ) -> int:
        """Mark the rows of the view up to and including ``through_seq`` (by position)
        archived: ``view="active"`` reads leave them out, ``view="archived"`` reads
        return them. The watermark only moves forward. Returns the edit's seq."""
        batch = self._core.batch((), through_edit("archive", through_seq, zero_ok=False), attrs)
        return await self._commit(batch, idempotency_key, expected_seq)

    async def set_attrs(
        self,
        attrs: Mapping[str, str | None],
        *,
        idempotency_key: str | None = None,
        expected_seq: int | None = None,
    ) -> int:
        """Set the conversation's attributes (``None``: delete one) with one entry of
        their own, which changes no view; return its seq. Attributes are small strings
        kept beside the log (a framework's record, a title...), changed atomically with
        the entries they go with: every append and edit takes ``attrs=`` too, and
        ``expected_seq`` makes a change a compare-and-set. Every change is an entry, so
        the physical log holds their history (docs/edits.md, "Attributes")."""
        batch = self._core.batch((), attrs=attrs)
        return await self._commit(batch, idempotency_key, expected_seq)

    async def attrs(self) -> Attributes:
        """The conversation's attributes and its last seq, read in one round trip."""
        return await self._run(self._core.attrs_plan())

    async def fork(
        self,
        new_conversation: str,
        *,
        at_seq: int | None = None,
        idempotency_key: str | None = None,
        attrs: Mapping[str, str | None] | None = None,
    ) -> AsyncMessageLog:
        """Start ``new_conversation`` as a copy of this log's view as it was at seq
        ``at_seq`` (default: now), and return its log (same client and options, no
        hook). Its first entry records the source and seq; this log is untouched. A
        target that already has entries raises :class:`~redis_msglog.SeqConflictError`,
        and an ``at_seq`` inside a compaction that keeps rows after its messages (from
        its entry to its last message, where that view never existed)
        :class:`~redis_msglog.InvalidEditError` naming the seqs on either side; nothing
        is written. Inside a ``replace`` (or a fork's copy) it copies the first of its
        messages, a prefix of the view, as at any other seq."""
        if new_conversation == self.conversation:
            raise InvalidArgumentError("fork: the new conversation must differ from this one")
        target = AsyncMessageLog(self._redis, new_conversation, **self._options)
        if at_seq is not None:
            require_seq("at_seq", at_seq)
        entries = await self._run(self._core.physical_read_plan(0, at_seq))
        if at_seq is not None and len(entries) < at_seq:
            raise InvalidEditError(f"fork: at_seq {at_seq} is beyond the end ({len(entries)})")
        view = LogView(entries)
        if at_seq is not None:
            check_fork_point(view, entries, at_seq)
        changes = None if attrs is None else AttrChanges.of(attrs)
        edit = fork_edit(self.conversation, view.last_seq, len(view.rows), changes)
        batch = target._core.batch(view.rows, edit, attrs)
        await target._commit(batch, idempotency_key, expected_seq=0)
        return target

    # -- reading -------------------------------------------------------------------

    @overload
    async def all(
        self, *, blobs: BlobMode = ..., view: MessageView = ...
    ) -> list[StoredMessage]: ...
    @overload
    async def all(self, *, blobs: BlobMode = ..., view: Literal["physical"]) -> list[Entry]: ...
    async def all(
        self, *, blobs: BlobMode = "hydrate", view: View = "visible"
    ) -> list[StoredMessage] | list[Entry]:
        """The full history in view order (paged internally, no cap). ``view``:
        ``"visible"`` (every message not retracted or compacted away), ``"active"``
        (visible, after the archive watermark), ``"archived"`` or ``"physical"`` (every
        entry, edits included: :class:`~redis_msglog.EditEntry` rows); see
        docs/edits.md. On an edit-free log: a gap-free prefix, consistent even while others
        append, or :class:`~redis_msglog.CorruptLogError`.

        ``blobs``: binaries stored off the rows come back as bytes (``"hydrate"``, one
        more round trip when there are any) or as references (``"refs"``: the part's
        ``blob`` is the SHA-256 of the bytes, ``data`` is ``None``); likewise below.

        A conversation this client has read before costs one round trip and the new
        rows only (the visible or active view of a log without edits): the rows read last time are
        kept (per client, within a byte budget; see
        :func:`~redis_msglog.configure_read_cache`) and checked against the server in the
        same round trip, so a rewound, recreated or edited log is read again."""
        if view == "visible" or view == "active":
            return await self._run(self._core.all_plan(read_cache(self._redis), blobs, view))
        return await self.read(0, None, blobs=blobs, view=view)

    @overload
    async def read(
        self,
        after: int = ...,
        limit: int | None = ...,
        *,
        blobs: BlobMode = ...,
        view: MessageView = ...,
    ) -> list[StoredMessage]: ...
    @overload
    async def read(
        self,
        after: int = ...,
        limit: int | None = ...,
        *,
        blobs: BlobMode = ...,
        view: Literal["physical"],
    ) -> list[Entry]: ...
    async def read(
        self,
        after: int = 0,
        limit: int | None = None,
        *,
        blobs: BlobMode = "hydrate",
        view: View = "visible",
    ) -> list[StoredMessage] | list[Entry]:
        """The rows of ``view`` whose seq is above ``after``, in view order, at most
        ``limit``: a cursor whose cost does not grow with the history's length."""
        if view == "physical":
            return await self._run(self._core.physical_read_plan(after, limit, blobs))
        return await self._run(self._core.read_plan(after, limit, blobs, view))

    @overload
    async def last(
        self, *, blobs: BlobMode = ..., view: MessageView = ...
    ) -> StoredMessage | None: ...
    @overload
    async def last(
        self, n: int, *, blobs: BlobMode = ..., view: MessageView = ...
    ) -> list[StoredMessage]: ...
    @overload
    async def last(
        self, n: int, *, blobs: BlobMode = ..., view: Literal["physical"]
    ) -> list[Entry]: ...
    async def last(
        self, n: int | None = None, *, blobs: BlobMode = "hydrate", view: View = "visible"
    ) -> StoredMessage | list[StoredMessage] | list[Entry] | None:
        """The newest row of ``view`` (``None`` when it is empty), or its last ``n`` in
        view order (:class:`~redis_msglog.InvalidArgumentError` for a negative ``n``).
        Costs what it returns, not the history's length."""
        if view == "physical":
            if n is None:
                raise InvalidArgumentError('last(view="physical") needs n')
            return await self._run(self._core.physical_last_plan(n, blobs))
        rows = await self._run(self._core.last_plan(1 if n is None else n, blobs, view))
        if n is None:
            return rows[0] if rows else None
        return rows

    async def count(self, view: View | None = None) -> int:
        """Total entries ever appended: the last seq (one round trip of ``XLEN``,
        ``GET``, ``XLEN``, checked against each other). With ``view``: the number of rows
        of that view (``"physical"``: the last seq)."""
        return await self._run(self._core.count_plan(view))

    async def last_turns(self, n: int, *, view: MessageView = "visible") -> list[StoredMessage]:
        """The last ``n`` user turns of ``view``: each user message with everything after
        it, so a tool call is never split from its result."""
        require_non_negative("n", n)
        return await self._run(self._core.window_plan(view, turns=n))

    async def last_tokens(
        self,
        budget: int,
        count_tokens: Callable[[StoredMessage], int],
        *,
        view: MessageView = "visible",
    ) -> list[StoredMessage]:
        """The longest suffix of ``view`` whose messages' ``count_tokens`` fit in
        ``budget``, moved forward past any tool result whose call it would cut off."""
        require_non_negative("budget", budget)
        require_callable("count_tokens", count_tokens)
        return await self._run(self._core.window_plan(view, budget=budget, counter=count_tokens))

    # -- following commits from every worker -----------------------------------------

    def follow(
        self,
        after: int = 0,
        *,
        reconnect_within: float | None = 30.0,
        blobs: BlobMode = "hydrate",
    ) -> AsyncIterator[Entry]:
        """Every entry with seq > ``after``, in seq order, then each new one as any
        worker commits it, for as long as the caller iterates: messages, and edits as
        :class:`~redis_msglog.EditEntry` rows (fold them with :class:`~redis_msglog.LogView`
        to keep a live view; ``isinstance(row, StoredMessage)`` picks the messages).

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

    async def subscribe(
        self, callback: AsyncOnCommit, *, after: int | None = None
    ) -> AsyncSubscription:
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
        require_callable("callback", callback)
        if after is not None:
            require_seq("after", after)
        start = await self.count() if after is None else after
        wait_ms = min(AsyncSubscription.WAIT_MS, self._block_ms())
        cursor = FollowCursor(self._core, start, block_ms=wait_ms, reconnect_within=None)
        return AsyncSubscription(self, callback, cursor)

    async def _rows(self, cursor: FollowCursor) -> AsyncIterator[Entry]:
        async for page in self._pages(cursor):
            for row in page:
                yield row

    async def _pages(
        self, cursor: FollowCursor, stopped: Callable[[], bool] = lambda: False
    ) -> AsyncIterator[list[Entry]]:
        """Non-empty pages of new rows, in order, until ``stopped()``: each page a plan,
        carried like any other read."""
        while not stopped():
            if rows := await self._run(cursor.page_plan()):
                yield rows

    def _block_ms(self) -> int:
        return follow_block_ms(socket_timeout(self._redis))

    # -- provider formats (see redis_msglog.adapters for the rules) ------------------

    async def to_openai(self) -> list[dict[str, Any]]:
        """The full history as OpenAI Chat Completions messages."""
        return adapters.to_openai(await self.all())

    async def to_anthropic(self) -> list[dict[str, Any]]:
        """The full history as Anthropic Messages turns (the system prompt left out:
        :meth:`anthropic_system` is the request's top-level ``system`` parameter)."""
        return adapters.to_anthropic(await self.all())

    async def to_langchain(self) -> list[dict[str, Any]]:
        """The full history as LangChain ``{"role", "content"}`` messages (user,
        assistant and system only)."""
        return adapters.to_langchain(await self.all())

    async def to_responses(self) -> list[dict[str, Any]]:
        """The full history as OpenAI Responses API input items (reasoning items only
        where OpenAI produced them)."""
        return adapters.to_responses(await self.all())

    async def to_langchain_messages(self) -> list[BaseMessage]:
        """The full history as LangChain ``BaseMessage`` objects, one per message, nothing
        left out (tool calls and results, ids, content blocks). Needs langchain-core."""
        return adapters.to_langchain_messages(await self.all())

    async def anthropic_system(self) -> str | list[dict[str, Any]] | None:
        """The ``system`` parameter for :meth:`to_anthropic`'s turns: the history's system
        prompt as it was imported (a ``str``, or text blocks), ``None`` if there is none.

        Each of these methods reads the full history; to build a request from one read,
        call the pure functions on the rows: ``rows = log.all()``, then
        ``adapters.to_anthropic(rows)`` and ``adapters.anthropic_system(rows)``."""
        return adapters.anthropic_system(await self.all())

    # -- importing provider formats: one atomic append_many each ----------------------

    async def append_openai(
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
        return await self.append_many(
            adapters.from_openai(messages), idempotency_key=idempotency_key
        )

    async def append_responses(
        self, items: Sequence[Any], *, idempotency_key: str | None = None
    ) -> int:
        """Append OpenAI Responses API items (input items, or a response's ``output``
        items), converted by :func:`~redis_msglog.from_responses`, with one
        :meth:`append_many`; return the last seq. As :meth:`append_openai` otherwise;
        ``to_responses()`` gives the same items back."""
        return await self.append_many(
            adapters.from_responses(items), idempotency_key=idempotency_key
        )

    async def append_anthropic(
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
        return await self.append_many(
            adapters.from_anthropic(turns, system=system), idempotency_key=idempotency_key
        )

    async def append_langchain(
        self, messages: Sequence[Any], *, idempotency_key: str | None = None
    ) -> int:
        """Append LangChain ``BaseMessage`` objects, converted by
        :func:`~redis_msglog.from_langchain` (needs langchain-core), with one
        :meth:`append_many`; return the last seq. As :meth:`append_openai` otherwise;
        ``to_langchain_messages()`` gives equal messages back."""
        return await self.append_many(
            adapters.from_langchain(messages), idempotency_key=idempotency_key
        )

    # -- carrying plan steps to the server -------------------------------------------

    async def _run(self, plan: Plan[T], started: float | None = None) -> T:
        """Carry the plan's steps to the server; a failed step goes back into the plan as
        the core's outcome (never as redis-py's exception). Each step's connect (or wait
        for a busy pool) gets what is left of the deadline of the call, begun at
        ``started`` (default: now)."""
        started = self._core.clock() if started is None else started
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
                    within = self._within(started)
                    reply = await io.honouring_cancel(self._read(step.commands, within))
                elif isinstance(step, Pause):
                    await io.sleep(step.seconds)
                else:
                    reply = await io.honouring_cancel(self._write_once(step, self._within(started)))
            except (*CLIENT_FAILURES, ReplyLost) as exc:
                failure = step_failure(exc)

    async def _send_quick(self, prepared: PreparedAppend) -> Commit:
        """An append (see ``LogCore.prepare``): its preflight when still needed, then its
        first try sent from here, and only a failure handed to a plan (the deadline
        counts the preflight)."""
        started = self._core.clock()
        try:
            if prepared.preflight is not None:
                await self._run(prepared.preflight, started)
            write = self._write_once(prepared.first_try, self._within(started))
            reply = await io.honouring_cancel(write)
        except (*CLIENT_FAILURES, ReplyLost) as exc:
            plan = self._core.retry_plan(prepared, step_failure(exc), started)
            return await self._run(plan, started)
        except BaseException:
            prepared.settle()  # refused, cancelled or interrupted: as a plan's end would
            raise
        return self._core.commit_of(prepared, reply)

    async def _read(self, commands: tuple[Command, ...], within: float) -> list[Any]:
        # Raw replies (redis-py's response callbacks would reshape every stream entry).
        # No redis-py retry: re-sends are the core's, under the log's RetryPolicy.
        replies: dict[int, Any] = {}
        await self._router.run(
            lambda conn, asking: _round_trip(conn, commands, replies, asking), within
        )
        return [replies[i] for i in range(len(commands))]

    async def _write_once(self, step: Write, within: float) -> Any:
        # Never through redis-py's retry policy: a blind re-send of an append writes twice.
        return await self._router.run(
            lambda conn, asking: _send_once(conn, step.command, step.then, asking), within
        )


async def _send_once(conn: Any, command: Command, then: Command | None, asking: bool) -> Any:
    """Send ``command`` (and ``then`` behind it) once; a failure after sending is
    :class:`ReplyLost`: the server may have run it."""
    commands = asking_before_each((command,), asking) + ([then] if then else [])
    try:
        # A cancel honoured mid-exchange leaves replies unread: the router discards conn.
        await io.send(conn, pack(conn, commands))
        if len(commands) == 1:  # most writes: one reply (an error reply raises)
            return await io.honouring_cancel(conn.read_response())
        replies: list[Any] = []
        for _ in commands:
            try:
                replies.append(await io.honouring_cancel(conn.read_response()))
            except redis_errors.ResponseError as exc:
                # A refused WAIT/WAITAOF is a durability shortfall, not a failure.
                replies.append(exc)
        first, *durability = without_asking(replies, asking)
        if isinstance(first, redis_errors.ResponseError):
            raise first
        return (first, durability[0]) if then else first
    except (redis_errors.ResponseError, *REFUSALS):
        raise  # the server answered, refusing it: nothing ran
    except (redis_errors.ConnectionError, redis_errors.TimeoutError, OSError) as exc:
        await conn.disconnect()
        raise ReplyLost(str(exc) or type(exc).__name__, exc) from exc


async def _round_trip(
    conn: Any, commands: tuple[Command, ...], replies: dict[int, Any], asking: bool
) -> None:
    """Send the commands not yet in ``replies`` in one write and read every reply into
    ``replies`` (by index); then raise the first error reply.

    A reply kept from an earlier try is not asked for again after a redirection: during
    a slot migration it came from the node that still held its key, and the importing
    node, which has not received that key yet, would answer as if it did not exist."""
    todo = [i for i in range(len(commands)) if i not in replies]
    packed = asking_before_each([commands[i] for i in todo], asking)
    await io.send(conn, pack(conn, packed))
    raw: list[Any] = []
    for _ in packed:
        try:
            raw.append(await io.honouring_cancel(conn.read_response()))
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
