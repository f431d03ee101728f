"""The I/O-free core shared by the sync and asyncio clients: :class:`LogCore`, a small
facade over the modules that each own one part of a log (the shape of h11's connection
over its state, readers and writers).

Every operation is a *plan* (see :mod:`redis_msglog._core.steps`): a generator that yields the
Redis commands it needs, receives their replies (or the outcome of a failed step), and
returns the result. The shells only carry steps to the server, so paging, script loading,
validation, retries and error mapping are written once, in the core, and tested without a
server (``tests/no_server/test_plans.py``). Nothing in it reads a clock (it is injected), warns,
keeps process-wide state (but the process's producer) or touches a client library's
exceptions.

The parts: :mod:`.write.encode` (validating and encoding), :mod:`.write.append` (an append up to
its first try, and its commit), :mod:`.write.preflight` (the once-per-client and once-per-log
checks), :mod:`.write.tries` (what follows a failed first try), :mod:`.write.producer` (the
idempotent producer), :mod:`.._lua.run` (scripts and their fallbacks),
:mod:`.read.roundtrip` (round trips and consistency checks), :mod:`.read.plans` (the read plans),
:mod:`.read.views` (reads of a log with edits), :mod:`.read.cache` (the warm ``all()``) and
:mod:`.stored.entries` (the stored-entry layout).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from datetime import timedelta

from .._lua.run import ScriptRunner
from ..errors import InvalidArgumentError
from .args import check_int, check_type, shown
from .checks import check_view, require_callable, require_non_negative, require_seq
from .drafts.plans import DraftPlans
from .lifecycle.erase import Eraser, Erasure
from .lifecycle.scope import Scope, Scoped, check_scope, joined
from .read.cache import CachedReads
from .read.plans import Reads
from .read.roundtrip import Reader
from .retry import DEFAULT_RETRY, RetryPolicy
from .steps import Plan
from .stored.entries import EditsPresent, StoredEntries, parse_seq_counter
from .stored.keys import ConversationKeys
from .write.append import RETRY_KEY_PREFIX, Appends, Commit, PreparedAppend
from .write.blobs import DEFAULT_BLOB_THRESHOLD
from .write.bounds import DEFAULT_MAX_BATCH_BYTES, DEFAULT_REWRITE, Rewrite
from .write.durability import Durability
from .write.encode import Batch, BatchRules, BeforeAppend
from .write.producer import Producer, ProducerSlot
from .write.tries import ScopeGuard, Tries

__all__ = [
    "DEFAULT_IDEMPOTENCY_WINDOW",
    "DEFAULT_MAX_MESSAGE_BYTES",
    "DEFAULT_PAGE_SIZE",
    "MAX_PAGE_SIZE",
    "RETRY_KEY_PREFIX",
    "Batch",
    "Commit",
    "EditsPresent",
    "Erasure",
    "LogCore",
    "PreparedAppend",
    "check_view",
    "parse_seq_counter",
    "require_callable",
    "require_non_negative",
    "require_seq",
]

DEFAULT_MAX_MESSAGE_BYTES = 8 * 1024 * 1024
DEFAULT_PAGE_SIZE = 1000
DEFAULT_IDEMPOTENCY_WINDOW = timedelta(hours=24)
MAX_PAGE_SIZE = 1_000_000  # entries per round trip: more is one huge reply, not a page
Clock = Callable[[], float]
"""Seconds from a monotonic clock (the shells pass ``time.monotonic``)."""


class LogCore:
    """Everything a message log does, minus the I/O: the parts of one log, and their
    operations under the names the shells, the follower and the tools call.

    An append (see :mod:`.write.append`): :meth:`batch`, then :meth:`prepare` (the call, its
    first try and, when still needed, its preflight plan); the shell runs the preflight,
    sends ``prepared.first_try`` itself and hands the reply to :meth:`commit_of`, or the
    failure to :meth:`retry_plan`. Reads: the ``*_plan`` methods."""

    def __init__(
        self,
        conversation: str,
        *,
        prefix: str,
        max_message_bytes: int,
        page_size: int,
        retry: RetryPolicy = DEFAULT_RETRY,
        idempotency_window: timedelta = DEFAULT_IDEMPOTENCY_WINDOW,
        sharded_events: bool = False,
        ttl: timedelta | None = None,
        durability: Durability | None = None,
        blob_threshold: int | None = DEFAULT_BLOB_THRESHOLD,
        max_age: timedelta | None = None,
        max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES,
        rewrite: Rewrite = DEFAULT_REWRITE,
        clock: Clock,
        producer: Producer | None = None,
        scope: Scope | None = None,
        before_append: BeforeAppend | None = None,
    ) -> None:
        _check_options(
            max_message_bytes=max_message_bytes,
            page_size=page_size,
            retry=retry,
            idempotency_window=idempotency_window,
            ttl=ttl,
            max_age=max_age,
            durability=durability,
            blob_threshold=blob_threshold,
            before_append=before_append,
            bounds=(max_batch_bytes, rewrite),
        )
        self.conversation = conversation
        self.keys = ConversationKeys.build(prefix, conversation)
        self.scope = None if scope is None else check_scope(scope)
        register, guard = _scope_hooks(prefix, retry, clock, conversation, self.scope)
        self.page_size = page_size
        self.retry = retry
        self.clock = clock
        self._build(
            BatchRules(max_message_bytes, blob_threshold, before_append, max_batch_bytes),
            idempotency_window=idempotency_window,
            # Sharded pub/sub on a cluster: the event goes to the conversation's own shard.
            publish="SPUBLISH" if sharded_events else "PUBLISH",
            ttl=ttl,
            max_age=max_age,
            rewrite=rewrite,
            durability=durability,
            # The idempotent producer numbering this log's calls: the process's (None),
            # shared by every log object of it, so that their records do not grow with
            # the objects.
            producers=ProducerSlot(producer),
            register=register,
            guard=guard,
        )

    def _build(
        self,
        rules: BatchRules,
        *,
        idempotency_window: timedelta,
        publish: str,
        ttl: timedelta | None,
        max_age: timedelta | None,
        rewrite: Rewrite,
        durability: Durability | None,
        producers: ProducerSlot,
        register: Callable[[], Plan[object]] | None,
        guard: ScopeGuard | None,
    ) -> None:
        """The log's parts, and their operations bound here: a call through the facade
        costs no extra function layer."""
        entries = StoredEntries(self.keys.stream)
        runner = ScriptRunner()
        scope = "" if self.scope is None else joined(self.scope)
        self._reader = reader = Reader(
            self.keys, self.page_size, self.retry, self.clock, entries, runner
        )
        self._producers = producers
        appends = Appends(
            reader,
            retry=self.retry,
            idempotency_window=idempotency_window,
            ttl=ttl,
            max_age=max_age,
            rewrite=rewrite,
            durability=durability,
            producers=producers,
            publish=publish,
            register=register,
            scope=scope,
        )
        tries = Tries(
            self.keys,
            retry=self.retry,
            clock=self.clock,
            producers=producers,
            runner=runner,
            commit_of=appends.commit_of,
            guard=guard,
        )
        # Drafts: messages while they are written (docs/drafts.md).
        self.drafts = DraftPlans(reader, scope=scope, ttl=ttl, max_bytes=rules.max_message_bytes)
        # Writing.
        self.batch = rules.batch
        self.prepare = appends.prepare
        self.commit_of = appends.commit_of
        self.retry_plan = tries.retry_plan
        self.check_expected = appends.check_expected
        self.raise_if_not_durable = appends.raise_if_not_durable
        self.committed_rows = appends.committed_rows
        self.producer = producers.current
        self._bind_reads(Reads(reader), runner)
        # Names the tests reach for: a call prepared by hand, one try of it.
        self._prepare = appends.prepare
        self._eval = tries.eval_append

    def _bind_reads(self, reads: Reads, runner: ScriptRunner) -> None:
        """The read plans, and what the follower, the views and the tools read with."""
        reader, entries = reads.reader, reads.reader.entries
        self._reads = reads
        self.count_plan = reads.count_plan
        self.attrs_plan = reads.attrs_plan
        self.usage_plan = reads.usage_plan
        self.read_plan = reads.read_plan
        self.physical_read_plan = reads.physical_read_plan
        self.last_plan = reads.last_plan
        self.physical_last_plan = reads.physical_last_plan
        self.window_plan = reads.window_plan
        self.popped_plan = reads.popped_plan
        self.all_plan = CachedReads(reads).all_plan
        self.erase_plan = Eraser(reader).erase_plan  # docs/lifecycle.md
        self.read_raw = reader.read_raw
        self.read = reader.read
        self.error_for = reader.error_for
        self.twice = reader.twice
        self.filled = reader.filled
        self.entries_with_blobs = reader.entries_with_blobs
        self.run_script = runner.run_script
        # The stored-entry layout (the follower and the property tests decode with it).
        self.decode_entries = entries.decode_entries
        self.decode_entries_one_by_one = entries.decode_entries_one_by_one
        self.decode_physical = entries.decode_physical
        self._read = reader.read  # web/_logs.py reads a blob with it

    @property
    def edited(self) -> bool:
        """Whether the log was seen to have edits (view reads then go to the view script)."""
        return self._reader.edited

    @property
    def _own_producer(self) -> Producer | None:
        """The log's own producer (tests and benchmarks give one), if any."""
        return self._producers.own

    @_own_producer.setter
    def _own_producer(self, producer: Producer | None) -> None:
        self._producers.own = producer


