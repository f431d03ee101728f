"""The exceptions this library raises. Every one is a :class:`MessageLogError`.

The first split of the tree answers the caller's first question, "was anything written?",
and every docstring opens with the answer:

- "Nothing was written.": the input errors (each also a ``ValueError``),
  :class:`SeqConflictError`, :class:`IdempotencyConflictError`, and every
  :class:`StorageError` (the server refused or could not be reached), including
  :class:`ServerUnavailableError` and :class:`PagedReadRetryError`. Re-sending is safe.
- "It may have been written.": :class:`AppendInDoubtError`. It stands directly under
  :class:`MessageLogError`, apart from :class:`StorageError`, so that ``except
  StorageError`` (or ``ServerUnavailableError``) never catches a maybe-committed append
  by accident: re-send it with its ``idempotency_key``. And
  :class:`ScopeErasureIncompleteError`, a scope's erasure that failed part-way (its
  tombstone set, some conversations erased): run it again.
- "It was written.": :class:`NotDurableError` alone (committed, but not yet durable),
  directly under :class:`MessageLogError` for the same reason: never re-send it.

The two outcome errors get no common base class of their own: they call for opposite
actions (re-send with the key / do not re-send), so one ``except`` for both would be the
same mistake again. In earlier versions :class:`AppendInDoubtError` subclassed
:class:`ServerUnavailableError`; see the changelog.

Bad input is also a :class:`ValueError`, so code that already guards against bad values
keeps working. Server-side failures keep redis-py's exception as ``__cause__``.
"""

from __future__ import annotations


class MessageLogError(Exception):
    """Base class of every error raised by redis-msglog. Whether anything was written is
    the first line of each subclass's docstring (the module's docstring has the tree)."""


class InvalidMessageError(MessageLogError, ValueError):
    """Nothing was written. A message failed validation (unknown role, non-string
    content, bad tool call...).

    ``index`` is the position of the offending message in the batch
    (0 for a single append); the message names the field.
    """

    def __init__(self, message: str, *, index: int = 0) -> None:
        super().__init__(message)
        self.index = index


class CodecError(MessageLogError, ValueError):
    """Nothing was written. A value has no exact JSON form (a set, an object, NaN, a
    65-bit int, a lone surrogate...), or a stored entry could not be decoded."""


class MessageTooLargeError(MessageLogError, ValueError):
    """Nothing was written. An encoded message is larger than the log's
    ``max_message_bytes``."""


class BatchTooLargeError(MessageTooLargeError):
    """Nothing was written. The messages (and binaries) of one append call encode to more
    than the log's ``max_batch_bytes`` (``cap``): write them in several calls."""

    def __init__(self, message: str, *, cap: int) -> None:
        super().__init__(message)
        self.cap = cap


class InvalidArgumentError(MessageLogError, ValueError, TypeError):
    """Nothing was written. An argument of a public call has the wrong type or value
    (``retract(4)``, a negative ``n``, an unknown ``view``, a conversation id, prefix,
    idempotency key or attribute that is not valid UTF-8...), found before anything is
    sent. Also a ``ValueError`` and a ``TypeError``, so code that caught either keeps
    working."""


class MissingExtraError(MessageLogError, ModuleNotFoundError):
    """Nothing was written. A format, adapter or integration needs a framework that is not
    installed; the message names the extra to install (``pip install
    'redis-msglog[langchain]'``). Also a ``ModuleNotFoundError`` (an ``ImportError``)."""


class StorageError(MessageLogError):
    """Nothing was written. The server refused the command or could not be reached.

    True of every subclass: an append that may have committed raises
    :class:`AppendInDoubtError` instead, which is not a :class:`StorageError`.
    """


class ServerUnavailableError(StorageError):
    """Nothing was written. No connection to the server could be made (or a read timed
    out), or a Redis Cluster did not serve the conversation's slot (failover, slot move),
    or every connection of the client's pool stayed busy, until the retry policy's
    deadline."""


