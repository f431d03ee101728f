"""Erasing one conversation (docs/lifecycle.md, "Erasing a conversation"): every key it
has deleted and its tombstone set by one atomic call of ``lua/erase.lua``, with its
idempotency records found by ``SCAN`` on the conversation's node before the call and
again after it (a record written just before the call is deleted then). A user refused
``SCAN`` (a tenant's ACL user: docs/security.md, "Tenants") erases every other key and
leaves the records to expire; the tombstone refuses their replay meanwhile.

The plan returns what the lead's ``Directory.erase`` needs to finish the job: the owner
record's fields as they were (the conversation's scope), to remove its index entries."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from ..._lua.load import ERASE_KEY_NAMES
from ...errors import InvalidArgumentError
from ..args import shown
from ..read.roundtrip import Reader
from ..steps import Command, Plan, Refused, StepFailure
from ..stored.entries import text
from ..stored.keys import ConversationKeys

DEFAULT_ERASED_FOR = timedelta(hours=24)
"""How long an erased conversation's tombstone stands by default."""

SCAN_COUNT = 1000
"""Keys a ``SCAN`` call looks at (on the conversation's node) while looking for its
idempotency records."""

RECORDS_PER_CALL = 1000
"""Idempotency records deleted by the script itself, and then by one ``UNLINK``: a
conversation with more has the rest deleted after the script (the tombstone already
refuses every replay of them), a thousand a round trip."""

_GLOB_SPECIAL = str.maketrans({c: "\\" + c for c in "*?[]\\"})


@dataclass(frozen=True, slots=True)
class Erasure:
    """What an erasure did: how many keys of the conversation it deleted (0: there was
    nothing, or it was erased already; its tombstone not counted), and the owner
    record's fields it deleted (the conversation's scope; empty when it had none). A
    caller keeping indexes of conversations (``Directory.erase``) removes the
    conversation's entries with ``owner``."""

    deleted: int
    owner: dict[str, str]


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

    def erase_plan(self, erased_for: timedelta = DEFAULT_ERASED_FOR) -> Plan[Erasure]:
        """Erase the conversation (see the module). Idempotent: safe to run again after a
        failure or a crash, and on an erased or never-created conversation (its tombstone
        is set again, for ``erased_for``)."""
        erased_for_ms = check_erased_for(erased_for)
        reader, keys = self._reader, self._reader.keys
        scanned = yield from self._records()
        records = scanned or []
        # In the order of ERASE_KEY_NAMES and ERASE_ARGV_NAMES, which erase.lua binds by name.
        named = conversation_keys(keys)
        every = (*named, *records[:RECORDS_PER_CALL])
        keys_and_args: Command = (len(every), *every, erased_for_ms)
        try:
            reply = yield from reader.runner.run_script("erase.lua", keys_and_args, self._send)
        except StepFailure as failure:
            raise reader.error_for(failure) from (failure.origin or failure)
        deleted, flat = reply
        # A record written between the SCAN and the script (its append committed before
        # the erasure, so its entries are gone): no append writes one past the tombstone.
        # And the records beyond the script's share.
        stragglers = ((yield from self._records()) or []) if scanned is not None else []
        for start in range(0, len(stragglers), RECORDS_PER_CALL):
            chunk = stragglers[start : start + RECORDS_PER_CALL]
            (unlinked,) = yield from reader.read(("UNLINK", *chunk))
            deleted = int(deleted) + int(unlinked)
        owner = _fields(flat)
        reader.edited = False  # the log is empty: reads start over on the plain path
        return Erasure(int(deleted), owner)

    def _send(self, command: Command) -> Plan[Any]:
        # Idempotent, so sent like a read: re-sent while the server cannot take it.
        (reply,) = yield from self._reader.read_raw((command,), patient=True)
        return reply

    def _records(self) -> Plan[list[Any] | None]:
        """The conversation's idempotency records: ``SCAN MATCH`` on its node (the one
        owning its hash slot, on a cluster), a page at a time; ``None`` when the user may
        not ``SCAN`` (a tenant: the records expire within the idempotency window)."""
        pattern, cursor, found = record_pattern(self._reader.keys), "0", set()
        while True:
            command = ("SCAN", cursor, "MATCH", pattern, "COUNT", SCAN_COUNT)
            try:
                ((cursor_raw, keys),) = yield from self._reader.read_raw((command,), patient=True)
            except StepFailure as failure:
                if isinstance(failure, Refused) and failure.code == "NOPERM":
                    return None
                raise self._reader.error_for(failure) from (failure.origin or failure)
            found.update(keys)  # as sent back: SCAN may return a key twice
            cursor = text(cursor_raw)
            if cursor == "0":
                return sorted(found)


def _fields(flat: Any) -> dict[str, str]:
    """A hash's fields from a flat ``[name, value, ...]`` (or a mapping) reply."""
    if isinstance(flat, dict):
        return {text(k): text(v) for k, v in flat.items()}
    return {text(flat[i]): text(flat[i + 1]) for i in range(0, len(flat) - 1, 2)}
