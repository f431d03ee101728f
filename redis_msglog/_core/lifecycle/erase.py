"""Erasing one conversation (docs/lifecycle.md, "Erasing a conversation"): every key it
has deleted and its tombstone set by one atomic call of ``lua/erase.lua``. Its
idempotency records are named by its ``records`` sorted set (append.lua adds each record
it writes), read before the call; the script hands back any record added since, unlinked
right after it. No ``SCAN``: an erasure costs its own conversation's keys, whatever the
keyspace. Records written by versions before that set existed are found only with
``scan_records`` (a ``SCAN`` of the conversation's node, before the call and after it).

An erasure on behalf of a scope (``Directory.erase``) passes the scope: the script then
erases only a conversation whose owner record names that scope or one below it (the
index listing it is tenant-writable input, never authority).

The plan returns what the lead's ``Directory.erase`` needs to finish the job: the owner
record's fields as they were (the conversation's scope), to remove its index entries."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal

from ..._lua.load import ERASE_KEY_NAMES
from ...errors import InvalidArgumentError
from ..args import shown
from ..drafts.plans import DRAFT_ID
from ..read.roundtrip import Reader
from ..steps import Command, Plan, StepFailure
from ..stored.entries import hash_fields, text
from ..stored.keys import ConversationKeys
from .scope import Scope, joined

DEFAULT_ERASED_FOR = timedelta(hours=24)
"""How long an erased conversation's tombstone stands by default."""

SCAN_COUNT = 1000
"""Keys a ``SCAN`` call looks at (on the conversation's node) while looking for its
idempotency records of the earlier form (``scan_records``)."""

RECORDS_PER_CALL = 1000
"""Idempotency records deleted by the script itself, and then by one ``UNLINK``: a
conversation with more has the rest deleted after the script (the tombstone already
refuses every replay of them), a thousand a round trip."""

_GLOB_SPECIAL = str.maketrans({c: "\\" + c for c in "*?[]\\"})


Outcome = Literal["erased", "absent", "outside"]


@dataclass(frozen=True, slots=True)
class Erasure:
    """What an erasure did: how many keys of the conversation it deleted (0: there was
    nothing, or it was erased already; its tombstone not counted), and the owner
    record's fields it deleted (the conversation's scope; empty when it had none). A
    caller keeping indexes of conversations (``Directory.erase``) removes the
    conversation's entries with ``owner``.

    ``outcome``, for an erasure on behalf of a scope: ``"erased"``; ``"absent"`` (no owner
    record and no data: erased already; nothing written); ``"outside"`` (its owner
    record names another scope, or it has data and no owner record; nothing written,
    ``owner`` holds what the record says)."""

    deleted: int
    owner: dict[str, str]
    outcome: Outcome = "erased"


def check_erased_for(erased_for: object) -> int:
    """``erased_for`` in milliseconds: a :class:`~datetime.timedelta` of at least 1 s,
    else :class:`~redis_msglog.InvalidArgumentError`."""
    if not isinstance(erased_for, timedelta) or erased_for < timedelta(seconds=1):
        raise InvalidArgumentError(
            f"erased_for must be a timedelta of at least 1 s, got {shown(erased_for)}"
        )
    return erased_for // timedelta(milliseconds=1)


def conversation_keys(keys: ConversationKeys) -> list[str]:
    """Every key of the conversation (not its pub/sub channel), the counter and the owner
    record first (``ERASE_KEY_NAMES``), then the rest in field order: a key added to
    :class:`~redis_msglog.ConversationKeys` later is erased too."""
    named = [getattr(keys, name) for name in ERASE_KEY_NAMES]
    rest = [
        getattr(keys, field.name)
        for field in dataclasses.fields(keys)
        if field.name != "channel" and field.name not in ERASE_KEY_NAMES
    ]
    return named + rest


