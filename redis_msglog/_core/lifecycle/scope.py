"""Scopes: who a conversation belongs to, and the directory indexes that list a scope's
conversations without ``SCAN`` (docs/lifecycle.md, "Scopes" and "Listing a scope's
conversations"). I/O-free: the plans here run in a log's shell (its registration, in
the append preflight) and in :class:`~redis_msglog.Directory`.

Layout, for a prefix ``msglog`` and scope ``("acme", "user-42")``::

    msglog:{conv}:owner                  hash {scope: "acme/user-42", created: "<µs>"}
                                         (a key of the conversation, in its slot)
    msglog:{acme:}:dir:acme              sorted set: every conversation of "acme" and of
                                         its sub-scopes, score 0, member
                                         "<20-digit inverted created µs>|<scope>|<conv id>"
    msglog:{acme:}:dir:acme/user-42      the same for "acme/user-42" and below
    msglog:{acme:}:erased:acme/user-42   a scope's tombstone (written by an erasure of the
                                         scope): while it stands, no conversation can be
                                         registered in that scope or below

Every index key of one top-level scope carries the hash tag ``{<top>:}``: one slot, so
one script updates all of a conversation's indexes atomically, and the ACL pattern of a
tenant's conversations, ``~<prefix>:{<tenant>:*``, covers its indexes too.

Registration (once per log object given a scope, before its first write):
:func:`register_plan`, two idempotent scripts: ``scope_owner.lua`` in the
conversation's slot, then ``scope_index.lua`` in the index slot.

The interface for an erasure of a scope (``Directory.erase``): page through
:func:`list_plan` (or ``AsyncDirectory.walk``) for every conversation of a scope and its
sub-scopes, and :func:`unindex_plan` (``AsyncDirectory.unindex``) to remove one
conversation's entries; :meth:`ScopeKeys.tombstone` names the scope's tombstone key.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from ... import errors
from ..._lua import contract as script
from ..._lua.load import load_script
from ..._lua.run import ScriptRunner
from ..args import check_int, shown
from ..retry import RetryPolicy
from ..steps import Command, NotSent, Pause, Plan, Read, Refused, StepFailure
from ..stored.entries import parse_seq_counter, text
from ..stored.keys import ConversationKeys

MAX_DEPTH = 8
MAX_PART_LENGTH = 200
MAX_LIST_LIMIT = 1000
OWNER_SCRIPT = "scope_owner.lua"
INDEX_SCRIPT = "scope_index.lua"
OWNER_KEY_NAMES = ("seq", "stream", "owner")
"""``KEYS`` of ``lua/scope_owner.lua``, in order."""
OWNER_ARGV_NAMES = ("scope",)
"""``ARGV`` of ``lua/scope_owner.lua``, in order."""
INDEX_ARGV_NAMES = ("mode", "member", "depth")
"""``ARGV`` of ``lua/scope_index.lua``, in order (its keys: the indexes, then the
tombstones, of the scope's prefixes)."""

_FORBIDDEN = frozenset("/:|{}*?[]\\")
_INVERT = 10**20 - 1  # members sort newest-created first
_LAST_MICROS = 253_402_300_799_999_999  # 9999-12-31T23:59:59.999999Z
_MEMBER = re.compile(r"([0-9]{20})\|([^|]+)\|(.+)", re.S)

Scope = tuple[str, ...]


def check_scope(scope: object) -> Scope:
    """``scope`` as a tuple of parts, outermost first, or
    :class:`~redis_msglog.InvalidArgumentError`: 1 to 8 non-empty strings of at most 200
    characters, none holding ``/ : | { } * ? [ ] \\``, whitespace or a control character."""
    if isinstance(scope, str) or not isinstance(scope, (tuple, list)):
        raise errors.InvalidArgumentError(
            f"scope must be a tuple of strings, outermost first (('acme', 'user-42')), "
            f"got {shown(scope)}"
        )
    if not 1 <= len(scope) <= MAX_DEPTH:
        raise errors.InvalidArgumentError(
            f"scope must have 1 to {MAX_DEPTH} parts, got {len(scope)}"
        )
    for part in scope:
        if not isinstance(part, str) or not part or len(part) > MAX_PART_LENGTH:
            raise errors.InvalidArgumentError(
                f"each part of a scope must be a non-empty string of at most "
                f"{MAX_PART_LENGTH} characters, got {shown(part)}"
            )
        bad = next((c for c in part if c in _FORBIDDEN or not c.isprintable() or c.isspace()), None)
        if bad is not None:
            raise errors.InvalidArgumentError(
                f"scope part {part!r} holds {bad!r}: a part may not hold '/', ':', '|', "
                "braces, glob characters (* ? [ ] \\), whitespace or control characters"
            )
    return tuple(scope)


def scope_of_text(value: str) -> Scope:
    """A scope written as the CLI writes it (``acme/user-42``), checked."""
    if not isinstance(value, str):
        raise errors.InvalidArgumentError(f"a scope's text must be a str, got {shown(value)}")
    return check_scope(tuple(value.split("/")))


def joined(scope: Scope) -> str:
    """The scope as it is stored and written by the CLI: its parts joined by ``/``."""
    return "/".join(scope)


@dataclass(frozen=True, slots=True)
class ScopeKeys:
    """The names of a scope's index and tombstone keys (and of its prefixes')."""

    prefix: str
    scope: Scope

    @classmethod
    def build(cls, prefix: str, scope: object) -> ScopeKeys:
        """Names for ``scope`` under ``prefix``; validates both."""
        ConversationKeys.build(prefix, "x")  # validates the prefix
        return cls(prefix, check_scope(scope))

    def _base(self) -> str:
        return f"{self.prefix}:{{{self.scope[0]}:}}"

    def index(self, depth: int | None = None) -> str:
        """The index of the scope's first ``depth`` parts (default: all of them)."""
        return f"{self._base()}:dir:{joined(self.scope[:depth])}"

    def tombstone(self, depth: int | None = None) -> str:
        """The tombstone of the scope's first ``depth`` parts (default: all of them): a
        key whose existence refuses every registration in that scope and below."""
        return f"{self._base()}:erased:{joined(self.scope[:depth])}"

    def all_indexes(self) -> list[str]:
        return [self.index(depth) for depth in range(1, len(self.scope) + 1)]

    def all_tombstones(self) -> list[str]:
        return [self.tombstone(depth) for depth in range(1, len(self.scope) + 1)]


@dataclass(frozen=True, slots=True)
class ScopedConversation:
    """One conversation of a scope's listing."""

    conversation: str
    scope: Scope  # the scope it was created with (the listed one, or below it)
    created_at: datetime  # when it was registered (the server's clock, UTC)
    last_seq: int  # its last seq when listed (0: nothing written yet, or expired)

    @property
    def created_micros(self) -> int:
        """``created_at`` in µs since the epoch, exactly as stored."""
        return micros_of(self.created_at)


@dataclass(frozen=True, slots=True)
class SkippedEntry:
    """An index entry a listing or an erasure of a scope skipped: its conversation's owner
    record does not say what the entry says (an entry written by hand, or by a tenant
    allowed to write its own indexes), so nothing of the conversation was shown or done.
    ``listed``: the scope the entry claims; ``recorded``: the owner record's scope
    (``None``: the conversation has no owner record)."""

    conversation: str
    listed: Scope
    recorded: Scope | None

    @property
    def reason(self) -> str:
        """Why it was skipped, in words."""
        if self.recorded is None:
            return "it has no owner record (it was not created in this scope)"
        return f"its owner record names scope {joined(self.recorded)!r}"


@dataclass(frozen=True, slots=True)
class ConversationPage:
    """A page of a scope's listing: newest-created first; ``cursor`` fetches the next
    page (``None``: this is the last). ``skipped``: the entries of this page whose
    conversation's owner record disagrees with them, not listed."""

    conversations: list[ScopedConversation]
    cursor: str | None
    skipped: list[SkippedEntry] = field(default_factory=list)


class ScopeErasure(list[str]):
    """What ``Directory.erase`` did: the list of the conversation ids it erased (a plain
    list of them, as before), and ``skipped``: the index entries it did not act on,
    because the conversation's owner record does not put it in the scope (see
    :class:`SkippedEntry`). Empty on a scope no one tampered with."""

    def __init__(self, erased: Sequence[str] = (), skipped: Sequence[SkippedEntry] = ()) -> None:
        super().__init__(erased)
        self.skipped: list[SkippedEntry] = list(skipped)


def member(created_micros: int, scope: Scope, conversation: str) -> str:
    """A conversation's member in its scopes' indexes."""
    return f"{_INVERT - created_micros:020d}|{joined(scope)}|{conversation}"


def parse_member(raw: bytes | str) -> tuple[int, Scope, str]:
    """``(created µs, scope, conversation)`` of an index member."""
    found = _MEMBER.fullmatch(text(raw))
    if found is None:
        raise errors.CorruptLogError(f"an index member this library did not write: {raw!r}")
    inverted, scope, conversation = found.groups()
    created = _INVERT - int(inverted)
    if created > _LAST_MICROS:  # beyond year 9999: not a time the server gave
        raise errors.CorruptLogError(f"an index member this library did not write: {raw!r}")
    return created, tuple(scope.split("/")), conversation


def encode_cursor(raw_member: str) -> str:
    return base64.urlsafe_b64encode(raw_member.encode()).decode().rstrip("=")


def decode_cursor(cursor: object) -> str:
    """The member a cursor starts after, or InvalidArgumentError."""
    if not isinstance(cursor, str) or not cursor or len(cursor) > 4096:
        raise errors.InvalidArgumentError(f"cursor must be a page's cursor, got {shown(cursor)}")
    try:
        decoded = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
    except (binascii.Error, ValueError):
        decoded = ""
    if not _MEMBER.fullmatch(decoded) or encode_cursor(decoded) != cursor:
        raise errors.InvalidArgumentError(f"cursor is not a page's cursor: {cursor!r}")
    return decoded


class ScopeScripts(ScriptRunner):
    """The two scope scripts, run like the log's (EVALSHA, EVAL, no shebang)."""

    __slots__ = ()

    def __init__(self) -> None:
        self.scripts = {name: load_script(name) for name in (OWNER_SCRIPT, INDEX_SCRIPT)}


class Scoped:
    """A scope's plans, for one prefix: what the log's registration and the directory run."""

    def __init__(self, prefix: str, retry: RetryPolicy, clock: Callable[[], float]) -> None:
        ConversationKeys.build(prefix, "x")  # validates the prefix
        self.prefix = prefix
        self.retry = retry
        self.clock = clock
        self.runner = ScopeScripts()

    def read(self, commands: tuple[Command, ...], route: str | None) -> Plan[list[Any]]:
        """One round trip (see :meth:`read_raw`); a refusal raises this library's error."""
        try:
            return (yield from self.read_raw(commands, route))
        except Refused as refused:
            raise error_for(refused, route) from (refused.origin or refused)

    def read_raw(self, commands: tuple[Command, ...], route: str | None) -> Plan[list[Any]]:
        """One round trip, re-sent under the retry policy while it cannot be served (every
        command sent here is idempotent); unavailable for good raises this library's
        error, a refusal comes back as :class:`Refused`."""
        started, tries = self.clock(), 0
        while True:
            tries += 1
            try:
                replies: list[Any] = yield Read(commands, route)
                return replies
            except NotSent as failure:
                delay = self.retry.pause_before(tries, self.clock() - started)
                if delay is None:
                    raise error_for(failure, None) from (failure.origin or failure)
            yield Pause(delay)

    def _script(self, name: str, keys_and_args: Command, route: str | None) -> Plan[Any]:
        def send(command: Command) -> Plan[Any]:
            (reply,) = yield from self.read_raw((command,), route)
            return reply

        try:
            return (yield from self.runner.run_script(name, keys_and_args, send))
        except Refused as refused:
            raise error_for(refused, route) from (refused.origin or refused)

    def register_plan(
        self, conversation: str, scope: Scope, *, route_owner: str | None = None
    ) -> Plan[int]:
        """Record ``conversation``'s scope (or check the one recorded) and add it to the
        indexes of the scope and of its prefixes; return its created time (µs).
        Both steps are idempotent: re-sending either after a lost reply is safe, and a
        crash between them leaves an owner record without index entries, which running
        this again (any later log object of the conversation) repairs.
        ``route_owner``: the key whose node serves the conversation (default: its seq)."""
        keys = ConversationKeys.build(self.prefix, conversation)
        created_raw = yield from self._script(
            OWNER_SCRIPT, (3, keys.seq, keys.stream, keys.owner, joined(scope)),
            route_owner,
        )  # fmt: skip
        created = int(text(created_raw))
        try:
            yield from self._index("add", conversation, scope, created)
        except errors.ScopeErasedError:
            # Refused by the scope's tombstone: the owner record just made goes too, so an
            # erased scope keeps nothing of it (a conversation registered before the
            # tombstone has its data and is listed: the erasure takes it, owner or not).
            yield from self.read((("UNLINK", keys.owner),), keys.seq)
            raise
        return created

    def unindex_plan(self, conversation: str, scope: Scope, created_micros: int) -> Plan[int]:
        """Remove ``conversation``'s entries from the indexes of ``scope`` and its
        prefixes (idempotent); return how many indexes held it."""
        return (yield from self._index("remove", conversation, scope, created_micros))

    def _index(self, mode: str, conversation: str, scope: Scope, created: int) -> Plan[int]:
        ConversationKeys.build(self.prefix, conversation)  # validates the id
        names = ScopeKeys(self.prefix, scope)
        keys = [*names.all_indexes(), *names.all_tombstones()]
        args = (mode, member(created, scope, conversation), len(scope))
        changed = yield from self._script(INDEX_SCRIPT, (len(keys), *keys, *args), names.index(1))
        return int(changed)

    def unindex_owner_plan(self, conversation: str, owner: dict[str, str]) -> Plan[int]:
        """:meth:`unindex_plan` for the owner record an erasure deleted (its ``scope`` and
        ``created`` fields; nothing to do without a scope); return how many indexes held
        the conversation."""
        if not owner.get("scope") or not owner.get("created", "").isdigit():
            return 0
        scope = check_scope(tuple(owner["scope"].split("/")))
        return (yield from self.unindex_plan(conversation, scope, int(owner["created"])))

    def tombstone_plan(self, scope: Scope, erased_for_ms: int) -> Plan[None]:
        """Set ``scope``'s tombstone for ``erased_for_ms``: while it stands, no log can
        register a conversation in the scope or below (``lua/scope_index.lua`` checks it
        atomically with the index), so an erasure of the scope is not outrun."""
        key = ScopeKeys(self.prefix, scope).tombstone()
        yield from self.read((("SET", key, "1", "PX", erased_for_ms),), key)

    def erased_plan(self, scope: Scope) -> Plan[bool]:
        """Whether a tombstone of ``scope``, or of a prefix of it, stands (one ``EXISTS``
        in the scope's slot)."""
        names = ScopeKeys(self.prefix, scope)
        (found,) = yield from self.read((("EXISTS", *names.all_tombstones()),), names.index(1))
        return int(found) > 0

    def owner_plan(self, conversation: str) -> Plan[tuple[Scope, int] | None]:
        """The scope and created time (µs) recorded for ``conversation``, if any."""
        keys = ConversationKeys.build(self.prefix, conversation)
        (scope, created) = (yield from self.read((("HMGET", keys.owner, "scope", "created"),),
                                                 keys.seq))[0]  # fmt: skip
        if scope is None:
            return None
        if created is None or not text(created).isdigit():
            raise errors.CorruptLogError(f"{keys.owner} has no created time")
        return tuple(text(scope).split("/")), int(text(created))

    def list_plan(
        self, scope: Scope, limit: int, cursor: str | None, *, erased: bool = False
    ) -> Plan[ConversationPage]:
        """A page of the conversations of ``scope`` and below, newest-created first: one
        round trip for the index (``ZRANGE ... BYLEX``, after the cursor's member:
        exclusive, so concurrent registrations never shift a page), one pipelined
        round trip for their last seqs and owner records (on a cluster, one per node
        holding them, sent together). An entry is listed only when the conversation's
        owner record names the entry's scope and created time (the index is
        tenant-writable: an entry alone proves nothing); any other goes to the page's
        ``skipped``. A conversation whose counter holds an erasure's tombstone (no owner
        record left) is left out, unless ``erased`` (an erasure resumed after a crash
        must find it again): then it is listed with ``last_seq`` 0, as is one with no
        owner record and no counter (the erasure's script tells the two apart)."""
        check_int("limit", limit, lowest=1, highest=MAX_LIST_LIMIT)
        start = "-" if cursor is None else "(" + decode_cursor(cursor)
        index = ScopeKeys(self.prefix, scope).index()
        command = ("ZRANGE", index, start, "+", "BYLEX", "LIMIT", 0, limit + 1)
        (raw,) = yield from self.read((command,), index)
        members = [text(m) for m in raw]
        more = len(members) > limit
        members = members[:limit]
        parsed = [parse_member(m) for m in members]
        reads: list[Command] = []
        for _, _, conversation in parsed:
            keys = ConversationKeys.build(self.prefix, conversation)
            reads += [("GET", keys.seq), ("HMGET", keys.owner, "scope", "created")]
        replies = (yield from self.read(tuple(reads), None)) if reads else []
        listed, skipped = [], []
        for at, (created, found_scope, conversation) in enumerate(parsed):
            owner, owned_at = replies[2 * at + 1]
            recorded = None if owner is None else tuple(text(owner).split("/"))
            agrees = (
                recorded == found_scope and owned_at is not None and text(owned_at) == str(created)
            )
            last_seq = _last_seq(replies[2 * at])
            if not within(found_scope, scope) or (recorded is not None and not agrees):
                skipped.append(SkippedEntry(conversation, found_scope, recorded))
            elif last_seq is None:  # an erasure's tombstone: its entries about to go
                if erased:
                    listed.append(
                        ScopedConversation(conversation, found_scope, time_of(created), 0)
                    )
            elif recorded is None and not (erased and last_seq == 0):
                # A counter and no owner record: not a conversation of this scope. (With
                # neither, an erasure's script tells "erased already" from "not ours".)
                skipped.append(SkippedEntry(conversation, found_scope, recorded))
            else:
                listed.append(ScopedConversation(
                    conversation, found_scope, time_of(created), last_seq
                ))  # fmt: skip
        return ConversationPage(listed, encode_cursor(members[-1]) if more else None, skipped)


def within(inner: Scope, outer: Scope) -> bool:
    """Whether ``inner`` is ``outer`` or a scope below it."""
    return inner[: len(outer)] == outer


def index_problems(conversation: str, scope: Scope, missing: Sequence[str]) -> list[str]:
    """For ``verify``: the problem of a scoped conversation missing from ``missing``, the
    indexes of its scope (or prefixes of it) that should hold it."""
    if not missing:
        return []
    return [
        f"scoped {joined(scope)!r} but missing from index {', '.join(missing)} (a crash "
        "between its registration's two steps): repair with `msglog verify --repair` or "
        f"Directory(client).register({conversation!r}, {scope!r})"
    ]


def _last_seq(raw: Any) -> int | None:
    if raw is None:
        return 0  # registered, nothing written yet (or expired under a ttl)
    value = parse_seq_counter(raw)
    if value is None and text(raw) == "erased":
        return None
    if value is None:
        raise errors.CorruptLogError(f"a seq counter holds {text(raw)!r}, not a seq")
    return value


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def time_of(micros: int) -> datetime:
    """A created time (µs since the epoch) as an aware UTC datetime, exactly."""
    return _EPOCH + timedelta(microseconds=micros)


def micros_of(at: datetime) -> int:
    """The inverse of :func:`time_of`."""
    return (at - _EPOCH) // timedelta(microseconds=1)


_CODE = re.compile(r"\b(MSGLOG_[A-Z_]+)\b ?(\S*)")


def error_for(failure: StepFailure, route: str | None) -> errors.MessageLogError:
    """This library's error for a failed scope script or read."""
    if not isinstance(failure, Refused):
        return errors.ServerUnavailableError(f"Redis is unavailable: {failure.text}")
    found = _CODE.search(failure.text)
    code, argument = found.groups() if found else ("", "")
    if code == "MSGLOG_SCOPE":
        recorded = tuple(argument.split("/"))
        return errors.ScopeMismatchError(
            f"the conversation belongs to scope {argument!r}, not the one this log was "
            "given: a conversation keeps the scope it was created with. Nothing was written.",
            recorded=recorded,
        )
    if code == "MSGLOG_UNSCOPED":
        return errors.ScopeMismatchError(
            f"{argument} was created without a scope; it cannot be given one now. "
            "Nothing was written."
        )
    if code == "MSGLOG_ERASED":
        return errors.ConversationErasedError(
            "the conversation was erased and its tombstone still stands. Nothing was written."
        )
    if code == "MSGLOG_SCOPE_ERASED":
        return errors.ScopeErasedError(
            f"its scope ({argument}) was erased and its tombstone still stands. Nothing was "
            "written."
        )
    if code == "MSGLOG_BADOWNER":
        return errors.CorruptLogError(f"{argument}: an owner record this library did not write")
    keys = ConversationKeys.build("msglog", route or "?")
    return script.error_for(failure, keys)