def _check_options(
    *,
    max_message_bytes: int,
    page_size: int,
    retry: RetryPolicy,
    idempotency_window: timedelta,
    ttl: timedelta | None,
    max_age: timedelta | None,
    durability: Durability | None,
    blob_threshold: int | None,
    before_append: BeforeAppend | None,
    bounds: tuple[int, Rewrite],
) -> None:
    """A log's options, each checked before anything can be sent: InvalidArgumentError."""
    _require_positive("max_message_bytes", max_message_bytes)
    _require_positive("max_batch_bytes", bounds[0])
    _require_positive("max_rewrite_bytes", bounds[1].max_bytes)
    _require_positive("stream_node_entries", bounds[1].node_entries)
    if before_append is not None:
        require_callable("before_append", before_append)
    if blob_threshold is not None:
        _require_positive("blob_threshold", blob_threshold)
    if durability is not None:
        check_type("durability", durability, Durability, "a Durability or None")
    if ttl is not None and not _at_least(ttl, timedelta(seconds=1)):
        raise InvalidArgumentError(
            f"ttl must be None or a timedelta of at least 1 s, got {shown(ttl)}"
        )
    if max_age is not None and not _at_least(max_age, timedelta(seconds=1)):
        raise InvalidArgumentError(
            f"max_age must be None or a timedelta of at least 1 s, got {shown(max_age)}"
        )
    check_int("page_size", page_size, lowest=1, highest=MAX_PAGE_SIZE)
    check_type("retry", retry, RetryPolicy, "a RetryPolicy")
    if not _at_least(idempotency_window, timedelta(milliseconds=1)):
        raise InvalidArgumentError(
            "idempotency_window must be a timedelta of at least 1 ms, "
            f"got {shown(idempotency_window)}"
        )


def _at_least(value: object, least: timedelta) -> bool:
    return isinstance(value, timedelta) and value >= least


def _require_positive(name: str, value: int) -> None:
    check_int(name, value, lowest=1)


def _scope_hooks(
    prefix: str, retry: RetryPolicy, clock: Clock, conversation: str, scope: Scope | None
) -> tuple[Callable[[], Plan[object]] | None, ScopeGuard | None]:
    """A scoped log registers its conversation (once, in its first append's preflight), and
    its writes name the scope (the script checks the owner record): a refusal registers
    again, or says the scope was erased. ``(None, None)`` for a log without a scope."""
    if scope is None:
        return None, None
    scoped = Scoped(prefix, retry, clock)
    register = functools.partial(scoped.register_plan, conversation, scope)
    return register, ScopeGuard(register, functools.partial(scoped.erased_plan, scope))