def record_pattern(keys: ConversationKeys) -> str:
    """The ``SCAN MATCH`` pattern of the conversation's idempotency records."""
    return keys.idempotency_record("").translate(_GLOB_SPECIAL) + "*"


class Eraser:
    """The erase plan of one log."""

    def __init__(self, reader: Reader) -> None:
        self._reader = reader

    def erase_plan(
        self,
        erased_for: timedelta = DEFAULT_ERASED_FOR,
        scope: Scope | None = None,
        *,
        scan_records: bool = False,
    ) -> Plan[Erasure]:
        """Erase the conversation (see the module); with ``scope``, only if its owner
        record names that scope or one below it. Idempotent: safe to run again after a
        failure or a crash, and on an erased or never-created conversation (its tombstone
        is set again, for ``erased_for``; not on behalf of a scope)."""
        erased_for_ms = check_erased_for(erased_for)
        reader, keys = self._reader, self._reader.keys
        raw_records, raw_drafts = yield from reader.read(
            ("ZRANGE", keys.records, 0, -1), ("HKEYS", keys.drafts)
        )
        records = sorted({text(r) for r in raw_records})
        # The drafts' delta streams, named by the drafts hash (ids checked: the hash is
        # the conversation's own data, a key name is built only from an id of ours). A
        # draft opened after this read dies with the hash: its stream expires unread.
        records += [keys.draft(d) for d in map(text, raw_drafts) if DRAFT_ID.match(d)]
        if scan_records:
            records = sorted({*records, *(yield from self._scanned())})
        # In the order of ERASE_KEY_NAMES and ERASE_ARGV_NAMES, which erase.lua binds by name.
        named = conversation_keys(keys)
        every = (*named, *records[:RECORDS_PER_CALL])
        acting = "" if scope is None else joined(scope)
        keys_and_args: Command = (len(every), *every, erased_for_ms, acting)
        try:
            reply = yield from reader.runner.run_script("erase.lua", keys_and_args, self._send)
        except StepFailure as failure:
            raise reader.error_for(failure) from (failure.origin or failure)
        deleted, flat, outcome, stragglers = reply
        owner, outcome = hash_fields(flat), text(outcome)
        if outcome != "erased":
            return Erasure(0, owner, "absent" if outcome == "absent" else "outside")
        # Records written between the read and the script (their appends committed before
        # the erasure, so their entries are gone: no append writes one past the
        # tombstone), and those beyond the script's share.
        rest = {text(r) for r in stragglers} | set(records[RECORDS_PER_CALL:])
        if scan_records:
            rest |= set((yield from self._scanned())) - set(records)
        deleted = int(deleted) + (yield from self._unlink(sorted(rest)))
        reader.edited = False  # the log is empty: reads start over on the plain path
        return Erasure(deleted, owner)

    def _unlink(self, keys: list[str]) -> Plan[int]:
        unlinked = 0
        for start in range(0, len(keys), RECORDS_PER_CALL):
            chunk = keys[start : start + RECORDS_PER_CALL]
            (count,) = yield from self._reader.read(("UNLINK", *chunk))
            unlinked += int(count)
        return unlinked

    def _send(self, command: Command) -> Plan[Any]:
        # Idempotent, so sent like a read: re-sent while the server cannot take it.
        (reply,) = yield from self._reader.read_raw((command,), patient=True)
        return reply

    def _scanned(self) -> Plan[list[str]]:
        """The conversation's idempotency records, found by ``SCAN MATCH`` on its node (the
        one owning its hash slot, on a cluster), a page at a time: records written before
        the ``records`` set existed."""
        pattern, cursor = record_pattern(self._reader.keys), "0"
        found: set[str] = set()
        while True:
            ((cursor_raw, keys),) = yield from self._reader.read(
                ("SCAN", cursor, "MATCH", pattern, "COUNT", SCAN_COUNT)
            )
            found.update(text(k) for k in keys)  # SCAN may return a key twice
            cursor = text(cursor_raw)
            if cursor == "0":
                return sorted(found)
