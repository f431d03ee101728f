"""A batch: messages validated and encoded as they will be stored, before anything is
sent (a bad message, one with no exact JSON form or one over the size limit raises
here), with the binaries to store off the rows and the edit written before them.

Two routes: the plain lane (at the end of this file) encodes messages of the common shape
without building models; every other batch takes the model route, which decides, and
raises the typed errors."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from pydantic import TypeAdapter, ValidationError

from ... import errors
from ...errors import CodecError
from ...models import AgentMessage, describe_errors
from ..args import check_int
from ..read.views import AttrChanges, Edit
from ..stored.codec import encode_message
from ..stored.usage import delta as usage_delta
from .blobs import blob_references, offload
from .bounds import DEFAULT_MAX_BATCH_BYTES, check_batch_bytes
from .depth import MAX_JSON_DEPTH, too_deep_field


# Not frozen (on every append's path: a frozen dataclass's __init__ costs ~0.15 µs a
# field); never changed after construction: dataclasses.replace() makes changed copies.
@dataclass(slots=True)
class Batch:
    """Validated, encoded messages ready to append."""

    messages: tuple[AgentMessage, ...]  # empty when encoded without models (plain lane)
    encoded: tuple[bytes, ...]  # as stored: large binaries replaced by references
    blobs: tuple[tuple[str, bytes], ...] = ()  # (SHA-256 hex, bytes) to store off the rows
    edit: Edit | None = None  # the edit written before the messages (docs/edits.md)
    attrs: AttrChanges | None = None  # attribute changes made with it
    blob_refs: str = ""  # "<message>.<part>:<sha256> ...": references to bytes it lacks
    usage: str | None = None  # what a plain append adds to the totals (stored/usage.py)

    def fingerprint(self) -> str:
        """A digest of the batch, stored with an idempotency record so that a key reused
        for a different batch is refused instead of answered with the wrong seqs."""
        digest = hashlib.blake2b(digest_size=16)
        if self.edit is not None:
            digest.update(repr((self.edit, self.attrs)).encode())
        for data in self.encoded:
            digest.update(len(data).to_bytes(8, "big"))
            digest.update(data)
        return digest.hexdigest()


_COPYING = frozenset(("fork", "compact"))  # the edits whose messages are copies

BeforeAppend = Callable[[list[AgentMessage]], Sequence[AgentMessage | Mapping[str, Any]]]
"""A log's ``before_append``: the messages of a write, validated, in; the messages to
write (messages or mappings, as many) out (docs/lifecycle.md, "Filtering writes")."""

_RESULT_ERRORS = (errors.InvalidMessageError, errors.CodecError, errors.MessageTooLargeError)


class BatchRules:
    """How a log validates and encodes its batches: its size limit, blob threshold and
    write filter (``before_append``)."""

    __slots__ = ("before_append", "blob_threshold", "max_batch_bytes", "max_message_bytes")

    def __init__(
        self,
        max_message_bytes: int,
        blob_threshold: int | None,
        before_append: BeforeAppend | None = None,
        max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES,
    ) -> None:
        self.max_message_bytes = max_message_bytes
        self.blob_threshold = blob_threshold
        self.before_append = before_append
        self.max_batch_bytes = max_batch_bytes

    def batch(
        self,
        msgs: Iterable[AgentMessage | Mapping[str, Any]],
        edit: Edit | None = None,
        attrs: Mapping[str, str | None] | None = None,
        *,
        filtered: bool = True,
        models: bool = False,
        new_from: int | None = None,
    ) -> Batch:
        """Validate and encode ``msgs`` (written after ``edit``, if any, which also
        changes ``attrs``); raise before anything is sent if any is bad. ``filtered``:
        the messages go through the log's ``before_append`` (after their validation; a
        fork's copied rows and ``validate()`` do not). ``models``: the batch carries
        the validated messages; without it, and with no ``before_append`` to see them, a
        batch of plain messages is encoded without building any (:func:`encode_plain`), and
        its ``messages`` is empty. ``new_from``: in a fork's or a compaction's batch, the
        index of its first message that is new, not a copy (its usage, and the next
        ones', is added to the totals; ``None``: all copies)."""
        changes = None if attrs is None else AttrChanges.of(attrs)
        if changes is not None and edit is None:
            edit = changes.entry()
        if type(msgs) is not tuple and (
            isinstance(msgs, (str, bytes, Mapping, AgentMessage)) or not isinstance(msgs, Iterable)
        ):
            raise errors.InvalidMessageError(
                f"expected a sequence of messages, got {type(msgs).__name__}"
            )
        items = msgs if type(msgs) is tuple or type(msgs) is list else tuple(msgs)
        if not models and (self.before_append is None or not filtered):
            plain = encode_plain(items, self.max_message_bytes)
            if plain is not None:
                if len(plain) > 1 or changes or self.max_batch_bytes < self.max_message_bytes:
                    check_batch_bytes(plain, (), self.max_batch_bytes, _json_of(changes))
                return Batch((), plain, (), edit, changes)
        messages = _coerce_all(items)
        if not (filtered and messages and self.before_append is not None):
            return self._encoded(messages, edit, changes, new_from)
        messages = _filtered(self.before_append, messages)
        try:
            return self._encoded(messages, edit, changes, new_from)
        except _RESULT_ERRORS as exc:
            note = f"{exc} (as before_append returned it)"
            if isinstance(exc, errors.InvalidMessageError):
                raise errors.InvalidMessageError(note, index=exc.index) from exc
            if isinstance(exc, errors.BatchTooLargeError):
                raise errors.BatchTooLargeError(note, cap=exc.cap) from exc
            raise type(exc)(note) from exc

    def _encoded(
        self,
        messages: tuple[AgentMessage, ...],
        edit: Edit | None,
        changes: AttrChanges | None,
        new_from: int | None = None,
    ) -> Batch:
        """The batch of validated ``messages``: each encoded as stored, checked."""
        if new_from is not None:
            check_int("new_from", new_from, highest=len(messages))
        encoded = []
        blobs: dict[str, bytes] = {}
        refs: list[tuple[int, int, str]] = []
        for index, msg in enumerate(messages):
            _check_depth(msg, index)
            stored, offloaded = offload(msg, self.blob_threshold)
            blobs.update(offloaded)
            if not isinstance(stored.content, str):
                refs += blob_references(index, stored.content)
            try:
                data = encode_message(stored)
            except errors.CodecError as exc:
                raise errors.CodecError(f"message {index}: {exc}") from exc
            if len(data) > self.max_message_bytes:
                raise errors.MessageTooLargeError(
                    f"message {index} encodes to {len(data)} bytes, over the limit of "
                    f"{self.max_message_bytes} (max_message_bytes, after moving binaries "
                    f"over {self.blob_threshold} bytes off the row)"
                )
            encoded.append(data)
        # The references whose bytes this call does not bring: the script checks that the
        # conversation holds them (only the server can tell, atomically with the write).
        held = " ".join(f"{i}.{p}:{d}" for i, p, d in refs if d not in blobs) if refs else ""
        check_batch_bytes(
            tuple(encoded), tuple(blobs.items()), self.max_batch_bytes, _json_of(changes)
        )
        # A fork's and a compaction's messages (copies, a replace's rows) keep their usage
        # on the row but add none: it was counted where first written. Those from
        # ``new_from`` on are new: theirs is added.
        counted = messages
        if edit is not None and edit.op in _COPYING:
            counted = () if new_from is None else messages[new_from:]
        usage = usage_delta(counted) if counted else None
        return Batch(messages, tuple(encoded), tuple(blobs.items()), edit, changes, held, usage)


def _json_of(changes: AttrChanges | None) -> bytes:
    """The attribute changes a call sends, as the bytes they count for in its size."""
    return b"" if changes is None else changes.json


def _filtered(
    before_append: BeforeAppend, messages: tuple[AgentMessage, ...]
) -> tuple[AgentMessage, ...]:
    """``before_append``'s result for ``messages``, validated: as many messages (or
    mappings), each valid; its own exceptions propagate unchanged (a veto)."""
    result = before_append(list(messages))
    if isinstance(result, (str, bytes, Mapping, AgentMessage)) or not isinstance(result, Sequence):
        raise errors.InvalidMessageError(
            f"before_append must return a sequence of messages, got {type(result).__name__}. "
            "Nothing was written."
        )
    if len(result) != len(messages):
        raise errors.InvalidMessageError(
            f"before_append returned {len(result)} messages for {len(messages)}: it rewrites "
            "messages, one for one (raise to refuse a write). Nothing was written."
        )
    try:
        return tuple(_coerce(msg, index) for index, msg in enumerate(result))
    except errors.InvalidMessageError as exc:
        raise errors.InvalidMessageError(
            f"{exc} (as before_append returned it)", index=exc.index
        ) from exc


_validate_many = TypeAdapter(list[AgentMessage]).validator.validate_python


def _coerce_all(
    items: Sequence[AgentMessage | Mapping[str, Any]],
) -> tuple[AgentMessage, ...]:
    """Every message validated. A batch of dicts (and messages) goes through pydantic-core
    in one call (0.75 µs a message against 1.3 for a call each); anything else, and any
    batch that fails, message by message, which names the first bad one."""
    if len(items) > 1 and all(type(m) is dict or isinstance(m, AgentMessage) for m in items):
        try:
            return tuple(_validate_many(items))
        except ValidationError:
            pass  # the same validation again, one by one: the error names the message
    return tuple([_coerce(m, i) for i, m in enumerate(items)])


def _coerce(msg: AgentMessage | Mapping[str, Any], index: int) -> AgentMessage:
    if isinstance(msg, AgentMessage):
        return msg
    if type(msg) is not dict and not isinstance(msg, Mapping):  # dict: skip the ABC check
        raise errors.InvalidMessageError(
            f"message {index}: expected an AgentMessage or a mapping, got {type(msg).__name__}",
            index=index,
        )
    try:
        return AgentMessage.model_validate(msg)
    except ValidationError as exc:
        problems = describe_errors(exc, msg)
        raise errors.InvalidMessageError(f"message {index}: {problems}", index=index) from exc


def _check_depth(msg: AgentMessage, index: int) -> None:
    where = too_deep_field(msg)
    if where is not None:
        raise errors.InvalidMessageError(
            f"message {index}: {where} nests deeper than {MAX_JSON_DEPTH} levels of objects "
            "and arrays, the limit for every JSON value of a message (docs/guide.md, "
            '"Limits"). Nothing was written.',
            index=index,
        )


# -- the plain lane ---------------------------------------------------------------------------
# Messages of the common shape (a role and a text, and at most a name, a tool call id and
# an id, all strings) checked and encoded without building models (every append is
# validated; the cost of doing so is work).
#
# A message is taken here only when the checks below prove the model would accept it
# and store exactly these bytes; anything else (another shape, a value of another type,
# a text with no exact JSON form, a message over the size limit) makes the whole batch
# go the model route (BatchRules.batch above), which decides, and raises the same typed
# error as before. tests/contract/test_plain_lane.py checks, with hypothesis, that both
# routes store byte-identical rows and refuse the same inputs with the same errors.

_ROLES = frozenset(("system", "user", "assistant", "tool"))  # models.Role
# The optional string fields of a plain message: the input's key, the stored key, in
# the stored order (to_document's: name, toolCallId, id).
_OPTIONAL = (("name", "name"), ("toolCallId", "toolCallId"),
             ("tool_call_id", "toolCallId"), ("id", "id"))  # fmt: skip
_PLAIN_KEYS = frozenset(("role", "content", *(given for given, _ in _OPTIONAL)))


def encode_plain(msgs: Sequence[Any], max_bytes: int) -> tuple[bytes, ...] | None:
    """The stored bytes of every message of ``msgs``, or ``None`` if any one of them is
    not plain (the model route then validates and encodes the batch)."""
    encoded = []
    for msg in msgs:
        if type(msg) is dict:
            doc = _plain_document(msg)
            if doc is None:
                return None
            try:
                data = orjson.dumps(doc)
            except orjson.JSONEncodeError:
                return None  # a lone surrogate: the model route names it
        elif isinstance(msg, AgentMessage):
            model_data = _plain_model(msg)
            if model_data is None:
                return None
            data = model_data
        else:
            return None
        if len(data) > max_bytes:
            return None
        encoded.append(data)
    return tuple(encoded)


def _plain_document(msg: dict[Any, Any]) -> dict[str, str] | None:
    """The stored document of a plain message given as a dict (``None``: not plain)."""
    role = msg.get("role")
    content = msg.get("content")
    if type(role) is not str or role not in _ROLES or type(content) is not str:
        return None
    doc = {"role": role, "content": content}
    if len(msg) == 2:  # role and content, both present: the most common message
        return doc
    if not msg.keys() <= _PLAIN_KEYS or ("toolCallId" in msg and "tool_call_id" in msg):
        return None
    for given, stored in _OPTIONAL:
        value = msg.get(given)
        if value is not None:
            if type(value) is not str:
                return None
            doc[stored] = value
    return doc


def _plain_model(msg: AgentMessage) -> bytes | None:
    """A message already validated (models are frozen): its bytes, when it has no value
    that may nest or hold binaries (those need the depth check and the blob threshold)."""
    fields = msg.__dict__
    if (
        type(fields["content"]) is not str
        or fields["tool_calls"] is not None
        or fields["metadata"] is not None
        or fields["extras"] is not None
        or fields["usage"] is not None  # the model route sums it for the totals
    ):
        return None
    try:
        return encode_message(msg)
    except CodecError:
        return None  # the model route names the message
