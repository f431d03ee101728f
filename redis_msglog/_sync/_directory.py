# Generated from _async/_directory.py by scripts/unasync.py: edit that file, then run it.
"""Directory: the conversations of a scope, listed from its index without ``SCAN``
(docs/lifecycle.md, "Listing a scope's conversations"); the plans are in
``_core/lifecycle/scope.py``.

The interface an erasure of a scope builds on: :meth:`Directory.walk` (every
conversation of a scope and its sub-scopes), :meth:`Directory.unindex` (one
conversation's index entries removed) and ``ScopeKeys.tombstone`` (the scope's tombstone
key, which refuses every registration in the scope while it stands).
"""

from __future__ import annotations

import builtins
import time
from collections.abc import Iterator, Sequence
from datetime import datetime, timedelta
from typing import Any, TypeVar

from redis import Redis
from redis.cluster import RedisCluster

from .._core.args import shown
from .._core.lifecycle.erase import DEFAULT_ERASED_FOR, check_erased_for
from .._core.lifecycle.scope import (
    MAX_LIST_LIMIT,
    ConversationPage,
    Scope,
    Scoped,
    ScopedConversation,
    ScopeErasure,
    ScopeKeys,
    SkippedEntry,
    check_scope,
    joined,
    micros_of,
    time_of,
)
from .._core.lifecycle.usage import scope_usage_plan
from .._core.retry import DEFAULT_RETRY, RetryPolicy
from .._core.steps import Command, Pause, Plan, Read, StepFailure
from .._io import io_sync as io
from .._io.failures import CLIENT_FAILURES, step_failure
from .._io.routing import is_cluster
from ..errors import InvalidArgumentError, MessageLogError, ScopeErasureIncompleteError
from ..models import Usage
from ..telemetry import note_retry, traced
from ._log import MessageLog

T = TypeVar("T")
_MS = timedelta(milliseconds=1)


