"""What the sync and asyncio clients share besides carrying steps: the core, built from
the constructor's options; the public properties; the warnings the core only reports;
and :func:`configure_read_cache`, which checks the client before the core's read cache
is set. The translation of redis-py's failures is in ``failures.py``."""

from __future__ import annotations

import os
import sys
import time
import warnings
import weakref
from collections.abc import Iterable, Mapping
from typing import Any

from .._core.args import check_int
from .._core.facade import Batch, Commit, LogCore, PreparedAppend
from .._core.options import LogOptions
from .._core.options import check_log_options as check_log_options  # the integrations' import
from .._core.read.cache import set_read_cache
from .._core.stored.keys import ConversationKeys
from ..errors import EvictionWarning, InvalidArgumentError
from ..models import AgentMessage
from .routing import is_cluster

# Clients already checked for an eviction policy (a warning once per client, not per log).
_EVICTION_CHECKED: weakref.WeakSet[Any] = weakref.WeakSet()
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # redis_msglog/


def configure_read_cache(client: Any, max_bytes: int | None) -> None:
    """Set the warm-read cache of a redis-py client (shared by every log on it): at most
    ``max_bytes`` of stored JSON, estimated; ``None`` or 0 turns it off and frees it.
    By default each client has one of :data:`~redis_msglog.DEFAULT_READ_CACHE_BYTES`."""
    if max_bytes is not None:
        check_int("max_bytes", max_bytes)
    if not hasattr(client, "connection_pool") and not is_cluster(client):
        raise InvalidArgumentError(
            f"configure_read_cache needs a redis-py client, got {type(client).__name__}"
        )
    set_read_cache(client, max_bytes)


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
