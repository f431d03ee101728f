"""AsyncMessageLog's edits: retract, pop, compact, replace, clear, archive, trim, redact
and the conversation's attributes, each one entry of the log (docs/edits.md); and its
erasure (docs/lifecycle.md)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import timedelta
from typing import Any

from .._core.lifecycle.erase import DEFAULT_ERASED_FOR, Erasure
from .._core.lifecycle.scope import Scoped
from .._core.read.views import Edit, redact_edit, retract_edit, through_edit, trim_edit
from .._core.write.blobs import BlobMode, check_blob_mode
from ..edits import Attributes
from ..errors import InvalidArgumentError, InvalidMessageError
from ..models import AgentMessage, StoredMessage
from ..telemetry import traced
from ._api import AsyncLogAPI


class AsyncLogEdits(AsyncLogAPI):
    """The edits of :class:`AsyncMessageLog` (its ``fork`` is with its construction)."""

    # -- edits: entries of the log, never rewrites (docs/edits.md) ------------------
    #
    # Each is one atomic call of the append script, like an append: idempotency_key,
    # expected_seq, retries after a lost reply, durability and ttl work the same way. A
    # bad argument, or a seq the view does not hold, raises InvalidEditError and writes
    # nothing.

    @traced("retract", returns_seq=True)
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

    @traced("pop")
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

    @traced("compact", returns_seq=True)
    async def compact(
        self,
        messages: Iterable[AgentMessage | Mapping[str, Any]],
        *,
        through_seq: int,
        idempotency_key: str | None = None,
        expected_seq: int | None = None,
        attrs: Mapping[str, str | None] | None = None,
        new_from: int | None = None,
    ) -> int:
        """Replace the rows of the view up to and including ``through_seq`` (by position
        in the view; 0: none) with ``messages`` (a summary, say), which are appended
        as new entries and shown first; the rows after ``through_seq`` follow them.
        Nothing is deleted: the compacted rows stay in the physical log. Returns the last
        seq written.

        The messages' usage is not added to the totals (they may be copies of rows,
        counted when first written), except from index ``new_from`` on: pass
        ``new_from=0`` for a summary a model just wrote (docs/usage.md)."""
        batch = self._core.batch(
            messages,
            through_edit("compact", through_seq, zero_ok=True),
            attrs,
            new_from=new_from,
        )
        return await self._commit(batch, idempotency_key, expected_seq)

    @traced("replace", returns_seq=True)
    async def replace(
        self,
        messages: Iterable[AgentMessage | Mapping[str, Any]],
        *,
        idempotency_key: str | None = None,
        expected_seq: int | None = None,
        attrs: Mapping[str, str | None] | None = None,
        new_from: int | None = None,
    ) -> int:
        """Make ``messages`` the whole view, atomically (a compaction of everything);
        return the last seq written. As with :meth:`compact`, only the usage of the
        messages from index ``new_from`` on (``None``: none of them, all copies) is added
        to the totals."""
        batch = self._core.batch(messages, Edit("compact", "end"), attrs, new_from=new_from)
        return await self._commit(batch, idempotency_key, expected_seq)

    @traced("clear", returns_seq=True)
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

    @traced("archive", returns_seq=True)
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

    @traced("trim", returns_seq=True)
    async def trim(
        self,
        through_seq: int,
        *,
        idempotency_key: str | None = None,
        expected_seq: int | None = None,
        attrs: Mapping[str, str | None] | None = None,
    ) -> int:
        """Remove every entry up to and including seq ``through_seq`` from Redis, and the
        blobs only they referred to, in one atomic call that also writes one ``trim``
        edit entry (its seq is returned). Unlike the other edits this deletes data: the
        log then starts after ``through_seq`` for every read, view, cursor and ``msglog
        verify``; ``count()`` is still the last seq (docs/lifecycle.md). ``through_seq``
        must be a message of the log not trimmed yet, at most 10,000 entries past the
        log's first: a seq beyond the end, an edit entry, an already trimmed seq (a trim
        backwards) raises :class:`~redis_msglog.InvalidEditError`, and nothing is
        written."""
        batch = self._core.batch((), trim_edit(through_seq), attrs)
        return await self._commit(batch, idempotency_key, expected_seq)

    @traced("redact", returns_seq=True)
    async def redact(
        self,
        seq: int,
        replacement: AgentMessage | Mapping[str, Any] | None = None,
        *,
        reason: str | None = None,
        idempotency_key: str | None = None,
        expected_seq: int | None = None,
        attrs: Mapping[str, str | None] | None = None,
    ) -> int:
        """Remove the message at ``seq`` from Redis and put ``replacement`` (a message,
        checked like an append's and passed through ``before_append``; its binaries stay
        inline) or a marker (the role kept, content ``"[redacted]"``) in its place, in
        one atomic call that also writes one ``redact`` edit entry (its seq is returned;
        it records the seq and ``reason``, never the content). Every read then returns
        the row at ``seq`` with ``redacted=True``; the blobs only the original used are
        removed (docs/lifecycle.md). A seq that is not a message of the log (beyond the
        end, an edit entry, trimmed) or is already redacted raises
        :class:`~redis_msglog.InvalidEditError`, and nothing is written."""
        row = b""
        if replacement is not None:
            encoded = self._core.batch((replacement,))
            if encoded.blobs or encoded.blob_refs:
                raise InvalidMessageError(
                    "redact: a replacement is stored inline (beside the log, not in its "
                    "blobs): a binary over the blob threshold, or a blob reference, is "
                    "refused; nothing was written",
                    index=0,
                )
            row = encoded.encoded[0]
        batch = self._core.batch((), redact_edit(seq, row, reason), attrs)
        drafts = self._core.drafts
        source = await self._run(drafts.source_plan(seq))  # seq checked by redact_edit
        committed = await self._commit(batch, idempotency_key, expected_seq)
        if source is not None:  # its deltas, kept for late followers, go with it
            await self._run(drafts.forget_plan(source))
        return committed

    @traced("set_attrs", returns_seq=True)
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
        if attrs is None:  # (batch() reads None as "no change": this call needs one)
            raise InvalidArgumentError("attrs must be a non-empty mapping, got None")
        batch = self._core.batch((), attrs=attrs)
        return await self._commit(batch, idempotency_key, expected_seq)

    @traced("attrs")
    async def attrs(self) -> Attributes:
        """The conversation's attributes and its last seq, read in one round trip."""
        return await self._run(self._core.attrs_plan())

    # -- erasure: the one deletion of the log (docs/lifecycle.md) ----------------------

    @traced("erase")
    async def erase(
        self, *, erased_for: timedelta = DEFAULT_ERASED_FOR, scan_records: bool = False
    ) -> None:
        """Erase this conversation: every key it has (its stream, counter, view keys,
        blobs, producers, owner record, attributes and idempotency records) is deleted in
        one atomic call, and a tombstone left in their place for ``erased_for`` (a
        timedelta of at least 1 s; default 24 h). While it stands, every append, edit or
        fork into the conversation, from any worker, raises
        :class:`~redis_msglog.ConversationErasedError` and writes nothing; reads return an
        empty log; a ``follow`` yields nothing new. Afterwards the id is free again.

        An append racing the erasure either committed before it (and is erased with the
        rest) or raises :class:`~redis_msglog.ConversationErasedError`: the log is never
        left half-erased. Idempotent: erasing an erased or never-created conversation
        sets the tombstone again (for the new ``erased_for``); after a failure or crash,
        call it again. What it reaches (replicas, AOF, backups): docs/lifecycle.md.

        A conversation of a scope leaves its scope's listings too: its index entries are
        removed right after (a crash in between leaves them pointing at the tombstone,
        which listings leave out; ``Directory.erase`` of the scope removes them).

        No ``SCAN``: the idempotency records are named by the conversation's ``records``
        set. ``scan_records=True`` also looks for records written by versions before it
        existed (a ``SCAN`` of the conversation's node, twice: docs/lifecycle.md)."""
        await self._erase_and_unindex(erased_for, scan_records=scan_records)

    async def _erase_and_unindex(
        self, erased_for: timedelta, *, scan_records: bool = False
    ) -> Erasure:
        """:meth:`erase`, with what it did (``msglog erase`` reports it)."""
        erasure = await self._erase(erased_for, scan_records=scan_records)
        scoped = Scoped(self._options.prefix, self._core.retry, self._core.clock)
        await self._run(scoped.unindex_owner_plan(self.conversation, erasure.owner))
        return erasure

    async def _erase(
        self,
        erased_for: timedelta,
        scope: tuple[str, ...] | None = None,
        *,
        scan_records: bool = False,
    ) -> Erasure:
        """:meth:`erase`, with what it did: the keys deleted and the owner record's fields
        (the conversation's scope), for ``Directory.erase`` to remove its index entries.
        With ``scope`` (an erasure of that scope): only if the owner record puts the
        conversation in it (``Erasure.outcome``)."""
        plan = self._core.erase_plan(erased_for, scope, scan_records=scan_records)
        return await self._run(plan)
