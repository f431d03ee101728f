# Generated from _async/_log.py by scripts/unasync.py: edit that file, then run it.
"""MessageLog, the client (sync): its docstring, its construction and ``fork``,
composed of the core API, the edits and the format conveniences of this folder."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta

from redis import Redis
from redis.cluster import RedisCluster

from .._core.facade import (
    DEFAULT_IDEMPOTENCY_WINDOW,
    DEFAULT_MAX_MESSAGE_BYTES,
    DEFAULT_PAGE_SIZE,
    require_seq,
)
from .._core.options import LogOptions
from .._core.read.views import AttrChanges, check_fork_point, fork_edit
from .._core.retry import DEFAULT_RETRY, RetryPolicy
from .._core.write.blobs import DEFAULT_BLOB_THRESHOLD
from .._core.write.bounds import (
    DEFAULT_MAX_BATCH_BYTES,
    DEFAULT_MAX_REWRITE_BYTES,
    DEFAULT_STREAM_NODE_ENTRIES,
)
from .._core.write.durability import Durability
from .._core.write.encode import BeforeAppend
from .._io.routing import Router
from .._io.subscription import OnAppend
from ..edits import LogView
from ..errors import InvalidArgumentError, InvalidEditError
from ..telemetry import traced
from ._drafts import LogDrafts
from ._edits import LogEdits
from ._formats import LogFormats


class MessageLog(LogEdits, LogFormats, LogDrafts):
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
        scope: who the conversation belongs to, a tuple of 1 to 8 parts, outermost first
            (``("acme", "user-42")``): recorded before this object's first write, and the
            conversation listed by :class:`~redis_msglog.AsyncDirectory` under the scope
            and each prefix of it. A conversation keeps the scope it was created with:
            another (or one created without a scope) raises
            :class:`~redis_msglog.ScopeMismatchError`, writing nothing. Costs one round
            trip to each of two slots before the first write of each log object; appends
            after it are one round trip as without. See docs/lifecycle.md.
        before_append: ``fn(messages) -> messages``, run before every write of messages
            (appends, compactions, replacements, imports, the integrations), after their
            validation, with the list of validated messages; it returns as many messages
            (or mappings), which are validated and written instead (PII scrubbing), or
            raises to refuse the write: its exception propagates unchanged and nothing is
            written. Not run for a fork's copied rows, edits without messages, or
            ``validate()``. See docs/lifecycle.md, "Filtering writes".
        max_age: retention by age: a plain append also trims (``trim()``) the entries
            committed more than ``max_age`` ago from the head of the log, at most 100 a
            call, in the same atomic call (docs/lifecycle.md). ``None``: none.
        max_batch_bytes: the most bytes one call may send: its encoded messages and
            binaries together (default 16 MiB); more raises
            :class:`~redis_msglog.BatchTooLargeError` before anything is sent.
        max_rewrite_bytes: the most bytes of the stream one ``trim()`` or ``redact()`` may
            rewrite to remove the bytes it deletes (default 8 MiB); more raises
            :class:`~redis_msglog.RewriteTooLargeError`, nothing written (a trim by
            ``max_age`` over it trims without the rewrite). See docs/lifecycle.md, "Bounds".
        stream_node_entries: the server's ``stream-node-max-entries`` (default 100, the
            server's default): how far back from an entry a rewrite starts.

    Cancellation, asyncio only: an append cancelled while in flight has either committed or
    not (the script is atomic); its connection is discarded, never reused mid-reply.
    Calling again with the same ``idempotency_key`` is always safe. (Pass your own key if
    you may retry after a cancellation: a call made without one cannot be named again.)
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
        scope: tuple[str, ...] | None = None,
        before_append: BeforeAppend | None = None,
        max_age: timedelta | None = None,
        max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES,
        max_rewrite_bytes: int = DEFAULT_MAX_REWRITE_BYTES,
        stream_node_entries: int = DEFAULT_STREAM_NODE_ENTRIES,
    ) -> None:
        options = LogOptions(
            prefix=prefix,
            max_message_bytes=max_message_bytes,
            page_size=page_size,
            retry=retry,
            idempotency_window=idempotency_window,
            ttl=ttl,
            durability=durability,
            blob_threshold=blob_threshold,
            scope=scope,
            before_append=before_append,
            max_age=max_age,
            max_batch_bytes=max_batch_bytes,
            max_rewrite_bytes=max_rewrite_bytes,
            stream_node_entries=stream_node_entries,
        )
        self._setup_core(redis, conversation, on_append, options)
        self._redis = redis
        self._router = Router(redis, self._core.keys.stream)
        self._on_append = on_append

    # -- fork, an edit kept with the construction: it makes a log of this class ---------

    @traced("fork")
    def fork(
        self,
        new_conversation: str,
        *,
        at_seq: int | None = None,
        idempotency_key: str | None = None,
        attrs: Mapping[str, str | None] | None = None,
    ) -> MessageLog:
        """Start ``new_conversation`` as a copy of this log's view as it was at seq
        ``at_seq`` (default: now), and return its log (same client and options, no
        hook; a scoped source's scope, so the new conversation is registered in it
        before anything is written). Its first entry records the source and seq; this
        log is untouched. A target that already has entries raises
        :class:`~redis_msglog.SeqConflictError`, and an ``at_seq`` inside a compaction
        that keeps rows after its messages (from its entry to its last message, where
        that view never existed) :class:`~redis_msglog.InvalidEditError` naming the seqs
        on either side; nothing is written. Inside a ``replace`` (or a fork's copy) it
        copies the first of its messages, a prefix of the view, as at any other seq."""
        if new_conversation == self.conversation:
            raise InvalidArgumentError("fork: the new conversation must differ from this one")
        target = MessageLog(self._redis, new_conversation, **self._options.keywords())
        if at_seq is not None:
            require_seq("at_seq", at_seq)
        entries = self._run(self._core.physical_read_plan(0, at_seq))
        # A trimmed log starts after seq 1 (docs/lifecycle.md): its view from its first.
        entries = [e for e in entries if at_seq is None or e.seq <= at_seq]
        if at_seq and (not entries or entries[-1].seq < at_seq):
            last = entries[-1].seq if entries else 0
            raise InvalidEditError(f"fork: at_seq {at_seq} is beyond the end ({last}) or trimmed")
        view = LogView(entries, start=entries[0].seq if entries else 1)
        if view.uncertain:
            raise InvalidEditError(
                "fork: an edit kept cut the view at a trimmed row, so its order is not in the "
                "log (docs/lifecycle.md): replace(log.all()) first to fork it"
            )
        if at_seq is not None:
            check_fork_point(view, entries, at_seq)
        changes = None if attrs is None else AttrChanges.of(attrs)
        edit = fork_edit(self.conversation, view.last_seq, len(view.rows), changes)
        # A copy: its rows went through a before_append when they were first written.
        batch = target._core.batch(view.rows, edit, attrs, filtered=False)
        target._commit(batch, idempotency_key, expected_seq=0)
        return target