class AppendInDoubtError(MessageLogError):
    """It may have been written. The connection failed after an append was sent, and
    kept failing through every retry: it may or may not have committed.

    Not a :class:`StorageError` (nor a :class:`ServerUnavailableError`, as it was in
    earlier versions): those mean nothing was written, and an ``except`` for them must not catch
    a maybe-committed append.

    ``idempotency_key`` is the key to call again with, from any log object of the
    conversation: the caller's own, or, for an append made without one, a retry key
    (``msglog-retry:<producer>:<call number>:<fingerprint>``) that makes the new call a
    try of the failed one. Calling again with it and the same messages is safe: if the
    append committed, the call returns its seq and writes nothing; if not, it writes
    them once. A retry key is good for the retry policy's ``generated_key_ttl`` (2
    minutes by default) after the first try, a caller's key for the log's
    ``idempotency_window``. It is ``None`` when there is nothing to retry with: retries
    off and no key given, or the server no longer remembers the call (the message says it
    "no longer holds the result": read the log to find out).
    """

    def __init__(self, message: str, *, idempotency_key: str | None = None) -> None:
        super().__init__(message)
        self.idempotency_key = idempotency_key


class IdempotencyConflictError(MessageLogError, ValueError):
    """Nothing was written. An idempotency key already used in this conversation
    (within its window) was given with a different batch of messages."""


class SeqConflictError(MessageLogError):
    """Nothing was written. An append with ``expected_seq`` found the log ending at
    another seq: another writer appended first (a compare-and-set that lost).
    ``current_seq`` is the log's last seq when the append was refused."""

    def __init__(self, message: str, *, current_seq: int) -> None:
        super().__init__(message)
        self.current_seq = current_seq


