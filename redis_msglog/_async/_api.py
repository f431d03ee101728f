"""AsyncMessageLog's core API: appends, reads, counts and following the log.

The edits, the format conveniences and the construction are in the other files of this
folder; everything here is carried to the server by :class:`AsyncLogCarrier`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from typing import Any, Literal, overload

from .._core.args import shown
from .._core.drafts.cursor import DraftTracker, Resume, parse_resume
from .._core.facade import require_callable, require_non_negative, require_seq
from .._core.read.cache import read_cache
from .._core.read.follow import FollowCursor, follow_block_ms
from .._core.write.blobs import BlobMode
from .._io.routing import socket_timeout
from .._io.subscription import AsyncOnCommit, AsyncOnItems, AsyncSubscription
from ..edits import Entry, MessageView, View
from ..errors import InvalidArgumentError
from ..models import AgentMessage, Role, StoredMessage, Usage
from ..telemetry import measuring, record_follow_lag, traced
from ._carrier import AsyncLogCarrier
from ._follow_drafts import AsyncDraftFollow


class AsyncLogAPI(AsyncLogCarrier):
    """Appending, reading and following: what most callers of :class:`AsyncMessageLog` use."""

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

    @traced("append", returns_seq=True)
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
        # Not through _commit: a coroutine layer less on every append's path.
        return (await self._commit_batch(batch, idempotency_key, expected_seq)).last_seq

    @traced("append_many", returns_seq=True)
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

    # -- reading -------------------------------------------------------------------

    @overload
    async def all(
        self, *, blobs: BlobMode = ..., view: MessageView = ...
    ) -> list[StoredMessage]: ...
    @overload
    async def all(self, *, blobs: BlobMode = ..., view: Literal["physical"]) -> list[Entry]: ...
    @traced("all")
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
    @traced("read")
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
    @traced("last")
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

    @traced("count")
    async def count(self, view: View | None = None) -> int:
        """Total entries ever appended: the last seq (one round trip of ``XLEN``,
        ``GET``, ``XLEN``, checked against each other). With ``view``: the number of rows
        of that view (``"physical"``: the last seq)."""
        return await self._run(self._core.count_plan(view))

    @traced("usage")
    async def usage(self) -> Usage:
        """The conversation's usage totals: the sum of the ``usage`` of every message
        appended (docs/usage.md), kept by the appends themselves, so exact under retries
        and read in one round trip. Edits, redactions and trims leave them as they were;
        an erasure removes them. All zero (``cost`` ``None``) when none was recorded."""
        return await self._run(self._core.usage_plan())

    @traced("last_turns")
    async def last_turns(self, n: int, *, view: MessageView = "visible") -> list[StoredMessage]:
        """The last ``n`` user turns of ``view``: each user message with everything after
        it, so a tool call is never split from its result."""
        require_non_negative("n", n)
        return await self._run(self._core.window_plan(view, turns=n))

    @traced("last_tokens")
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

    @overload
    def follow(
        self,
        after: int = ...,
        *,
        reconnect_within: float | None = ...,
        blobs: BlobMode = ...,
        drafts: Literal[False] = ...,
    ) -> AsyncIterator[Entry]: ...
    @overload
    def follow(
        self,
        after: int | str = ...,
        *,
        reconnect_within: float | None = ...,
        blobs: BlobMode = ...,
        drafts: Literal[True],
    ) -> AsyncDraftFollow: ...
    def follow(
        self,
        after: int | str = 0,
        *,
        reconnect_within: float | None = 30.0,
        blobs: BlobMode = "hydrate",
        drafts: bool = False,
    ) -> AsyncIterator[Entry] | AsyncDraftFollow:
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

        ``drafts=True``: the drafts' events too (:class:`~redis_msglog.DraftStarted`,
        :class:`~redis_msglog.DraftDelta`, :class:`~redis_msglog.DraftEnded`), in order
        with the entries, from the drafts in progress at the start (docs/drafts.md). The
        iterator's ``resume`` is the position after the last item, to pass back as
        ``after``: a resumed follow never loses or repeats a delta. It ends the drafts
        whose writer's lease lapsed as it meets them.
        """
        if not drafts and not isinstance(after, int):
            raise InvalidArgumentError(
                f"after must be a seq (an int), got {shown(after)}; a resume id (a str) "
                "needs follow(drafts=True)"
            )
        resume = parse_resume(after)
        cursor = FollowCursor(
            self._core,
            resume.seq,
            block_ms=self._block_ms(),
            reconnect_within=reconnect_within,
            blobs=blobs,
        )  # built now, so bad arguments raise here and not at the first row
        if drafts:
            return AsyncDraftFollow(self, cursor, DraftTracker(self._core.drafts, resume))
        return self._rows(cursor)

    @overload
    async def subscribe(
        self,
        callback: AsyncOnCommit,
        *,
        after: int | None = ...,
        drafts: Literal[False] = ...,
    ) -> AsyncSubscription: ...
    @overload
    async def subscribe(
        self,
        callback: AsyncOnItems,
        *,
        after: int | str | None = ...,
        drafts: Literal[True],
    ) -> AsyncSubscription: ...
    async def subscribe(
        self,
        callback: AsyncOnCommit | AsyncOnItems,
        *,
        after: int | str | None = None,
        drafts: bool = False,
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

        ``drafts=True``: the batches hold the drafts' events too, in order with the
        entries, as ``follow(drafts=True)`` yields them (docs/drafts.md), from the drafts
        in progress at the start; ``resume`` is the resume id after the last batch
        handled, to pass back as ``after`` (a str) so no delta is lost or repeated.
        """
        require_callable("callback", callback)
        if not drafts and after is not None and not isinstance(after, int):
            raise InvalidArgumentError(
                f"after must be a seq (an int), got {shown(after)}; a resume id (a str) "
                "needs subscribe(drafts=True)"
            )
        resume = parse_resume(await self.count() if after is None else after)
        if isinstance(after, int):
            require_seq("after", after)
        return _subscription(self, callback, resume, drafts)

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
            if rows := await self._follow_page(cursor):
                yield rows

    @traced("follow")
    async def _follow_page(self, cursor: FollowCursor) -> list[Entry]:
        """One page of a follower (a blocking read): one span each, and its lag."""
        cursor.count_behind = measuring()
        rows = await self._run(cursor.page_plan())
        record_follow_lag(rows, cursor.behind)
        return rows

    def _block_ms(self) -> int:
        return follow_block_ms(socket_timeout(self._redis))


def _subscription(
    log: AsyncLogAPI, callback: Any, resume: Resume, drafts: bool
) -> AsyncSubscription:
    """A subscription from ``resume``: of the log's entries, or with ``drafts`` of its
    entries and drafts' events (a ``follow(drafts=True)`` read a page at a time)."""
    wait_ms = min(AsyncSubscription.WAIT_MS, log._block_ms())
    cursor = FollowCursor(log._core, resume.seq, block_ms=wait_ms, reconnect_within=None)
    name = log.conversation
    if drafts:
        follow = AsyncDraftFollow(log, cursor, DraftTracker(log._core.drafts, resume))
        where = lambda: follow.resume  # noqa: E731
        return AsyncSubscription(
            follow._pages, callback, position=resume.seq, name=name, resume=where
        )
    pages = lambda stopped: log._pages(cursor, stopped)  # noqa: E731
    return AsyncSubscription(pages, callback, position=resume.seq, name=name)
