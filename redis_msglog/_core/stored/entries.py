"""The stored-entry layout, parsed in one place: stream entries as the append script
writes them (ID ``<seq>-<at>``, one field ``msg`` or ``edit``) and as earlier versions
did (ID ``<seq>-0``, fields ``at`` and ``msg``/``edit``), the seq counter's value, and
an entry's stored form for the warm-read cache's check. The readers, the follower, the
cache and ``msglog verify`` all read entries through here."""

from __future__ import annotations

import hashlib
from itertools import repeat
from operator import itemgetter, methodcaller
from typing import Any

from ... import errors
from ...edits import EditEntry, Entry
from ...models import StoredMessage
from .codec import decode_edit, decode_entry
from .rows import decode_page


class Trimmed(Exception):
    """A trim committed in the middle of a read (the log's first seq moved): the read is
    made again (internal: never leaves the read plans)."""


class EditsPresent(Exception):
    """Raised inside the core when a fast read of an edit-free log meets an edit: the
    log has edits after all, and the read is made again through the view script."""


_BYTES = (b"at", b"msg", b"-")
_ZERO: dict[Any, Any] = {"-": "0", b"-": b"0"}
_ZEROS = ("0", b"0")  # the second part of an earlier version's entry ID
_first, _second, _third, _fourth = (itemgetter(i) for i in range(4))
_next_to_last, _last = itemgetter(-2), itemgetter(-1)
_EDIT_FIELDS = frozenset(("edit", b"edit"))
_AT_FIELD, _MSG_FIELD = frozenset(("at", b"at")), frozenset(("msg", b"msg"))
_MSG = ("msg", b"msg")


class StoredEntries:
    """The entries of one stream, decoded into rows (errors name the stream)."""

    __slots__ = ("stream",)

    def __init__(self, stream: str) -> None:
        self.stream = stream

    def decode_entries(self, entries: list[Any]) -> list[StoredMessage]:
        """Rows of a raw ``XRANGE``/``XREVRANGE`` reply (``[id, [field, value, ...]]``);
        an entry the library did not write raises :class:`~redis_msglog.CorruptEntryError`.

        An entry is ID ``<seq>-<at>`` (the commit time, in microseconds) with one field,
        ``msg``; or, written by earlier versions, ID ``<seq>-0`` with fields ``at`` and
        ``msg``."""
        if not entries:
            return []
        # One check per page: the client returns all bytes or all str.
        at_key, msg_key, sep = ("at", "msg", "-") if isinstance(entries[0][0], str) else _BYTES
        # The common case, a page of entries as the append script writes them, is checked
        # and decoded without a Python loop per entry (map/itemgetter run in C), then
        # validated in one call; anything else (a page mixing both formats, edits, foreign
        # entries) takes the row-by-row path below, which names the first entry that is not
        # a message.
        ids = list(map(_first, entries))
        fields = list(map(_second, entries))
        lengths = set(map(len, fields))
        zero = sep + _ZERO[sep]
        if lengths == {2} and set(map(_first, fields)) == {msg_key}:
            # Unbound methods: no attribute lookup per entry (a methodcaller's cost).
            parts = list(map(type(sep).partition, ids, repeat(sep)))  # type: ignore[arg-type]
            ats = list(map(_third, parts))
            if _ZERO[sep] not in set(ats):  # none of an earlier version's IDs <seq>-0
                seqs = list(map(int, map(_first, parts)))  # stream IDs: two integers
                return decode_page(seqs, ats, list(map(_second, fields)))
        if (
            lengths == {4}
            and all(map(methodcaller("endswith", zero), ids))
            and set(map(_first, fields)) == {at_key}
            and set(map(_third, fields)) == {msg_key}
        ):
            seqs = list(map(int, map(methodcaller("removesuffix", zero), ids)))
            return decode_page(seqs, list(map(_second, fields)), list(map(_fourth, fields)))
        return self.decode_entries_one_by_one(entries)

    def decode_entries_one_by_one(self, entries: list[Any]) -> list[StoredMessage]:
        """:meth:`decode_entries` without the page path: what it must equal, row for row
        and error for error (the reference of the property tests)."""
        if not entries:
            return []
        at_key, msg_key, sep = ("at", "msg", "-") if isinstance(entries[0][0], str) else _BYTES
        rows = []
        for entry_id, fields in entries:
            seq_part, _, tail = entry_id.partition(sep)
            if len(fields) == 2 and fields[0] == msg_key:
                at, body, field = tail, fields[1], False
            elif len(fields) == 4 and fields[0] == at_key and fields[2] == msg_key:
                at, body, field = fields[1], fields[3], True
            else:  # other field orders, edits, missing or foreign fields
                named = dict(zip(fields[::2], fields[1::2], strict=False))
                field = at_key in named
                at, body = named.get(at_key, tail), named.get(msg_key)
                if body is None and _EDIT_FIELDS & named.keys() and field == (tail in _ZEROS):
                    raise EditsPresent  # a view read of a log with edits: see Reads.read_plan
            # The commit time is in an "at" field exactly when the ID is "<seq>-0".
            if body is None or field != (tail in _ZEROS):
                raise errors.CorruptEntryError(
                    f"stream {self.stream} entry {text(entry_id)} was not written by "
                    f"redis-msglog (expected ID <seq>-<at> and field 'msg', or an earlier "
                    f"version's ID <seq>-0 and fields 'at' and 'msg')",
                    seq=int(seq_part),
                )
            rows.append(decode_entry(int(seq_part), at, body))
        return rows

    def decode_physical(self, entries: list[Any]) -> list[Entry]:
        """Entries of a raw ``XRANGE``/``XREVRANGE`` reply, messages and edits."""
        rows: list[Entry] = []
        start = 0
        for index, (entry_id, fields) in enumerate(entries):
            if len(fields) == 2 and fields[0] in _MSG_FIELD:
                continue  # a message as the script writes it: decoded with its page
            if len(fields) == 4 and fields[0] in _AT_FIELD and fields[2] in _MSG_FIELD:
                continue  # the same, written by an earlier version
            named = dict(zip(fields[::2], fields[1::2], strict=False))
            edit = named.get("edit", named.get(b"edit"))
            if edit is None:
                continue
            rows.extend(self.decode_entries(entries[start:index]))
            rows.append(self._decode_edit(entry_id, named, edit))
            start = index + 1
        rows.extend(self.decode_entries(entries[start:]))
        return rows

    def _decode_edit(self, entry_id: bytes | str, named: dict[Any, Any], edit: Any) -> EditEntry:
        """An edit entry: ID ``<seq>-<at>`` and field ``edit`` alone, or (an earlier
        version's) ID ``<seq>-0`` and fields ``at`` and ``edit``."""
        seq, _, tail = text(entry_id).partition("-")
        at = named.get("at", named.get(b"at"))
        if at is None and len(named) == 1 and tail != "0":
            at = tail
        elif len(named) != 2 or tail != "0":
            at = None
        if at is None or not seq.isdigit():
            raise errors.CorruptEntryError(
                f"stream {self.stream} entry {text(entry_id)} was not written by "
                f"redis-msglog (expected ID <seq>-<at> and field 'edit', or an earlier "
                f"version's ID <seq>-0 and fields 'at' and 'edit')",
                seq=int(seq) if seq.isdigit() else None,
            )
        return decode_edit(int(seq), at, edit)


