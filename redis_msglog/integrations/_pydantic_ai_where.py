"""Where a conversation's entries are: the store's attributes on the log (the record, its
revision, its head and the other entries it names), an entry's location (a log and the
seq of its last row), and walking ``parent_id`` through the rows read.
Reached only through :mod:`redis_msglog.integrations.pydantic_ai`, which checks that the
extra is installed first."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import orjson
from pydantic import TypeAdapter
from pydantic_ai.conversation_store import ConversationEntry, ConversationRecord

from ..edits import Attributes
from ..models import AgentMessage
from ._pydantic_ai_rows import FORMAT, entry_rows

RECORD = TypeAdapter(ConversationRecord)

REVISION = f"{FORMAT}.revision"
RECORD_ATTR = f"{FORMAT}.record"
HEAD = f"{FORMAT}.head"
WHERE = f"{FORMAT}.where"
GONE: dict[str, str | None] = dict.fromkeys((REVISION, RECORD_ATTR, HEAD, WHERE))


@dataclasses.dataclass(frozen=True)
class Located:
    """An entry in a log: the conversation and the seq of its last row."""

    conversation: str
    seq: int

    def dump(self) -> str:
        return orjson.dumps([self.conversation, self.seq]).decode()

    @classmethod
    def load(cls, raw: Any) -> Located | None:
        if raw is None or raw in (b"", ""):
            return None
        value = orjson.loads(raw)
        return cls(str(value[0]), int(value[1]))


@dataclasses.dataclass(frozen=True)
class Seen:
    """A conversation's record as its attributes hold it, and the log's last seq read with
    them (``attrs()``, one round trip): the ``expected_seq`` of the next write."""

    last_seq: int
    revision: str | None
    record: bytes | None  # the record's JSON
    head: Located | None
    where: dict[str, Located]

    @classmethod
    def of(cls, attrs: Attributes) -> Seen:
        values = attrs.values
        record = values.get(RECORD_ATTR)
        where = {
            entry_id: Located(str(at[0]), int(at[1]))
            for entry_id, at in orjson.loads(values.get(WHERE) or "{}").items()
        }
        return cls(
            last_seq=attrs.last_seq,
            revision=values.get(REVISION),
            record=None if record is None else record.encode(),
            head=Located.load(values.get(HEAD)),
            where=where,
        )

    @property
    def head_id(self) -> str | None:
        if self.record is None:
            return None
        head_id = orjson.loads(self.record).get("head_id")
        return None if head_id is None else str(head_id)


def rows_of(entries: Sequence[ConversationEntry]) -> list[AgentMessage]:
    return [row for entry in entries for row in entry_rows(entry)]


def locations_from(
    conversation: str, entries: Sequence[ConversationEntry], first_seq: int
) -> dict[str, Located]:
    """Where each entry will be when the rows of ``entries`` are written from
    ``first_seq`` on: the seq of its last row."""
    located: dict[str, Located] = {}
    seq = first_seq - 1
    for entry in entries:
        seq += len(entry_rows(entry))
        located[entry.id] = Located(conversation, seq)
    return located


def walk_parents(
    found: dict[str, tuple[ConversationEntry, Located]], head: Located, limit: int | None
) -> tuple[list[tuple[ConversationEntry, Located]], str | None]:
    """Walk ``parent_id`` from the entry at ``head`` through ``found``: the entries, newest
    first, and the id of the first one not found (``None``: the whole history)."""
    by_seq = {where.seq: entry_id for entry_id, (_, where) in found.items()}
    next_id: str | None = by_seq.get(head.seq)
    if next_id is None:
        raise KeyError(f"no entry at seq {head.seq} of {head.conversation!r}")
    chain: list[tuple[ConversationEntry, Located]] = []
    while next_id is not None and (limit is None or len(chain) < limit):
        if next_id not in found:
            return chain, next_id
        entry, where = found[next_id]
        chain.append((entry, where))
        next_id = entry.parent_id
    return chain, None


def carries_entry(row: AgentMessage) -> bool:
    """Whether a row is the last of an entry's rows (the one carrying it)."""
    return FORMAT in (row.extras or {})


GLOB_SPECIALS = {ord(c): "\\" + c for c in "*?[]\\"}


def escape_glob(prefix: str) -> str:
    """``prefix`` with the glob's special characters escaped, for ``SCAN MATCH``."""
    return prefix.translate(GLOB_SPECIALS)
