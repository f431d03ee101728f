"""The contract of ``lua/append.lua``, in one place: its ``KEYS`` and ``ARGV`` built from
one list of names (the script binds the same names, in the same order, at its top; a
test checks they agree) and read back by name, its reply parsed into a typed value, and
its error codes mapped to this library's errors through one table."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from .. import errors
from .._core.steps import Command, Refused
from .._core.stored.keys import ConversationKeys
from ..edits import EditCall
from .load import LuaScript, load_script

KEY_NAMES = ("seq", "stream", "blobs", "producers", "view", "hidden", "record", "records")
"""``KEYS`` of the script, in order; the script binds each to a local of the same name in
capitals. ``view`` and ``hidden`` come only with an edit or a ``ttl``, ``record`` (and
``records``, the set naming the conversation's records) only with a caller's idempotency
key: such a call sends ``KEYS[1..4]``, then those. ``blobs``
is the stream's name again when the append does not touch it, and so is ``producers``
when the call has no producer; a call with neither view nor record leaves those out
(each key costs the server time): ``seq, stream, producers`` (no blobs) or ``seq,
stream`` (no blobs, no producer: ``NO_RETRY``)."""
ARGV_NAMES = (
    "publish", "channel", "record_ttl_ms", "look_up", "call", "producer", "pseq", "floor",
    "rest",
    "fingerprint", "ttl_ms", "blob_count", "expected_seq", "op", "op_arg", "entry",
    "attr_count", "attrs_json", "blob_refs", "max_age_us", "scope", "rewrite", "usage",
)  # fmt: skip
"""The named ``ARGV`` of the script, in order: ``keys_and_args`` sends them so, and the
script binds each to a local of the same name (a test checks both). The blobs (digest,
bytes), the attribute changes (``+name``/``-name``, value) and the encoded messages
follow. ``rest`` is ``""`` when every name after it holds its default (``_DEFAULTS``):
those are then not sent at all (most appends; each argument costs the server time to
read and hand to the script), and the tail follows ``rest``."""
_ARGV_AT = {name: at for at, name in enumerate(ARGV_NAMES)}
_REST = _ARGV_AT["rest"]
_DEFAULTS: dict[str, Any] = {
    name: 0 if name.endswith("_count") else "" for name in ARGV_NAMES[_REST + 1 :]
}
_PLAIN_KEYS = KEY_NAMES[:4]
_KEY_LAYOUTS = {  # by numkeys: whether view and hidden, and a record, were sent
    2: KEY_NAMES[:2],  # blobs and producers: the stream again
    3: (*KEY_NAMES[:2], "producers"),  # blobs: the stream again
    4: _PLAIN_KEYS,
    6: KEY_NAMES[:6],  # or a record: see sent_keys
    8: KEY_NAMES,
}
_RECORD_LAYOUT = (*_PLAIN_KEYS, "record", "records")


def script() -> LuaScript:
    return load_script("append.lua")


# Not frozen (on every append's path: a frozen dataclass's __init__ costs ~0.15 µs a
# field); never changed after construction: dataclasses.replace() makes changed copies.
@dataclass(slots=True)
class AppendCall:
    """One call of the append script, its arguments by name."""

    keys: ConversationKeys
    messages: tuple[bytes, ...]
    call: str  # a token naming this call, the same on every try
    blobs: tuple[tuple[str, bytes], ...] = ()  # (SHA-256 hex, bytes) stored off the rows
    publish: str = ""  # "PUBLISH", "SPUBLISH" (cluster) or "": no event
    record: str | None = None  # the caller's idempotency record's key
    record_ttl_ms: int = 0  # how long the record (or the producer's results) lives
    fingerprint: str = ""
    look_up: bool = True  # look the record up first (False: the first try of a call)
    ttl_ms: int | None = None  # the conversation's lifetime, refreshed by every append
    expected_seq: int | None = None  # commit only if the log ends at this seq
    op: EditCall | Literal[""] = ""  # the edit this call makes ("": a plain append)
    op_arg: str = ""  # retract: "7,9"; compact: the seq or "end"; archive, trim: the seq
    entry: bytes = b""  # fork, attrs and redact only: the edit entry's JSON
    attrs: tuple[tuple[str, str | None], ...] = ()  # attribute changes (None: delete)
    attrs_json: bytes = b""  # the same as JSON, for the edit entry
    producer: str = ""  # the idempotent producer making the call ("": none)
    pseq: int = 0  # the producer's number of this call, the same on every try
    floor: int | None = None  # the producer's lowest call in flight (None: unknown)
    blob_refs: str = ""  # "<message>.<part>:<sha256> ...": references the batch cannot store
    max_age_us: int | None = None  # trim entries older than this on a plain append (µs)
    scope: str = ""  # a scoped log's scope ("/"-joined): its owner record must name it
    rewrite: str = ""  # "<max_rewrite_bytes> <stream_node_entries>" for a trim or a redact
    usage: str = ""  # what the call adds to the usage totals ("": nothing, no totals key)

    def sent_key_names(self) -> tuple[str, ...]:
        """The ``KEYS`` this call sends, in order."""
        # Only keys that exist once the conversation does (or that the script needs):
        # during a cluster slot move a declared key that does not exist holds the
        # append up (TRYAGAIN). Unused positions repeat the stream's name.
        uses_blobs = (
            bool(self.blobs)
            or self.ttl_ms is not None
            or bool(self.blob_refs)
            or self.op in ("trim", "redact")
            or self.max_age_us is not None
        )
        keys: tuple[str, ...] = (self.keys.seq, self.keys.stream)
        views = self.op or self.ttl_ms is not None or self.max_age_us is not None
        if uses_blobs or views or self.record is not None:
            blobs = self.keys.blobs if uses_blobs else self.keys.stream
            keys += (blobs, self.keys.producers if self.producer else self.keys.stream)
            if views:
                keys += (self.keys.view, self.keys.hidden)
            return keys if self.record is None else (*keys, self.record, self.keys.records)
        # Most calls: no placeholder (each key costs the server time to read).
        return (*keys, self.keys.producers) if self.producer else keys

    def _sent_keys(self) -> tuple[str, ...]:
        """:meth:`sent_key_names`, then the usage totals of a call that adds to them, and
        a scoped log's owner record last."""
        keys = self.sent_key_names()
        if self.usage:
            keys = (*keys, self.keys.usage)
        return (*keys, self.keys.owner) if self.scope else keys

    def keys_and_args(self) -> Command:
        """``numkeys, KEYS..., ARGV...`` for ``EVALSHA``/``EVAL``."""
        keys = self._sent_keys()
        recorded = self.record is not None or bool(self.producer)
        common = (  # in ARGV_NAMES order: a literal tuple, on every append's path
            self.publish,
            self.keys.channel,
            self.record_ttl_ms if recorded else "",
            "1" if self.look_up else "0",
            self.call,
            self.producer,
            self.pseq if self.producer else "",
            "" if self.floor is None else self.floor,
        )
        if (
            self.record is None
            and self.ttl_ms is None
            and not self.blobs
            and self.expected_seq is None
            and not self.op
            and not self.attrs
            and not self.blob_refs
            and self.max_age_us is None
            and not self.scope
            and not self.usage
        ):  # most calls: the rest at their defaults, not sent, and only messages follow
            return (len(keys), *keys, *common, "", *self.messages)
        argv = (
            *common,
            "1",
            self.fingerprint if self.record is not None else "",
            "" if self.ttl_ms is None else self.ttl_ms,
            len(self.blobs),
            "" if self.expected_seq is None else self.expected_seq,
            self.op,
            self.op_arg,
            self.entry,
            len(self.attrs),
            self.attrs_json,
            self.blob_refs,
            "" if self.max_age_us is None else self.max_age_us,
            self.scope,
            self.rewrite,
            self.usage,
        )
        if not self.blobs and not self.attrs:
            return (len(keys), *keys, *argv, *self.messages)
        stored = tuple(part for blob in self.blobs for part in blob)
        changes = tuple(
            part
            for name, value in self.attrs
            for part in ((f"+{name}", value) if value is not None else (f"-{name}", ""))
        )
        return (len(keys), *keys, *argv, *stored, *changes, *self.messages)

    @staticmethod
    def sent_keys(command: Command) -> dict[str, Any]:
        """The keys of a sent ``EVALSHA``/``EVAL`` of the script (or of a
        ``keys_and_args()``), by name, in the order sent (for tests and tools)."""
        head = 0 if isinstance(command[0], int) else 2  # no "EVALSHA", sha in front
        keys = command[head + 1 : head + 1 + int(command[head])]
        last: dict[str, Any] = {}
        if AppendCall.argument(command, "scope"):  # a scoped log's owner record, last
            keys, last = keys[:-1], {"owner": keys[-1]}
        if AppendCall.argument(command, "usage"):  # the usage totals, before it
            keys, last = keys[:-1], {"usage": keys[-1], **last}
        return {**_named_keys(keys), **last}

    @staticmethod
    def argument(command: Command, name: str) -> Any:
        """The argument ``name`` (one of ``ARGV_NAMES``) of a sent ``EVALSHA``/``EVAL`` of
        the script (or of a ``keys_and_args()``), as sent."""
        head = 0 if isinstance(command[0], int) else 2
        base = head + 1 + int(command[head])
        if _ARGV_AT[name] > _REST and command[base + _REST] == "":
            return _DEFAULTS[name]  # not sent: its default
        return command[base + _ARGV_AT[name]]


def _named_keys(keys: tuple[Any, ...]) -> dict[str, Any]:
    """The append script's keys ``keys`` (the owner record left out), by name."""
    layout = _KEY_LAYOUTS[len(keys)]
    if len(keys) == 6 and str(keys[5]).endswith("}:records"):
        layout = _RECORD_LAYOUT  # a record and its set, not the view keys
    sent = dict(zip(layout, keys, strict=True))
    if len(keys) < 4:  # the keys left out, as the script binds them: the stream's name
        stream = sent["stream"]
        producers = sent.get("producers", stream)
        return {"seq": sent["seq"], "stream": stream, "blobs": stream, "producers": producers}
    return sent


_Reply = TypeVar("_Reply", bound="AppendReply")


# Not frozen (on every append's path: a frozen dataclass's __init__ costs ~0.15 µs a
# field); never changed after construction (a Commit's own fields are set once).
@dataclass(slots=True)
class AppendReply:
    """The script's reply: the last seq written (or recorded), the commit time in
    microseconds, whether it replayed an idempotency record, the call that wrote it, and
    for a pop the popped entry (raw ``[id, fields]``; ``None``: nothing popped, or a
    replay, which does not carry it). :class:`~redis_msglog._core.write.append.Commit` extends it
    with what the client made of it."""

    last_seq: int
    at_micros: int
    replayed: bool
    writer: str
    popped: Any = None

    @classmethod
    def parse(cls: type[_Reply], reply: Any) -> _Reply:
        if isinstance(reply, bytes | str):  # "<last_seq> <at> 0 <call>": most commits
            text = reply.decode() if isinstance(reply, bytes) else reply
            last, when, _, token = text.split(" ")
            return cls(int(last), int(when), False, token)
        last_seq, at, replayed, writer, *rest = reply
        text = writer.decode() if isinstance(writer, bytes) else str(writer)
        popped = rest[0] if rest and isinstance(rest[0], list) else None
        return cls(int(last_seq), int(at), bool(int(replayed)), text, popped)


ERRORS: dict[str, type[errors.MessageLogError]] = {
    "WRONGTYPE": errors.WrongTypeError,
    "OOM": errors.OutOfMemoryError,
    "MSGLOG_BADSEQ": errors.CorruptLogError,  # the counter is not a seq
    "MSGLOG_BEHIND": errors.CorruptLogError,  # the counter is behind the stream
    "MSGLOG_AHEAD": errors.CorruptLogError,  # the counter is ahead: an append would leave a gap
    "MSGLOG_FOREIGN": errors.CorruptLogError,  # the stream ends with an entry we did not write
    "MSGLOG_BADRECORD": errors.CorruptLogError,  # an idempotency record we did not write
    "MSGLOG_KEYREUSED": errors.IdempotencyConflictError,
    "MSGLOG_CONFLICT": errors.SeqConflictError,  # an expected_seq the log has moved past
    "MSGLOG_BADEDIT": errors.InvalidEditError,  # an edit of a seq that is not in the view
    "MSGLOG_TOOBIG": errors.RewriteTooLargeError,  # a trim or redact over max_rewrite_bytes
    "MSGLOG_BADVIEW": errors.CorruptLogError,  # a view hash we did not write
    "MSGLOG_STALE": errors.AppendInDoubtError,  # a producer's result no longer held
    "MSGLOG_BADBLOB": errors.InvalidMessageError,  # a blob reference the log does not hold
    "MSGLOG_ERASED": errors.ConversationErasedError,  # the tombstone of an erasure stands
    "MSGLOG_UNOWNED": errors.ConversationErasedError,  # a scoped log's owner record is gone
    "MSGLOG_SCOPE": errors.ScopeMismatchError,  # its owner record names another scope
    "MSGLOG_CURRENCY": errors.UsageCurrencyError,  # a cost in another currency than the totals'
    "MSGLOG_USAGEBIG": errors.UsageCurrencyError,  # totals past 2**53 - 1 (see _usage_refused)
    "MSGLOG_BADUSAGE": errors.CorruptLogError,  # usage totals we did not write
    # The draft scripts (lua/draft_*.lua, docs/drafts.md).
    "MSGLOG_DRAFTGONE": errors.DraftEndedError,  # no such draft: never opened, or forgotten
    "MSGLOG_DRAFTENDED": errors.DraftEndedError,  # claimed or ended (by whoever noticed)
    "MSGLOG_DRAFTBIG": errors.DraftTooLargeError,  # deltas over the draft's cap
    "MSGLOG_DRAFTS": errors.TooManyDraftsError,  # the conversation holds its most drafts
    "MSGLOG_DRAFTID": errors.InvalidArgumentError,  # a draft id taken by another writer
    "MSGLOG_DRAFTOWNER": errors.InvalidArgumentError,  # another writer's token
    "MSGLOG_BADDRAFT": errors.CorruptLogError,  # a draft state we did not write
    "MSGLOG_DRAFTSTATE": errors.CorruptLogError,  # finishing a draft nobody claimed
    "MSGLOG_DRAFTPOS": errors.CorruptLogError,  # two writers with one token
    "NOAUTH": errors.AuthenticationError,  # the server needs credentials
    "WRONGPASS": errors.AuthenticationError,  # wrong password, unknown or disabled user
    "NOPERM": errors.PermissionDeniedError,  # the user's ACL refuses a command or key
}
"""What each error code of the script (and of the server, for its keys) means."""


_SCRIPT_ACL_REFUSAL = "The user executing the script can't"  # Redis 7: ERR, not NOPERM
_DENIED: dict[type[errors.MessageLogError], str] = {
    errors.AuthenticationError: "Redis refused the client's login ({}): check the username "
    "and password it connects with. Nothing was written.",
    errors.PermissionDeniedError: "Redis's ACL refused it to the client's user ({}): see "
    "acl_rules() for what the user needs. Nothing was written.",
}


def _code_of(refused: Refused) -> str:
    if _SCRIPT_ACL_REFUSAL in refused.text:  # an ACL refusal of a call inside the script
        return "NOPERM"
    code = refused.code
    if code not in ERRORS:
        # Some servers (fakeredis) wrap a script's error reply: find its code inside.
        code = next((c for c in ERRORS if f" {c} " in f" {refused.text} "), code)
    return code


_AFTER: dict[type[errors.MessageLogError], str] = {
    errors.IdempotencyConflictError: " of messages. Nothing was written.",
    # The log's keys are not what this library writes.
    errors.CorruptLogError: ". Nothing was written; `msglog verify` lists what is wrong.",
}
"""What follows a refusal's words in the error's message, by the error's type."""


def _said(refused: Refused, code: str) -> str:
    """What a refusal says in words: its text without the script's error code (and
    without what wraps it on some servers, ``ERR Error running script ...``); the codes
    name the cases for the client, not for the person reading the error."""
    if not code.startswith("MSGLOG_"):
        return refused.text
    return refused.text.partition(code)[2].strip() or refused.text


def error_for(refused: Refused, keys: ConversationKeys) -> errors.MessageLogError:
    """This library's error for a refusal of the append script or of a read."""
    code = _code_of(refused)
    kind, said = ERRORS.get(code), _said(refused, code)
    if kind is errors.WrongTypeError:
        return kind(f"a key of {keys.stream!r}'s conversation: {refused.text}")
    if kind is errors.OutOfMemoryError:
        return kind(f"Redis refused the write (maxmemory reached): {refused.text}")
    if kind is errors.SeqConflictError:
        current = int(said.split(" ")[0])
        return errors.SeqConflictError(
            f"{said}: another writer appended first. Nothing was "
            "written; read what changed and decide again.",
            current_seq=current,
        )
    if kind is errors.InvalidEditError or kind is errors.RewriteTooLargeError:
        return _edit_refused(said)
    if kind is errors.InvalidMessageError:
        return _missing_blob(refused.text, keys)
    if kind is errors.AppendInDoubtError:
        return kind(
            f"{said}: an earlier try of this append may have committed, and the server "
            "no longer remembers (more than 64 calls of this process were in flight, "
            "or it was idle past the retry window). This try wrote nothing; read the log to "
            "find out whether the first did."
        )
    if kind in _TOLD_BY_CODE:
        return _TOLD_BY_CODE[kind](code, said, keys)
    if kind in _DENIED:
        return kind(_DENIED[kind].format(refused.text))
    if kind is not None:
        return kind(said + _AFTER.get(kind, ""))
    return errors.StorageError(f"Redis error: {refused.text}")


def _erased_or_scope_error(code: str, said: str, keys: ConversationKeys) -> errors.MessageLogError:
    """A write refused by the conversation's tombstone, or a scoped log's by its owner
    record."""
    if code == "MSGLOG_UNOWNED":
        return errors.ConversationErasedError(
            f"{keys.owner} is gone: the conversation was erased while this log object was "
            "writing, and taken again before its scoped writes could register it. Nothing "
            "was written."
        )
    if code == "MSGLOG_ERASED":
        return errors.ConversationErasedError(
            f"{keys.stream.removesuffix(':stream')} was erased (its tombstone {keys.seq} still "
            "stands): no append, edit or fork into it is accepted until the tombstone "
            "expires. Nothing was written."
        )
    return errors.ScopeMismatchError(
        f"the conversation belongs to scope {said!r}, not this log's: a conversation "
        "keeps the scope it was created with. Nothing was written.",
        recorded=tuple(said.split("/")),
    )


def _usage_refused(code: str, said: str, keys: ConversationKeys) -> errors.MessageLogError:
    """An append whose usage the totals cannot take: a cost in another currency
    (MSGLOG_CURRENCY <theirs>), or sums past what they hold exactly (MSGLOG_USAGEBIG)."""
    if code == "MSGLOG_USAGEBIG":
        return errors.InvalidMessageError(
            f"this append's usage would take {keys.usage} past {2**53 - 1} (tokens of one "
            "kind, or billionths of the cost's unit), more than totals hold. Nothing was "
            "written."
        )
    return errors.UsageCurrencyError(
        f"this append's cost is in another currency than {keys.usage}, which keeps costs "
        f"in {said}: a conversation keeps its costs in one currency (convert before "
        "writing). Nothing was written.",
        currencies=(said,),
    )


def _draft_refused(code: str, said: str, keys: ConversationKeys) -> errors.MessageLogError:
    """A draft script's refusal (lua/draft_*.lua)."""
    drafts = keys.drafts
    if code in ("MSGLOG_DRAFTGONE", "MSGLOG_DRAFTENDED"):
        outcome = said if code == "MSGLOG_DRAFTENDED" else "gone"
        return errors.DraftEndedError(
            f"the draft has ended ({outcome}): its lease lapsed and someone ended it, or it "
            f"was ended, erased or forgotten ({drafts}). Nothing was written.",
            outcome=outcome,
        )
    if code == "MSGLOG_DRAFTBIG":
        return errors.DraftTooLargeError(
            f"the draft holds {said} bytes of deltas, and this write would take it over its "
            "cap (the log's max_message_bytes). Nothing was written."
        )
    if code == "MSGLOG_DRAFTS":
        return errors.TooManyDraftsError(
            f"{drafts} holds {said.split(' ')[0]} drafts (open, or ended with deltas kept), "
            "as many as a conversation may. Nothing was written."
        )
    return errors.InvalidArgumentError(
        f"{said}: the draft belongs to another writer (a draft is written by the writer "
        "that opened it). Nothing was written."
    )


_TOLD_BY_CODE = {  # the errors whose words depend on the code (and the keys)
    errors.DraftEndedError: _draft_refused,
    errors.DraftTooLargeError: _draft_refused,
    errors.TooManyDraftsError: _draft_refused,
    errors.InvalidArgumentError: _draft_refused,
    errors.UsageCurrencyError: _usage_refused,
    errors.ConversationErasedError: _erased_or_scope_error,
    errors.ScopeMismatchError: _erased_or_scope_error,
}


def _edit_refused(said: str) -> errors.InvalidEditError:
    """An edit the script refused: MSGLOG_BADEDIT, or MSGLOG_TOOBIG (a rewrite over
    max_rewrite_bytes, which the text names)."""
    cap = re.search(r"more than (\d+) bytes of the stream \(max_rewrite_bytes", said)
    if cap is None:
        return errors.InvalidEditError(f"{said}. Nothing was written.")
    return errors.RewriteTooLargeError(
        f"{said}. Nothing was written: trim the log first, or raise max_rewrite_bytes.",
        cap=int(cap.group(1)),
    )


def _missing_blob(text: str, keys: ConversationKeys) -> errors.InvalidMessageError:
    """MSGLOG_BADBLOB <message> <part> <sha256>: a reference to bytes this conversation
    does not hold (a row read with ``blobs="refs"`` from another log, or a made-up digest)."""
    found = re.search(r"MSGLOG_BADBLOB (\d+) (\d+) ([0-9a-fA-F]+)", text)
    message, part, digest = found.groups() if found else ("0", "?", "?")
    return errors.InvalidMessageError(
        f"message {message}: content.{part} refers to blob {digest}, which "
        f"{keys.blobs} does not hold. Nothing was written. A reference is accepted only in "
        "the conversation holding its bytes (or with them in the same call): to copy a "
        'message to another conversation, append the row read with blobs="hydrate" (the '
        "default), whose as_message() carries the bytes (`msglog export` writes them "
        "inline too).",
        index=int(message),
    )
