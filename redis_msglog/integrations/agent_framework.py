"""Microsoft Agent Framework on the message log (``pip install
'redis-msglog[agent-framework]'``).

:class:`MessageLogHistoryProvider` is a ``HistoryProvider`` (agent-framework-core 1.23):
``Agent(client, context_providers=[provider])`` loads a session's history from the log
before each run and saves the run's messages after it. How each call maps to the log
(docs/integrations.md):

- ``get_messages(session_id)``: ``all()``, or ``last(max_messages)``: ``max_messages``
  is a window over the history, nothing is deleted;
- ``save_messages(session_id, messages)``: one atomic ``append_many`` of the messages the
  log does not end with already (the framework's own overlap rule, ``filter_new_messages``,
  as its in-memory provider applies it: a run that re-saves the history it loaded, or a
  retried save, writes nothing twice), conditional on the seq read with that tail: a
  writer that appended in between makes it read again, never interleave or duplicate;
- ``clear(session_id)``: the log's ``clear()`` (an entry: the history stays readable with
  ``view="physical"``); ``erase(session_id)`` deletes it (docs/lifecycle.md).

Each ``source_id`` has conversations of its own (``"<source_id>:<session_id>"``, the
source id's ``%`` and ``:`` escaped as ``%25`` and ``%3A``, so no source id is a prefix of
another's conversations), so two providers on one session (a primary history and an
audit copy) never see, overwrite or clear each other's messages.

The framework's providers are asyncio only, and so is this one. This module imports
agent-framework-core; ``redis_msglog`` itself never does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any, ClassVar

import redis.asyncio
import redis.asyncio.cluster

from .._core.args import missing_extra

try:
    from agent_framework import HistoryProvider, Message
    from agent_framework._sessions import filter_new_messages
except ModuleNotFoundError as exc:  # the extra is not installed
    raise missing_extra("agent-framework", exc) from exc

from .._async import AsyncMessageLog
from .._core.args import check_type
from ..errors import IdempotencyConflictError, InvalidArgumentError, SeqConflictError
from ._agent_framework_messages import RUN_USAGE, batch_key, from_rows, to_row, with_run_usage
from ._agent_framework_tails import KEPT, Tail, Tails, read_tail
from ._clients import LoopClients, LoopLog, client_factory
from ._log_options import integration_options

__all__ = ["MessageLogHistoryProvider"]

AsyncClient = redis.asyncio.Redis | redis.asyncio.cluster.RedisCluster

_SAVE_TRIES = 32  # conditional appends lost to other writers before giving up


class MessageLogHistoryProvider(HistoryProvider):
    """An Agent Framework history provider whose sessions are log conversations.

    Args:
        source_id: the provider's id (the framework's attribution of loaded messages),
            also the first part of its conversation ids.
        redis: a ``redis.asyncio.Redis`` or ``RedisCluster`` client, or a function
            making one; usable from any event loop (docs/integrations.md).
        load_messages, store_inputs, store_context_messages, store_context_from,
        store_outputs: the framework's flags, as ``HistoryProvider`` defines them.
        max_messages: ``get_messages`` returns the newest ``max_messages`` messages
            (``None``: all). A positive int: ``0`` and negatives are refused with
            :class:`~redis_msglog.InvalidArgumentError` (to load nothing, pass
            ``load_messages=False``). Nothing is ever deleted by it.
        **log_options: options of :class:`~redis_msglog.AsyncMessageLog` (``prefix``,
            ``ttl`` (a timedelta or int seconds), ``durability``, ``retry``...).
    """

    DEFAULT_SOURCE_ID: ClassVar[str] = "msglog"
    DEFAULT_SESSION_ID: ClassVar[str] = "default"  # a run without a session id

    def __init__(
        self,
        source_id: str = DEFAULT_SOURCE_ID,
        *,
        redis: AsyncClient | Callable[[], AsyncClient],
        load_messages: bool = True,
        store_inputs: bool = True,
        store_context_messages: bool = False,
        store_context_from: set[str] | None = None,
        store_outputs: bool = True,
        max_messages: int | None = None,
        **log_options: Any,
    ) -> None:
        check_type("source_id", source_id, str, "a str")
        if not source_id:
            raise InvalidArgumentError("source_id must be a non-empty str")
        for name, flag in (
            ("load_messages", load_messages),
            ("store_inputs", store_inputs),
            ("store_context_messages", store_context_messages),
            ("store_outputs", store_outputs),
        ):
            check_type(name, flag, bool, "a bool")
        _check_sources(store_context_from)
        self.max_messages = _check_window(max_messages)
        log_options = integration_options(log_options)  # ttl: int seconds or a timedelta
        super().__init__(
            source_id,
            load_messages=load_messages,
            store_inputs=store_inputs,
            store_context_messages=store_context_messages,
            store_context_from=store_context_from,
            store_outputs=store_outputs,
        )
        self._clients = LoopClients(redis)
        self._options = log_options
        self._logs: dict[str, AsyncMessageLog] = {}
        self._tails = Tails()

    @classmethod
    def from_url(
        cls,
        source_id: str = DEFAULT_SOURCE_ID,
        *,
        url: str,
        cluster: bool = False,
        redis_kwargs: dict[str, Any] | None = None,
        **options: Any,
    ) -> MessageLogHistoryProvider:
        """A provider on clients of its own (one per event loop) made from ``url``
        (``cluster=True`` for a Redis Cluster node; ``redis_kwargs`` go to the clients'
        ``from_url``); ``options`` are the constructor's."""
        factory = client_factory(url, cluster=cluster, redis_kwargs=redis_kwargs)
        return cls(source_id, redis=factory, **options)

    async def aclose(self) -> None:
        """Close the clients the provider made for the running event loop (a client you
        passed is yours to close)."""
        await self._clients.aclose()

    def conversation(self, session_id: str | None) -> str:
        """The log conversation of a session for this provider:
        ``"<source_id>:<session_id>"``, the source id escaped (:func:`source_part`)."""
        return f"{source_part(self.source_id)}:{session_id or self.DEFAULT_SESSION_ID}"

    def log(self, session_id: str | None) -> AsyncMessageLog:
        """The log of a session (on the running event loop's client)."""
        conversation = self.conversation(session_id)
        log = self._logs.get(conversation)
        if log is None:
            if len(self._logs) >= 4096:  # a bounded cache of log objects
                self._logs.clear()
            log = self._logs[conversation] = LoopLog(self._clients, conversation, **self._options)
        return log

    # -- the HistoryProvider interface -------------------------------------------------

    async def get_messages(
        self, session_id: str | None, *, state: dict[str, Any] | None = None, **kwargs: Any
    ) -> list[Message]:
        """The session's messages in order (the newest ``max_messages`` of them)."""
        log = self.log(session_id)
        rows = await (log.all() if self.max_messages is None else log.last(self.max_messages))
        # Remembered for the save that follows (objects of their own: the caller's may
        # be changed).
        complete = self.max_messages is None or len(rows) < self.max_messages
        tail = rows[-KEPT:]
        self._tails.put(log.conversation, read_tail(tail, from_rows(tail), complete))
        return from_rows(rows)

    async def save_messages(
        self,
        session_id: str | None,
        messages: Sequence[Message],
        *,
        state: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """Append the messages the log does not end with already, in one atomic
        ``append_many`` conditional on the seq their check read."""
        if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
            raise InvalidArgumentError(
                f"messages must be a sequence of Message, got {type(messages).__name__}"
            )
        messages = list(messages)
        if not messages:
            return
        log = self.log(session_id)
        # Bad input raises here, before any I/O: a message the framework cannot
        # serialize, or a row the log refuses (no exact JSON form, too large...).
        rows = log.validate(with_run_usage([to_row(m) for m in messages], RUN_USAGE.get()))
        n, hint = len(messages), self._tails.get(log.conversation)
        for _ in range(_SAVE_TRIES):
            if hint is None or not hint.covers(n):
                seq = await log.count()  # read first: a write after it fails the condition
                read = await log.last(n)
                hint = Tail(tuple(from_rows(read)), seq, len(read) < n)
            new = filter_new_messages(list(hint.messages[-n:]), messages)
            if not new:
                return
            kept = rows[n - len(new) :]  # the filter keeps a suffix
            try:
                end = await log.append_many(
                    kept, idempotency_key=batch_key(self.source_id, new), expected_seq=hint.seq
                )
            except SeqConflictError:
                hint = None  # someone wrote since: check against the log's tail
                continue
            except IdempotencyConflictError:  # these message ids were saved (other content)
                self._tails.drop(log.conversation)
                return
            if end > hint.seq:
                self._tails.put(log.conversation, hint.after(new, end))
            else:  # a replay of a committed batch (its key): the log ends elsewhere
                self._tails.drop(log.conversation)
            return
        raise SeqConflictError(
            f"save_messages lost {_SAVE_TRIES} conditional appends to other writers of "
            f"{self.conversation(session_id)!r} in a row; nothing was written",
            current_seq=await log.count(),
        )

    async def after_run(
        self,
        *,
        agent: Any,
        session: Any,
        context: Any,
        state: dict[str, Any],
    ) -> None:
        """The framework's save of a run's messages, with the run's usage (the sum of its
        model calls, ``response.usage_details``) on its last assistant message: the
        framework reports usage per run, not per message (docs/usage.md)."""
        response = getattr(context, "response", None)
        token = RUN_USAGE.set(getattr(response, "usage_details", None))
        try:
            await super().after_run(agent=agent, session=session, context=context, state=state)
        finally:
            RUN_USAGE.reset(token)

    async def clear(self, session_id: str | None) -> None:
        """Empty the session's history with the log's ``clear()``: one entry; the
        messages stay readable with ``view="physical"`` until trimmed or erased."""
        log = self.log(session_id)
        self._tails.drop(log.conversation)
        await log.clear()

    async def erase(
        self, session_id: str | None, *, erased_for: timedelta = timedelta(hours=24)
    ) -> None:
        """Delete the session's history from Redis (the log's ``erase()``: every key,
        with a tombstone refusing writes for ``erased_for``)."""
        log = self.log(session_id)
        self._tails.drop(log.conversation)
        await log.erase(erased_for=erased_for)


_SOURCE_ESCAPES = str.maketrans({"%": "%25", ":": "%3A"})


def source_part(source_id: str) -> str:
    """``source_id`` as the first part of a conversation id: its ``%`` and ``:`` as
    ``%25`` and ``%3A``. So the part holds no ``:``, the conversation's first ``:`` ends
    it, and two sources never share a conversation (``audit`` with session ``eu:x`` and
    ``audit:eu`` with session ``x`` were one before). A source id with neither character
    is its own part: the conversations an earlier version wrote for it are read as
    they were."""
    return source_id.translate(_SOURCE_ESCAPES)


def _check_window(max_messages: object) -> int | None:
    if max_messages is None:
        return None
    if isinstance(max_messages, bool) or not isinstance(max_messages, int):
        raise InvalidArgumentError(
            f"max_messages must be a positive int or None, got {type(max_messages).__name__}"
        )
    if max_messages <= 0:
        raise InvalidArgumentError(
            f"max_messages must be a positive int or None, got {max_messages} "
            "(to load no history, pass load_messages=False; nothing is ever deleted by it)"
        )
    return max_messages


def _check_sources(sources: object) -> None:
    if sources is None:
        return
    if not isinstance(sources, (set, frozenset)) or not all(isinstance(s, str) for s in sources):
        raise InvalidArgumentError("store_context_from must be a set of source ids (str) or None")