def entry_layout(values: dict[str, Any], tail: str) -> tuple[Any, Any, bool]:
    """The strict reading of one entry (``msglog verify``'s): the commit time, the body
    and whether it is an edit, of an entry whose ID ends in ``tail`` and whose fields
    (by name) are ``values``; :class:`~redis_msglog.CodecError` for any other layout."""
    if tail == "0":  # an earlier version's layout: the time in a field
        if values.keys() == {"at", "edit"}:
            return values["at"], values["edit"], True
        if values.keys() == {"at", "msg"}:
            return values["at"], values["msg"], False
        raise errors.CodecError(
            "expected fields 'at' and 'msg' (or 'at' and 'edit') under an ID <seq>-0"
        )
    if values.keys() == {"edit"}:
        return tail, values["edit"], True
    if values.keys() == {"msg"}:
        return tail, values["msg"], False
    raise errors.CodecError("expected one field, 'msg' or 'edit', under an ID <seq>-<at>")


def decode_stored(seq: int, entry_id: Any, fields: dict[Any, Any]) -> Entry:
    """The row of one entry read strictly (see :func:`entry_layout`): its fields by name,
    as redis-py's ``xrange`` returns them; a layout or body it does not take raises."""
    tail = text(entry_id).partition("-")[2]
    at, body, is_edit = entry_layout({text(k): v for k, v in fields.items()}, tail)
    return decode_edit(seq, at, body) if is_edit else decode_entry(seq, at, body)


def parse_seq_counter(raw: bytes | str) -> int | None:
    """A seq counter's value, or ``None`` unless it is exactly what the append script
    accepts: a canonical non-negative integer (what ``INCRBY`` takes: no sign, spaces,
    leading zeros, decimals or exponents) of at most 15 digits (exact in Lua's doubles)."""
    value = text(raw)
    if value == "0" or (value[:1] in "123456789" and value.isascii() and value.isdigit()):
        return int(value) if len(value) <= 15 else None
    return None


TOMBSTONE = "erased"
"""What an erased conversation's seq counter holds while its tombstone stands
(``lua/erase.lua``; docs/lifecycle.md): reads see an empty log, appends are refused."""


def is_tombstone(raw: Any) -> bool:
    """Whether a seq counter's raw value is an erased conversation's tombstone."""
    return bool(raw == TOMBSTONE or raw == b"erased")


def stored(entry: Any) -> tuple[Any, bytes]:
    """A stream entry as stored: its ID and a digest of its fields, compared without
    recursion (the warm-read cache's check that the server still holds a cached row; a
    digest: holding the last body would double what a huge row costs)."""
    digest = hashlib.blake2b(digest_size=16)
    for value in entry[1]:
        data = value if type(value) is bytes else str(value).encode("utf-8", "surrogatepass")
        digest.update(len(data).to_bytes(8, "little"))
        digest.update(data)
    return entry[0], digest.digest()


def bodies(fields: list[Any]) -> Any:
    """The ``msg`` field of each message entry's fields (an iterator)."""
    if all(map(_MSG.__contains__, map(_next_to_last, fields))):  # msg, last: as stored
        return map(_last, fields)
    return map(_body, fields)


def _body(fields: Any) -> bytes | str:
    """A message entry's ``msg`` field, wherever it is."""
    named = dict(zip(fields[::2], fields[1::2], strict=False))
    return next((named[name] for name in _MSG if name in named), b"")


def text(value: bytes | str) -> str:
    """A reply value as text (bytes decoded, undecodable bytes escaped)."""
    return value.decode(errors="backslashreplace") if isinstance(value, bytes) else value


def hash_fields(flat: Any) -> dict[str, str]:
    """A hash's fields from a flat ``[name, value, ...]`` (RESP2) or a mapping (RESP3)
    reply, as text."""
    if isinstance(flat, dict):
        return {text(k): text(v) for k, v in flat.items()}
    return {text(flat[i]): text(flat[i + 1]) for i in range(0, len(flat) - 1, 2)}
