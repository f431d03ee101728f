"""The exceptions this library raises. Every one is a :class:`MessageLogError`.

Bad input is also a :class:`ValueError`, so code that already guards against bad values
keeps working. Server-side failures keep redis-py's exception as ``__cause__``.
"""

from __future__ import annotations


class MessageLogError(Exception):
    """Base class of every error raised by redis-msglog."""


class InvalidMessageError(MessageLogError, ValueError):
    """A message failed validation (unknown role, non-string content, bad tool call...).

    Nothing was written. ``index`` is the position of the offending message in the batch
    (0 for a single append); the message names the field.
    """

    def __init__(self, message: str, *, index: int = 0) -> None:
        super().__init__(message)
        self.index = index


class CodecError(MessageLogError, ValueError):
    """A value has no exact JSON form (a set, an object, NaN, a 65-bit int, a lone
    surrogate...), or a stored entry could not be decoded. Nothing was written."""


class MessageTooLargeError(MessageLogError, ValueError):
    """An encoded message is larger than the log's ``max_message_bytes``. Nothing was
    written."""


class InvalidArgumentError(MessageLogError, ValueError, TypeError):
    """An argument of a public call has the wrong type or value (``retract(4)``, a
    negative ``n``, an unknown ``view``, a conversation id, prefix, idempotency key or
    attribute that is not valid UTF-8...). Raised before anything is sent: nothing was
    written. Also a ``ValueError`` and a ``TypeError``, so code that caught either keeps
    working."""


class MissingExtraError(MessageLogError, ModuleNotFoundError):
    """A format, adapter or integration needs a framework that is not installed; the
    message names the extra to install (``pip install 'redis-msglog[langchain]'``).
    Also a ``ModuleNotFoundError`` (an ``ImportError``)."""


class StorageError(MessageLogError):
    """The server refused the command or could not be reached.

    For an append, nothing was written unless the subclass says otherwise
    (:class:`AppendInDoubtError`).
    """


class ServerUnavailableError(StorageError):
    """No connection to the server could be made (or a read timed out), or a Redis
    Cluster did not serve the conversation's slot (failover, slot move), or every
    connection of the client's pool stayed busy, until the retry policy's deadline.
    Nothing was written."""


class AppendInDoubtError(ServerUnavailableError):
    """The connection failed after an append was sent, and kept failing through every
    retry: it may or may not have committed.

    ``idempotency_key`` is the key to call again with, from any log object of the
    conversation: the caller's own, or, for an append made without one, a retry key
    (``msglog-retry:<producer>:<call number>:<fingerprint>``) that makes the new call a
    try of the failed one. Calling again with it and the same messages is safe: if the
    append committed, the call returns its seq and writes nothing; if not, it writes
    them once. A retry key is good for the retry policy's ``generated_key_ttl`` (2
    minutes by default) after the first try, a caller's key for the log's
    ``idempotency_window``. It is ``None`` when there is nothing to retry with: retries
    off and no key given, or the server no longer remembers the call (``MSGLOG_STALE``:
    read the log to find out).
    """

    def __init__(self, message: str, *, idempotency_key: str | None = None) -> None:
        super().__init__(message)
        self.idempotency_key = idempotency_key


class IdempotencyConflictError(MessageLogError, ValueError):
    """An idempotency key already used in this conversation (within its window) was
    given with a different batch of messages. Nothing was written."""


class SeqConflictError(MessageLogError):
    """An append with ``expected_seq`` found the log ending at another seq: another
    writer appended first (a compare-and-set that lost). Nothing was written.
    ``current_seq`` is the log's last seq when the append was refused."""

    def __init__(self, message: str, *, current_seq: int) -> None:
        super().__init__(message)
        self.current_seq = current_seq


class InvalidEditError(MessageLogError, ValueError):
    """An edit (``retract``, ``compact``, ``archive``) named a seq that is not a row of the
    view (beyond the end, an edit entry, already retracted or compacted away), or would
    move the archive watermark backwards. Checked by the server atomically with the
    edit: nothing was written."""


class LogRewoundError(StorageError):
    """A reader's or follower's cursor is beyond the end of the log, or the message at
    its cursor changed: the log was rewound (a failover promoted a replica that had not
    received the last acknowledged appends, and their seqs were reused) or the cursor
    belongs to another log. Nothing was skipped silently; re-read from a seq you trust."""


class NotDurableError(MessageLogError):
    """The append COMMITTED (``last_seq`` is its last seq; readers see it), but the log's
    ``durability`` was not reached in time: fewer replicas acknowledged it, or the
    append-only file was not fsynced. It may still become durable, or be lost if the
    primary fails before it does. Do not append it again: it is there.

    Not a :class:`StorageError` on purpose: code that catches server failures (and
    retries the append) must not catch a commit by accident."""

    def __init__(self, message: str, *, last_seq: int) -> None:
        super().__init__(message)
        self.last_seq = last_seq


class DurabilityUnsupportedError(StorageError):
    """The server cannot give the durability asked for (no ``WAITAOF`` before Redis 7.2,
    or ``appendonly no``). Checked before the first append: nothing was written."""


class OutOfMemoryError(StorageError):
    """The server is over ``maxmemory`` and refused the write before running it: nothing
    was written."""


class WrongTypeError(StorageError):
    """A key of this conversation holds a value of the wrong type (the message names the
    key). Nothing was written."""


class CorruptLogError(StorageError):
    """The conversation's keys are not what this library writes: the seq counter holds
    something other than a seq, is behind or ahead of the stream, or the stream has a gap
    (an operator's ``XDEL``) or an entry it did not write. Raised instead of returning a
    silently shortened or gapped history; an append that raises it wrote nothing.
    ``msglog verify`` lists every such problem of a conversation."""


class CorruptEntryError(CorruptLogError):
    """One stored stream entry does not decode to a message: neither ID ``<seq>-<at>``
    with a ``msg`` field nor (an earlier version's) ID ``<seq>-0`` with ``at`` and
    ``msg`` fields, a commit time out of range, or a body that is not a valid message.
    ``seq`` names the entry (``None`` when its ID is not a seq). Told apart from
    :class:`CodecError`, which is about the caller's input."""

    def __init__(self, message: str, *, seq: int | None) -> None:
        super().__init__(message)
        self.seq = seq


class PagedReadRetryError(StorageError):
    """A read that takes several calls (a view larger than one read's byte budget) saw
    the view change between its calls, every time it started over: edits land faster
    than the pages. Nothing is wrong with the log; read again (later, or with a
    ``limit``). Reads of a view up to the budget are one call and never raise it."""


class AuthenticationError(StorageError):
    """The server refused the client's login: a wrong password, an unknown or disabled
    user, or no credentials where the server needs them (``WRONGPASS``, ``NOAUTH``).
    Raised at the first refusal, never retried as an outage (the credentials will not
    get better by waiting). Nothing was written. Not redis-py's class of the same name."""


class PermissionDeniedError(StorageError):
    """The server's ACL refused a command or a key to the client's user (``NOPERM``):
    the user lacks a permission the library needs (``acl_rules()`` lists them), or the
    conversation is outside the user's key patterns. Raised at once, never retried.
    Nothing was written."""


class EvictionWarning(UserWarning):
    """The server's ``maxmemory-policy`` may evict this library's keys."""
