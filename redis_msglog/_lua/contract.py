"""The contract of the append scripts, in one place: ``lua/append_plain.lua`` (the plain
append, nearly every call), ``lua/append_keyed.lua`` (a caller's idempotency key,
``expected_seq``) and ``lua/append.lua`` (every other form: edits, blobs, a lifetime,
retention, usage). Their ``KEYS`` and ``ARGV``
built from lists of names (each script binds the same names, in the same order, at its
top; a test checks they agree) and read back by name, their reply parsed into a typed
value; their error codes are mapped to this library's errors in :mod:`.refusals`."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any, Literal, TypeVar

from .._core.steps import Command
from .._core.stored.keys import ConversationKeys
from ..edits import EditCall
from .load import LuaScript, load_script
from .refusals import error_for

__all__ = ["AppendCall", "AppendReply", "error_for"]

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


PLAIN_KEY_NAMES = ("seq", "stream", "producers", "owner")
"""``KEYS`` of ``lua/append_plain.lua``, in order: ``producers`` only with a producer,
``owner`` (last) only with a scope."""
PLAIN_ARGV_NAMES = (
    "publish", "channel", "record_ttl_ms", "look_up", "call", "producer", "pseq", "floor",
    "scope",
)  # fmt: skip
"""The named ``ARGV`` of ``lua/append_plain.lua``, in order; the messages follow. The
first eight are ``append.lua``'s first eight."""
_PLAIN_ARGV_AT = {name: at for at, name in enumerate(PLAIN_ARGV_NAMES)}
KEYED_KEY_NAMES = ("seq", "stream", "producers", "record", "records", "owner")
"""``KEYS`` of ``lua/append_keyed.lua``, in order: ``producers`` only with a producer,
``record`` and ``records`` only with a caller's record (never both), ``owner`` (last)
only with a scope."""
KEYED_ARGV_NAMES = (*PLAIN_ARGV_NAMES, "fingerprint", "expected_seq")
"""The named ``ARGV`` of ``lua/append_keyed.lua``, in order: the plain script's, then the
two checks it adds; the messages follow."""
_KEYED_ARGV_AT = {name: at for at, name in enumerate(KEYED_ARGV_NAMES)}
PLAIN_SCRIPT = "append_plain.lua"
KEYED_SCRIPT = "append_keyed.lua"
GENERAL_SCRIPT = "append.lua"
APPEND_SCRIPTS = (PLAIN_SCRIPT, KEYED_SCRIPT, GENERAL_SCRIPT)
"""Every script an :class:`AppendCall` may run, from the leanest."""


def script() -> LuaScript:
    return load_script(GENERAL_SCRIPT)


