"""What the sync and asyncio clients share besides carrying steps: the core, built from
the constructor's options; the public properties; the translation of redis-py's failures
into the core's step outcomes; and the warnings the core only reports."""

from __future__ import annotations

import os
import sys
import time
import warnings
import weakref
from collections.abc import Iterable, Mapping
from typing import Any

from redis import exceptions as redis_errors

from .._core.facade import Batch, Commit, LogCore, PreparedAppend
from .._core.options import LogOptions
from .._core.options import check_log_options as check_log_options  # the integrations' import
from .._core.steps import NotSent, Refused, StepFailure
from .._core.stored.keys import ConversationKeys
from ..errors import EvictionWarning, InvalidArgumentError
from ..models import AgentMessage
from .routing import is_cluster

CLIENT_FAILURES = (redis_errors.RedisError, redis_errors.RedisClusterException, OSError)
"""What redis-py raises when a step fails (translated by :func:`step_failure`)."""

REFUSALS = (
    redis_errors.AuthenticationError,  # WRONGPASS, NOAUTH: a ConnectionError in redis-py
    redis_errors.AuthenticationWrongNumberOfArgsError,
    redis_errors.BusyLoadingError,  # LOADING: also a ConnectionError in redis-py
)
"""Error replies that redis-py raises as connection failures: the server answered, and ran
nothing (an append is not in doubt), and a login refused is not an outage to wait out."""

_CONNECTION_FAILURES = (
    redis_errors.ConnectionError,
    redis_errors.TimeoutError,
    redis_errors.RedisClusterException,  # no slot table: not a RedisError
    OSError,
)
# Clients already checked for an eviction policy (a warning once per client, not per log).
_EVICTION_CHECKED: weakref.WeakSet[Any] = weakref.WeakSet()
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # redis_msglog/


def step_failure(exc: BaseException) -> StepFailure:
    """The core's outcome for a failure of redis-py (or of the socket under it)."""
    if isinstance(exc, StepFailure):
        return exc
    # Cluster refusals are error replies, but nothing ran: re-sending is safe.
    if isinstance(exc, (redis_errors.TryAgainError, redis_errors.ClusterDownError)):
        return NotSent(f"the Redis Cluster did not serve the slot: {exc}", exc)
    if isinstance(exc, (redis_errors.AuthenticationError, AuthWrongArgs)):
        return Refused(_auth_reply(exc), exc)
    if isinstance(exc, redis_errors.BusyLoadingError):  # the server is loading its data
        return NotSent(f"LOADING {exc}", exc)
    if isinstance(exc, redis_errors.ResponseError):
        return Refused(_error_reply(exc), exc)
    if isinstance(exc, redis_errors.ClusterError):  # redirections that never settled
        return NotSent(f"the Redis Cluster did not serve the slot in time: {exc}", exc)
    if isinstance(exc, _CONNECTION_FAILURES):
        return NotSent(str(exc) or type(exc).__name__, exc)
    return Refused(str(exc) or type(exc).__name__, exc)  # DataError and the like


# redis-py strips these codes from an error reply's text and raises a class instead.
_CODES: tuple[tuple[type[Exception], str], ...] = (
    (redis_errors.NoScriptError, "NOSCRIPT"),
    (redis_errors.OutOfMemoryError, "OOM"),
    (redis_errors.ReadOnlyError, "READONLY"),
    (redis_errors.NoPermissionError, "NOPERM"),
    (redis_errors.BusyLoadingError, "LOADING"),
    (redis_errors.ExecAbortError, "EXECABORT"),
)


AuthWrongArgs = redis_errors.AuthenticationWrongNumberOfArgsError


def _auth_reply(exc: BaseException) -> str:
    """A refused login as the server's reply, its code first: redis-py raises
    ``NOAUTH`` (no credentials where the server needs them) and ``WRONGPASS`` (or an
    older server's ``ERR invalid password``) as one class, without the code."""
    text = str(exc)
    first = text.split(" ", 1)[0]
    if first in ("NOAUTH", "WRONGPASS"):
        return text
    needs_login = "required" in text or "already authenticated" in text
    return f"{'NOAUTH' if needs_login else 'WRONGPASS'} {text}"


