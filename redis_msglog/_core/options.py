"""A log's options as one value: what the clients' keyword arguments set, what a fork
copies, what an integration's ``**log_options`` may hold, and what builds the core."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from ..errors import InvalidArgumentError
from .facade import (
    DEFAULT_IDEMPOTENCY_WINDOW,
    DEFAULT_MAX_MESSAGE_BYTES,
    DEFAULT_PAGE_SIZE,
    Clock,
    LogCore,
)
from .retry import DEFAULT_RETRY, RetryPolicy
from .write.blobs import DEFAULT_BLOB_THRESHOLD
from .write.bounds import (
    DEFAULT_MAX_BATCH_BYTES,
    DEFAULT_MAX_REWRITE_BYTES,
    DEFAULT_STREAM_NODE_ENTRIES,
    Rewrite,
)
from .write.durability import Durability
from .write.encode import BeforeAppend


@dataclass(frozen=True)
class LogOptions:
    """The options of :class:`~redis_msglog.MessageLog` and
    :class:`~redis_msglog.AsyncMessageLog` after the client, the conversation and the
    hook (see their docstrings). Checked when the core is built from them."""

    prefix: str = "msglog"
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    page_size: int = DEFAULT_PAGE_SIZE
    retry: RetryPolicy = DEFAULT_RETRY
    idempotency_window: timedelta = DEFAULT_IDEMPOTENCY_WINDOW
    ttl: timedelta | None = None
    durability: Durability | None = None
    blob_threshold: int | None = DEFAULT_BLOB_THRESHOLD
    scope: tuple[str, ...] | None = None  # a fork's new log takes the source's
    before_append: BeforeAppend | None = None
    max_age: timedelta | None = None
    max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES
    max_rewrite_bytes: int = DEFAULT_MAX_REWRITE_BYTES
    stream_node_entries: int = DEFAULT_STREAM_NODE_ENTRIES

    def keywords(self) -> dict[str, Any]:
        """The options as the clients' keyword arguments (a fork's new log takes them)."""
        return {field.name: getattr(self, field.name) for field in dataclasses.fields(self)}

    def build_core(self, conversation: str, *, sharded_events: bool, clock: Clock) -> LogCore:
        """The core of a log of ``conversation`` with these options; a bad option raises
        :class:`~redis_msglog.InvalidArgumentError` here."""
        return LogCore(
            conversation,
            prefix=self.prefix,
            max_message_bytes=self.max_message_bytes,
            page_size=self.page_size,
            retry=self.retry,
            idempotency_window=self.idempotency_window,
            ttl=self.ttl,
            durability=self.durability,
            blob_threshold=self.blob_threshold,
            before_append=self.before_append,
            max_age=self.max_age,
            max_batch_bytes=self.max_batch_bytes,
            rewrite=Rewrite(self.max_rewrite_bytes, self.stream_node_entries),
            sharded_events=sharded_events,
            scope=self.scope,
            clock=clock,
        )


LOG_OPTIONS = frozenset({"on_append", *(field.name for field in dataclasses.fields(LogOptions))})
"""The options a log takes by keyword: what an integration's ``**log_options`` may hold."""


def check_log_options(options: Mapping[str, Any]) -> LogOptions:
    """Check a log's options as :class:`MessageLog` would, for code that makes its logs
    later (the integrations): a bad one raises now, not at the first call."""
    unknown = sorted(set(options) - LOG_OPTIONS)
    if unknown:
        raise InvalidArgumentError(
            f"unknown log option(s) {', '.join(map(repr, unknown))}; "
            f"the options are {', '.join(sorted(LOG_OPTIONS))}"
        )
    hook = options.get("on_append")
    if hook is not None and not callable(hook):
        raise InvalidArgumentError(f"on_append must be callable, got {type(hook).__name__}")
    checked = LogOptions(**{k: v for k, v in options.items() if k != "on_append"})
    checked.build_core("x", sharded_events=False, clock=time.monotonic)
    return checked