class UsageCurrencyError(MessageLogError, ValueError):
    """Nothing was written. Costs in two currencies met where they would be added: an
    append whose usage is in another currency than the conversation's totals, or a sum of
    usages (``Usage + Usage``, a scope's totals) across currencies. A conversation keeps
    its costs in one currency (docs/usage.md): convert before writing. ``currencies``:
    the currencies met, in the order met."""

    def __init__(self, message: str, *, currencies: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.currencies = currencies


class DraftEndedError(MessageLogError):
    """Nothing was written. The draft is no longer open: its lease lapsed and a reader or
    writer that noticed ended it as interrupted, or it was ended already (``outcome``:
    ``"committed"``, ``"aborted"``, ``"interrupted"``, or ``"gone"`` when it is unknown
    to the server: never opened, erased or expired). See docs/drafts.md."""

    def __init__(self, message: str, *, outcome: str) -> None:
        super().__init__(message)
        self.outcome = outcome


class DraftTooLargeError(MessageTooLargeError):
    """Nothing was written. A draft's deltas would be more bytes than its cap (the log's
    ``max_message_bytes``): the delta was refused and the draft stays as it was."""


class TooManyDraftsError(MessageLogError):
    """Nothing was written. The conversation holds as many drafts as it may (open, or
    ended with their deltas kept for the minute after): end one first (docs/drafts.md)."""


class ConversationErasedError(MessageLogError):
    """Nothing was written. The conversation was erased (``log.erase()``, docs/lifecycle.md)
    and its tombstone still stands: for its ``erased_for`` no append, edit or fork into it
    is accepted, so a worker still holding it cannot bring the erased data back. Stop
    writing to it (drop the worker's task); the id is free again once the tombstone
    expires (``PTTL <prefix>:{<conversation>}:seq`` tells when). Reads meanwhile return
    an empty log. (A re-send of an append whose first reply was lost may meet the
    tombstone after that first try committed: then it was erased with the rest.)"""


class InvalidEditError(MessageLogError, ValueError):
    """Nothing was written. An edit (``retract``, ``compact``, ``archive``) named a seq
    that is not a row of the view (beyond the end, an edit entry, already retracted or
    compacted away), or would move the archive watermark backwards; checked by the server
    atomically with the edit."""


class RewriteTooLargeError(InvalidEditError):
    """Nothing was written. A ``trim()`` or ``redact()`` would rewrite more bytes of the
    stream than the log's ``max_rewrite_bytes`` (``cap``); checked by the server before
    the first write (docs/lifecycle.md, "Bounds")."""

    def __init__(self, message: str, *, cap: int) -> None:
        super().__init__(message)
        self.cap = cap


class LogRewoundError(StorageError):
    """Nothing was written. A reader's or follower's cursor is beyond the end of the log,
    or the message at its cursor changed: the log was rewound (a failover promoted a
    replica that had not received the last acknowledged appends, and their seqs were
    reused) or the cursor belongs to another log. Nothing was skipped silently; re-read
    from a seq you trust."""


class NotDurableError(MessageLogError):
    """It was written. The append COMMITTED (``last_seq`` is its last seq; readers see
    it), but the log's
    ``durability`` was not reached in time: fewer replicas acknowledged it, or the
    append-only file was not fsynced. It may still become durable, or be lost if the
    primary fails before it does. Do not append it again: it is there.

    Not a :class:`StorageError` on purpose: code that catches server failures (and
    retries the append) must not catch a commit by accident."""

    def __init__(self, message: str, *, last_seq: int) -> None:
        super().__init__(message)
        self.last_seq = last_seq


class DurabilityUnsupportedError(StorageError):
    """Nothing was written. The server cannot give the durability asked for (no
    ``WAITAOF`` before Redis 7.2, or ``appendonly no``), found before the first append."""


class OutOfMemoryError(StorageError):
    """Nothing was written. The server is over ``maxmemory`` and refused the write
    before running it."""


class WrongTypeError(StorageError):
    """Nothing was written. A key of this conversation holds a value of the wrong type
    (the message names the key)."""


class CorruptLogError(StorageError):
    """Nothing was written. The conversation's keys are not what this library writes: the
    seq counter holds something other than a seq, is behind or ahead of the stream, or the
    stream has a gap (an operator's ``XDEL``) or an entry it did not write. Raised instead
    of returning a silently shortened or gapped history; an append that raises it wrote
    nothing. ``msglog verify`` lists every such problem of a conversation."""


class CorruptEntryError(CorruptLogError):
    """Nothing was written. One stored stream entry does not decode to a message: neither
    ID ``<seq>-<at>`` with a ``msg`` field nor (an earlier version's) ID ``<seq>-0`` with
    ``at`` and ``msg`` fields, a commit time out of range, or a body that is not a valid
    message. ``seq`` names the entry (``None`` when its ID is not a seq). Told apart from
    :class:`CodecError`, which is about the caller's input."""

    def __init__(self, message: str, *, seq: int | None) -> None:
        super().__init__(message)
        self.seq = seq


class PagedReadRetryError(StorageError):
    """Nothing was written. A read that takes several calls (a view larger than one
    read's byte budget) saw the view change between its calls, every time it started
    over: edits land faster than the pages. Nothing is wrong with the log; read again
    (later, or with a ``limit``). Reads of a view up to the budget are one call and never
    raise it. Its own class, so a caller can retry exactly this and nothing else."""


class AuthenticationError(StorageError):
    """Nothing was written. The server refused the client's login: a wrong password, an
    unknown or disabled user, or no credentials where the server needs them
    (``WRONGPASS``, ``NOAUTH``). Raised at the first refusal, never retried as an outage
    (the credentials will not get better by waiting). Not redis-py's class of the same name."""


class PermissionDeniedError(StorageError):
    """Nothing was written. The server's ACL refused a command or a key to the client's
    user (``NOPERM``): the user lacks a permission the library needs (``acl_rules()``
    lists them), or the conversation is outside the user's key patterns. Raised at once,
    never retried."""


class ScopeMismatchError(InvalidArgumentError):
    """Nothing was written. A log object was given a ``scope`` other than the one its
    conversation was created with (``recorded``: that scope, a tuple), or a conversation
    created without a scope (``recorded`` is ``None``) was opened with one. A conversation
    keeps the scope it was created with (docs/lifecycle.md, "Scopes")."""

    def __init__(self, message: str, *, recorded: tuple[str, ...] | None = None) -> None:
        super().__init__(message)
        self.recorded = recorded


class ScopeErasedError(ConversationErasedError):
    """Nothing was written. The conversation's scope, or a scope containing it, was
    erased (``Directory.erase``) and its tombstone still stands: no conversation can be
    created in it, so a worker still holding a log object cannot bring erased data back
    (docs/lifecycle.md). A :class:`ConversationErasedError`: one ``except`` catches a
    write refused for either reason."""


class ScopeErasureIncompleteError(MessageLogError):
    """It may have been written. An erasure of a scope (``Directory.erase``) failed
    part-way, after it had set the scope's tombstone (``tombstone``: its key, which now
    refuses every new conversation in the scope for ``erased_for``): the conversations
    in ``erased`` were erased, the one being erased when it failed may have been, the rest
    of the scope is untouched, and ``skipped`` lists the index entries it skipped so far.
    Run the erasure again to finish it: it is idempotent and resumable. The failure is
    ``__cause__``. Not a :class:`StorageError`, whose "nothing was written" is not true
    here."""

    def __init__(
        self,
        message: str,
        *,
        tombstone: str,
        erased: list[str],
        skipped: list[object] | None = None,
    ) -> None:
        super().__init__(message)
        self.tombstone = tombstone
        self.erased = erased
        self.skipped = skipped or []


class EvictionWarning(UserWarning):
    """The server's ``maxmemory-policy`` may evict this library's keys."""