def _error_reply(exc: redis_errors.ResponseError) -> str:
    """The server's error reply as sent, its code first (``NOSCRIPT No matching...``)."""
    text = str(exc)
    code = next((code for kind, code in _CODES if isinstance(exc, kind)), None)
    if code is None:
        first = text.split(" ", 1)[0]
        code = None if first.isupper() else "ERR"  # an unknown code stays in the text
    return text if code is None else f"{code} {text}"


def warn_at_caller(message: str, category: type[Warning]) -> None:
    """Warn, pointing at the first line outside this package (the caller's ``add``)."""
    frame, level = sys._getframe(0), 1
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        frame, level = frame.f_back, level + 1  # type: ignore[assignment]
    warnings.warn(message, category, stacklevel=level)


class ShellBase:
    """The options, properties and helpers both clients share."""

    _core: LogCore
    _options: LogOptions
    _redis: Any  # the shell's client, typed there

    def _setup_core(
        self, client: object, conversation: str, on_append: object, options: LogOptions
    ) -> None:
        """Check the client and the hook, and build the core from the shell's options; a
        bad argument raises here, before anything can be written."""
        if not hasattr(client, "connection_pool") and not is_cluster(client):
            raise InvalidArgumentError(
                f"{type(self).__name__} needs a redis-py client (Redis or RedisCluster), "
                f"got {type(client).__name__}"
            )
        if on_append is not None and not callable(on_append):
            raise InvalidArgumentError(
                f"on_append must be callable or None, got {type(on_append).__name__} "
                "(options after it are keyword-only: prefix=..., ttl=...)"
            )
        self._core = options.build_core(
            conversation, sharded_events=is_cluster(client), clock=time.monotonic
        )
        self._options = options  # for fork(): the new log is configured like this one

    def _within(self, started: float | None = None) -> float:
        """What is left of the retry deadline of a call begun at ``started`` (default:
        now): how long its next connect, or wait for a busy pool, may take."""
        deadline = self._core.retry.deadline
        return deadline if started is None else deadline - (self._core.clock() - started)

    def _prepare_append(
        self, batch: Batch, idempotency_key: str | None, expected_seq: int | None
    ) -> PreparedAppend:
        """The append's call and first try (``LogCore.prepare``), with the check of the
        client's eviction policy in its preflight on the client's first append."""
        check = self._redis not in _EVICTION_CHECKED
        if check:
            _EVICTION_CHECKED.add(self._redis)
        return self._core.prepare(batch, idempotency_key, expected_seq, check)

    def _warn(self, commit: Commit) -> None:
        if commit.eviction_risk is not None:
            warn_at_caller(commit.eviction_risk, EvictionWarning)

    @property
    def conversation(self) -> str:
        """The conversation id."""
        return self._core.conversation

    @property
    def scope(self) -> tuple[str, ...] | None:
        """The scope this log object was given (outermost part first), or ``None``."""
        return self._core.scope

    @property
    def keys(self) -> ConversationKeys:
        """The names of this conversation's keys and channel (for ops and tooling)."""
        return self._core.keys

    @property
    def page_size(self) -> int:
        """Entries fetched per round trip by ``all``, ``read``, ``last(n)`` and ``follow``."""
        return self._core.page_size

    def validate(self, msgs: Iterable[AgentMessage | Mapping[str, Any]]) -> list[AgentMessage]:
        """Check ``msgs`` exactly as :meth:`append_many` would, sending nothing: the
        validated messages, or the error the append would raise (bad message, no exact
        JSON form, over ``max_message_bytes``). The log's ``before_append`` is not run."""
        return list(self._core.batch(msgs, filtered=False, models=True).messages)