@cache
def _script_ids(name: str) -> frozenset[Any]:
    """How a sent command names the script ``name``: its digest or its body, with and
    without its shebang line."""
    lua = load_script(name)
    bare = lua.without_shebang()
    return frozenset({lua.sha, lua.body, bare.sha, bare.body})


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

    @property
    def general(self) -> bool:
        """Whether only ``lua/append.lua`` runs this call: an edit, an attribute, a blob,
        a lifetime, retention by age or usage."""
        return bool(
            self.op
            or self.ttl_ms is not None
            or self.blobs
            or self.attrs
            or self.blob_refs
            or self.max_age_us is not None
            or self.usage
        )

    @property
    def plain(self) -> bool:
        """Whether this call is a plain append (``lua/append_plain.lua``): no caller's key,
        ``expected_seq``, nor anything :attr:`general`. A scope and a producer (or none)
        are settled when the log is made, and fit."""
        return self.record is None and self.expected_seq is None and not self.general

    @property
    def script_name(self) -> str:
        """The script that runs this call: ``lua/append_plain.lua``, then
        ``lua/append_keyed.lua`` (a caller's key, ``expected_seq``), else ``append.lua``."""
        return self.script_and_args()[0]

    def sent_key_names(self) -> tuple[str, ...]:
        """The ``KEYS`` this call sends to ``append.lua``, in order."""
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

    def _plain_keys_and_args(self) -> Command:
        """:meth:`keys_and_args` of a plain call: a literal tuple, ``PLAIN_ARGV_NAMES``."""
        keys: tuple[str, ...] = (self.keys.seq, self.keys.stream)
        if self.producer:
            keys += (self.keys.producers,)
        if self.scope:
            keys += (self.keys.owner,)
        return (
            len(keys),
            *keys,
            self.publish,
            self.keys.channel,
            self.record_ttl_ms if self.producer else "",
            "1" if self.look_up and self.producer else "0",  # else nothing to look up
            self.call,
            self.producer,
            self.pseq if self.producer else "",
            "" if self.floor is None else self.floor,
            self.scope,
            *self.messages,
        )

    def _keyed_keys_and_args(self) -> Command:
        """:meth:`keys_and_args` of a call of ``lua/append_keyed.lua``: ``KEYED_ARGV_NAMES``."""
        keys: tuple[str, ...] = (self.keys.seq, self.keys.stream)
        if self.producer:
            keys += (self.keys.producers,)
        elif self.record is not None:
            keys += (self.record, self.keys.records)
        if self.scope:
            keys += (self.keys.owner,)
        return (
            len(keys),
            *keys,
            *self._first_arguments(),
            self.scope,
            self.fingerprint if self.record is not None else "",
            "" if self.expected_seq is None else self.expected_seq,
            *self.messages,
        )

    def _first_arguments(self) -> tuple[Any, ...]:
        """The first eight ``ARGV`` of ``append_keyed.lua`` and ``append.lua`` (their
        names' order: a literal tuple)."""
        recorded = self.record is not None or bool(self.producer)
        return (
            self.publish,
            self.keys.channel,
            self.record_ttl_ms if recorded else "",
            "1" if self.look_up else "0",
            self.call,
            self.producer,
            self.pseq if self.producer else "",
            "" if self.floor is None else self.floor,
        )

    def script_and_args(self) -> tuple[str, Command]:
        """:attr:`script_name` and :meth:`keys_and_args`, telling the script once (on
        every append's path)."""
        if self.general:
            return GENERAL_SCRIPT, self._general_keys_and_args()
        if self.record is None and self.expected_seq is None:
            return PLAIN_SCRIPT, self._plain_keys_and_args()
        if self.record is None or not self.producer:  # (a key makes no producer's call)
            return KEYED_SCRIPT, self._keyed_keys_and_args()
        return GENERAL_SCRIPT, self._general_keys_and_args()

    def keys_and_args(self) -> Command:
        """``numkeys, KEYS..., ARGV...`` for ``EVALSHA``/``EVAL`` of :attr:`script_name`."""
        return self.script_and_args()[1]

    def _general_keys_and_args(self) -> Command:
        """:meth:`keys_and_args` of a call of ``append.lua``."""
        keys = self._sent_keys()
        argv = (
            *self._first_arguments(),
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
        """The keys of a sent ``EVALSHA``/``EVAL`` of an append script (or of a
        ``keys_and_args()``), by name, in the order sent (for tests and tools)."""
        head = 0 if isinstance(command[0], int) else 2  # no "EVALSHA", sha in front
        keys = command[head + 1 : head + 1 + int(command[head])]
        script = _script_of(command)
        if script != GENERAL_SCRIPT:
            named = dict(zip(PLAIN_KEY_NAMES[:2], keys, strict=False))
            rest = list(keys[2:])
            if AppendCall.argument(command, "producer"):
                named["producers"] = rest.pop(0)
            elif script == KEYED_SCRIPT and AppendCall.argument(command, "fingerprint"):
                named["record"], named["records"] = rest.pop(0), rest.pop(0)
            return {**named, **({"owner": rest[0]} if rest else {})}
        last: dict[str, Any] = {}
        if AppendCall.argument(command, "scope"):  # a scoped log's owner record, last
            keys, last = keys[:-1], {"owner": keys[-1]}
        if AppendCall.argument(command, "usage"):  # the usage totals, before it
            keys, last = keys[:-1], {"usage": keys[-1], **last}
        return {**_named_keys(keys), **last}

    @staticmethod
    def argument(command: Command, name: str) -> Any:
        """The argument ``name`` (one of ``ARGV_NAMES``) of a sent ``EVALSHA``/``EVAL`` of
        an append script (or of a ``keys_and_args()``), as sent; one the script does not
        take, its default."""
        head = 0 if isinstance(command[0], int) else 2
        base = head + 1 + int(command[head])
        script = _script_of(command)
        if script != GENERAL_SCRIPT:
            at = (_PLAIN_ARGV_AT if script == PLAIN_SCRIPT else _KEYED_ARGV_AT).get(name)
            return _DEFAULTS.get(name, "") if at is None else command[base + at]
        if _ARGV_AT[name] > _REST and command[base + _REST] == "":
            return _DEFAULTS[name]  # not sent: its default
        return command[base + _ARGV_AT[name]]


def _script_of(command: Command) -> str:
    """The script ``command`` runs: named by its head (``EVALSHA`` and the digest, or
    ``EVAL`` and the body). A bare ``keys_and_args()`` reads as ``append.lua``'s when its
    ninth argument is ``rest`` = ``"1"``, as that script's calls always send it, else as
    the plain script's (a bare call of the keyed script, or a plain one of a log whose
    scope is ``"1"``, reads wrong: send the head)."""
    if not isinstance(command[0], int):
        for name in (PLAIN_SCRIPT, KEYED_SCRIPT):
            if command[1] in _script_ids(name):
                return name
        return GENERAL_SCRIPT
    return GENERAL_SCRIPT if command[1 + int(command[0]) + _REST] == "1" else PLAIN_SCRIPT


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