class Directory:
    """The conversations of each scope (sync), listed from the index every scoped log
    keeps (``MessageLog(..., scope=...)``), never by ``SCAN``.

    Args:
        redis: a ``redis.Redis`` or ``redis.cluster.RedisCluster`` client
            (``decode_responses`` either way).
        prefix: the logs' prefix.
        retry: how long a call keeps trying while the server cannot serve it (every
            command a directory sends is idempotent).
    """

    def __init__(
        self,
        redis: Redis | RedisCluster,
        *,
        prefix: str = "msglog",
        retry: RetryPolicy = DEFAULT_RETRY,
    ) -> None:
        if not hasattr(redis, "pipeline") or (
            not hasattr(redis, "connection_pool") and not is_cluster(redis)
        ):
            raise InvalidArgumentError(
                f"{type(self).__name__} needs a redis-py client (Redis or RedisCluster), "
                f"got {type(redis).__name__}"
            )
        if not isinstance(retry, RetryPolicy):
            raise InvalidArgumentError(f"retry must be a RetryPolicy, got {type(retry).__name__}")
        self._redis = redis
        self._scoped = Scoped(prefix, retry, time.monotonic)
        self.prefix = prefix

    @traced("list_scope")
    def list(
        self, scope: Sequence[str], *, limit: int = 100, cursor: str | None = None
    ) -> ConversationPage:
        """A page of the conversations of ``scope`` and of its sub-scopes, newest-created
        first, at most ``limit`` (1 to 1000); pass the page's ``cursor`` for the next
        (``None``: the last page). Stable while conversations are created: a page starts
        exactly after the previous one's last member, so none is skipped or shown twice
        (one created meanwhile sorts before the first page and is not shown). Two round
        trips (the index, then each conversation's last seq and owner record; on a
        cluster the second is one per node holding them, sent together). A conversation
        being erased is left out, and so is an entry its conversation's owner record
        does not confirm (same scope, same created time): the index is tenant-writable,
        so such entries go to the page's ``skipped``, never listed. A bad ``scope``,
        ``limit`` or ``cursor`` raises :class:`~redis_msglog.InvalidArgumentError`."""
        checked = check_scope(scope)
        return self._run(self._scoped.list_plan(checked, limit, cursor))

    @traced("scope_usage")
    def usage(self, scope: Sequence[str]) -> Usage:
        """The usage totals of ``scope`` and its sub-scopes: the sum of their
        conversations' (:meth:`MessageLog.usage`, docs/usage.md), paged from the
        index, a thousand conversations every three round trips. A conversation counts
        only when its owner record confirms the index entry (the index is
        tenant-writable); one being erased is left out. Costs in two currencies raise
        :class:`~redis_msglog.UsageCurrencyError`; a bad ``scope``
        :class:`~redis_msglog.InvalidArgumentError`."""
        return self._run(scope_usage_plan(self._scoped, check_scope(scope)))

    def walk(self, scope: Sequence[str]) -> Iterator[ScopedConversation]:
        """Every conversation of ``scope`` and its sub-scopes, page after page (what an
        erasure of the scope goes through): unlike :meth:`list`, those whose counter
        already holds an erasure's tombstone too (``last_seq`` 0), so an erasure resumed
        after a crash finds and unindexes them. Entries :meth:`list` would skip are not
        yielded (``list`` pages report them)."""
        checked = check_scope(scope)
        cursor: str | None = None
        while True:
            plan = self._scoped.list_plan(checked, MAX_LIST_LIMIT, cursor, erased=True)
            page = self._run(plan)
            for listed in page.conversations:
                yield listed
            if page.cursor is None:
                return
            cursor = page.cursor

    @traced("erase_scope")
    def erase(
        self,
        scope: Sequence[str],
        *,
        erased_for: timedelta = DEFAULT_ERASED_FOR,
        scan_records: bool = False,
    ) -> ScopeErasure:
        """Erase every conversation of ``scope`` and of its sub-scopes (each as a log's
        ``erase()`` does, with ``erased_for`` and ``scan_records``), then its index;
        return the ids erased (a list; conversations found erased already included).

        First the scope's tombstone is set for ``erased_for``: from then on no log can
        register a conversation in the scope (it raises
        :class:`~redis_msglog.ScopeErasedError`), so a worker creating one meanwhile is
        either listed here (registered before) or refused. Idempotent and resumable:
        after a crash, run it again; it finds what is left (conversations already
        tombstoned included) and returns those ids.

        The index is tenant-writable input: a conversation is erased only if its owner
        record, checked inside the erasing script, names the scope or one below it. Any
        other entry is left as it is and listed in the result's ``skipped``
        (:class:`~redis_msglog.SkippedEntry`). A failure after the tombstone is set
        raises :class:`~redis_msglog.ScopeErasureIncompleteError`, saying what was
        erased."""
        checked = check_scope(scope)
        check_erased_for(erased_for)
        tombstone = ScopeKeys(self.prefix, checked).tombstone()
        self._run(self._scoped.tombstone_plan(checked, erased_for // _MS))
        done = ScopeErasure()
        try:
            self._erase_listed(checked, erased_for, scan_records, done)
        except MessageLogError as error:
            raise ScopeErasureIncompleteError(
                f"erasing scope {joined(checked)!r} failed part-way: {error} Its tombstone "
                f"{tombstone} was set (no new conversation in it for {erased_for}), "
                f"{len(done)} conversations were erased ({', '.join(done) or 'none'}), and "
                "the one being erased when it failed may have been; the rest is untouched. "
                "Run the erasure again to finish it.",
                tombstone=tombstone,
                erased=list(done),
                skipped=list(done.skipped),
            ) from error
        return done

    def _erase_listed(
        self, scope: Scope, erased_for: timedelta, scan_records: bool, done: ScopeErasure
    ) -> None:
        """Erase what the scope's index lists (the cursor is exclusive: removals are
        safe), adding each id erased, and each entry skipped, to ``done``."""
        cursor: str | None = None
        while True:
            plan = self._scoped.list_plan(scope, MAX_LIST_LIMIT, cursor, erased=True)
            page = self._run(plan)
            done.skipped.extend(page.skipped)
            for listed in page.conversations:
                log = MessageLog(
                    self._redis, listed.conversation, prefix=self.prefix, retry=self._scoped.retry
                )
                erasure = log._erase(erased_for, scope, scan_records=scan_records)
                if erasure.outcome == "outside":  # the owner record says: not this scope's
                    recorded = erasure.owner.get("scope")
                    owner = None if recorded is None else tuple(recorded.split("/"))
                    done.skipped.append(SkippedEntry(listed.conversation, listed.scope, owner))
                    continue
                self.unindex(listed.conversation, listed.scope, listed.created_at)
                done.append(listed.conversation)
            if page.cursor is None:
                return
            cursor = page.cursor

    @traced("register")
    def register(self, conversation: str, scope: Sequence[str]) -> datetime:
        """Register ``conversation`` in ``scope`` exactly as a log given that scope does
        before its first write (idempotent): the repair for a conversation ``verify``
        reports missing from its indexes (a crash between the registration's two
        steps). Returns its created time. :class:`~redis_msglog.ScopeMismatchError` if it
        belongs to another scope, or has entries and no scope."""
        checked = check_scope(scope)
        created = self._run(self._scoped.register_plan(conversation, checked))
        return time_of(created)

    @traced("owner")
    def owner(self, conversation: str) -> tuple[Scope, datetime] | None:
        """The scope ``conversation`` was created with and its created time, or ``None``
        (created without a scope, or never created)."""
        found = self._run(self._scoped.owner_plan(conversation))
        return None if found is None else (found[0], time_of(found[1]))

    @traced("unindex")
    def unindex(self, conversation: str, scope: Sequence[str], created_at: datetime) -> int:
        """Remove ``conversation``'s entries from the indexes of ``scope`` and of its
        prefixes (one atomic, idempotent call; ``created_at`` as listed or as
        :meth:`owner` returns it); return how many indexes held it. For an erasure: its
        owner record and data are the conversation's own keys."""
        checked = check_scope(scope)
        if not isinstance(created_at, datetime) or created_at.utcoffset() is None:
            raise InvalidArgumentError(
                f"created_at must be an aware datetime (as listed), got {shown(created_at)}"
            )
        plan = self._scoped.unindex_plan(conversation, checked, micros_of(created_at))
        return self._run(plan)

    def _run(self, plan: Plan[T]) -> T:
        """Carry the plan's steps: each read as one pipeline (on a cluster, redis-py sends
        each command to its key's node); failures go back into the plan as the core's
        outcomes."""
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
                if isinstance(step, Pause):
                    note_retry()  # a wait before trying again: the operation's span counts it
                    io.sleep(step.seconds)
                elif isinstance(step, Read):
                    reply = self._pipeline(step.commands)
                else:  # pragma: no cover - a directory's plans only read
                    raise AssertionError(f"unexpected step {step!r}")
            except CLIENT_FAILURES as exc:
                failure = step_failure(exc)

    def _pipeline(self, commands: tuple[Command, ...]) -> builtins.list[Any]:
        pipe = self._redis.pipeline(transaction=False)
        for command in commands:
            pipe.execute_command(*command)
        replies = pipe.execute(raise_on_error=False)
        for reply in replies:
            if isinstance(reply, Exception):
                raise reply
        return list(replies)
