"""Edits as entries of the log, and the view they make (see docs/edits.md).

The physical log never changes: a pop, a retraction, a compaction, an archive watermark
or a fork is an entry with its own seq. :class:`EditEntry` is such an entry as a physical
read or a follower sees it; :class:`LogView` folds entries into the view that
``all()``/``last()``/``read()`` return, for a follower that keeps its own (a UI that
removes a popped message live) and as the reference the server's view is tested against.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr

from .errors import InvalidArgumentError
from .models import StoredMessage

EditOp = Literal["retract", "compact", "archive", "fork", "attrs", "trim", "redact"]
"""The edits an :class:`EditEntry` records."""
EditCall = Literal[EditOp, "pop"]
"""The edits a call can ask for: those it records, and a pop (recorded as a retract)."""
View = Literal["visible", "active", "archived", "physical"]
"""Which rows a read returns: ``visible`` (every row not retracted or compacted away),
``active`` (visible rows after the archive watermark), ``archived`` (up to it), or
``physical`` (every entry, edits included, in seq order)."""
VIEWS: tuple[View, ...] = ("visible", "active", "archived", "physical")
MessageView = Literal["visible", "active", "archived"]
"""The views whose rows are messages only."""


class EditEntry(BaseModel):
    """An edit entry of the log: what it changed, its seq and commit time.

    - ``retract``: ``seqs`` left the view (``pop()`` is a retract of one).
    - ``compact``: the rows up to ``through_seq`` (by position in the view) were replaced
      by the ``count`` messages that follow this entry.
    - ``archive``: the rows up to ``through_seq`` (by position) are archived.
    - ``fork``: this log began as a copy of ``source``'s view at ``source_seq``: the
      ``count`` messages that follow this entry.
    - ``attrs``: conversation attributes changed, nothing else.
    - ``trim``: every entry up to ``through_seq`` (by seq) was removed from the physical
      log (docs/lifecycle.md); its rows left every view.
    - ``redact``: the message at seq ``seqs[0]`` was removed from Redis and replaced by
      a row marked ``redacted`` (docs/lifecycle.md), for ``reason`` if one was given.
      The entry never holds the content, neither the old nor the new.

    Any edit may also carry ``attrs``: the attribute changes made with it (``None``
    values: deleted).
    """

    model_config = ConfigDict(frozen=True, populate_by_name=True, extra="forbid")

    seq: StrictInt
    at: datetime
    op: EditOp
    seqs: tuple[StrictInt, ...] | None = None
    through_seq: StrictInt | None = Field(default=None, alias="through")
    count: StrictInt | None = None
    source: StrictStr | None = None
    source_seq: StrictInt | None = Field(default=None, alias="sourceSeq")
    attrs: dict[str, StrictStr | None] | None = None
    reason: StrictStr | None = None


@dataclass(frozen=True, slots=True)
class Attributes:
    """A conversation's attributes (``attrs()``) and the log's last seq read with them in
    the same round trip: pass it as ``expected_seq`` to change them only if nobody wrote
    since."""

    values: dict[str, str]
    last_seq: int


Entry = StoredMessage | EditEntry
"""A row of a physical read or a follow: a message or an edit."""


class LogView:
    """The view of a log, folded from its entries in seq order (docs/edits.md).

    ``apply`` each entry a follower receives (``follow()`` delivers edits too); ``rows``
    is then what ``all(view="visible")`` returns, ``active()`` and ``archived()`` the
    other views. Raises :class:`~redis_msglog.InvalidArgumentError` (a ``ValueError``)
    for an entry out of order, or not an entry; with ``strict``, also
    for an edit that refers to no row of the view (what ``msglog verify`` checks). A
    follower that starts after seq 0 has not seen every row: leave it off, or (a log
    that was trimmed, whose entries start at ``start``) give ``start``: an edit that
    refers to a trimmed seq is then not checked, and one that refers by position to a
    trimmed row (a compaction or an archive through it) sets :attr:`uncertain`: the rows
    may then differ from the view's (where that row stood was trimmed with it)."""

    def __init__(
        self, entries: Iterable[Entry] = (), *, strict: bool = False, start: int = 1
    ) -> None:
        if isinstance(entries, (str, bytes)) or not isinstance(entries, Iterable):
            raise InvalidArgumentError(
                f"entries must be an iterable of entries, got {type(entries).__name__}"
            )
        self._strict = strict
        self._start = start  # the first seq folded: entries below it were trimmed
        self._trimmed = 0  # the seq the last trim folded trimmed through
        # Whether an edit referred by position to a row before ``start`` (trimmed): the
        # view order it cut is no longer in the entries, so the rows may be off.
        self.uncertain = False
        # Every row still placed in the view, retracted ones too (flag True): a retracted
        # archive watermark row still marks where the archived rows end.
        self._rows: list[tuple[StoredMessage, bool]] = []
        self.attrs: dict[str, str] = {}  # the conversation's attributes
        self._archived: int | None = None  # the watermark row's seq
        self._absorb = 0  # messages still to place first (after a compaction or fork)
        self._placed = 0
        self.last_seq = 0
        for entry in entries:
            self.apply(entry)

    @property
    def rows(self) -> list[StoredMessage]:
        """Every row of the view, in view order."""
        return [row for row, retracted in self._rows if not retracted]

    def active(self) -> list[StoredMessage]:
        """The rows after the archive watermark."""
        return [row for row, gone in self._rows[self._watermark_index() + 1 :] if not gone]

    def archived(self) -> list[StoredMessage]:
        """The rows up to and including the archive watermark."""
        return [row for row, gone in self._rows[: self._watermark_index() + 1] if not gone]

    @property
    def mid_compaction(self) -> bool:
        """Whether the entries folded so far stop inside a compaction that keeps rows of
        the view after its messages (between its entry and its last message): a view no
        reader ever saw, with the compacted rows gone but not all of their replacement
        in place. Inside a ``replace``, a ``clear`` or a fork's copy, where nothing is
        kept, the rows so far are the first of the new view (a prefix, as after any
        append), so this is ``False``."""
        return self._absorb > 0 and any(not gone for _, gone in self._rows[self._placed :])

    def apply(self, entry: Entry) -> None:
        """Fold one more entry (the next seq) into the view."""
        if not isinstance(entry, (StoredMessage, EditEntry)):
            raise InvalidArgumentError(
                f"expected a StoredMessage or an EditEntry, got {type(entry).__name__}"
            )
        if entry.seq <= self.last_seq:
            raise InvalidArgumentError(f"entry {entry.seq} is not after {self.last_seq}")
        self.last_seq = entry.seq
        if isinstance(entry, StoredMessage):
            self._place(entry)
            return
        for name, value in (entry.attrs or {}).items():
            if value is None:
                self.attrs.pop(name, None)
            else:
                self.attrs[name] = value
        self._fold(entry)

    def _fold(self, entry: EditEntry) -> None:
        """Fold one edit entry (its attributes already taken)."""
        if entry.op == "trim":
            self._trim(entry.through_seq or 0)
        elif entry.op == "retract":
            self._retract(set(entry.seqs or ()))
        elif entry.op == "archive":
            self._archive(entry)
        elif entry.op == "redact":
            self._redact(entry)
        elif entry.op != "attrs":  # attributes only: the view stays
            self._compact(entry)

    def _place(self, row: StoredMessage) -> None:
        if self._absorb:  # a compaction's or a fork's message: first
            self._rows.insert(self._placed, (row, False))
            self._placed += 1
            self._absorb -= 1
        else:
            self._rows.append((row, False))

    def _retract(self, gone: set[int]) -> None:
        if self._strict and not {s for s in gone if s >= self._start} <= {
            row.seq for row in self.rows
        }:
            raise InvalidArgumentError(f"retracts seqs {sorted(gone)}, not all rows of the view")
        self._rows = [(row, hidden or row.seq in gone) for row, hidden in self._rows]

    def _redact(self, entry: EditEntry) -> None:
        """The row at the redacted seq becomes its redacted row, where it stands (hidden
        or not). A row read after the redaction is that row already; one folded before
        it becomes :func:`redaction_marker` of it (a replacement given to ``redact()``
        is not in the entry: a fresh read shows it)."""
        (seq,) = entry.seqs or (0,)
        for index, (row, hidden) in enumerate(self._rows):
            if row.seq == seq:
                if not row.redacted:
                    self._rows[index] = (redaction_marker(row), hidden)
                return
        if self._strict and seq >= self._start:
            raise InvalidArgumentError(f"redacts seq {seq}, not a row of the log")

    def _trim(self, through: int) -> None:
        """The rows up to seq ``through`` leave the view; they stay placed (hidden), as a
        retracted row does, so a trimmed archive watermark still marks where the archived
        rows end (the server keeps the same order)."""
        if self._strict and through <= self._trimmed:
            raise InvalidArgumentError(f"trims through {through}, already trimmed")
        self._trimmed = through
        self._rows = [(row, hidden or row.seq <= through) for row, hidden in self._rows]

    def _archive(self, entry: EditEntry) -> None:
        if self._strict and (entry.through_seq or 0) >= self._start:
            index = self._index_of(entry.through_seq or 0)
            if self._rows[index][1] or index <= self._watermark_index():
                raise InvalidArgumentError(f"archives through {entry.through_seq}, not forward")
        if (entry.through_seq or 0) < self._start:
            self.uncertain = True  # a watermark among the trimmed rows: its place is gone
        self._archived = entry.through_seq

    def _compact(self, entry: EditEntry) -> None:
        if entry.through_seq is None:  # everything (replace, clear, fork)
            cut = len(self._rows)
            if self._strict and entry.op == "fork" and entry.seq != 1:
                raise InvalidArgumentError("a fork entry that is not the log's first")
        elif entry.through_seq == 0:
            cut = 0
        elif entry.through_seq < self._start and not any(
            row.seq == entry.through_seq for row, _ in self._rows
        ):
            # Through a trimmed row (a fold that starts after a trim): where it stood in the
            # view is gone with it (rows a compaction placed first may have preceded it).
            cut = sum(1 for row, _ in self._rows if row.seq <= entry.through_seq)
            self.uncertain = True
        else:
            cut = self._index_of(entry.through_seq) + 1
            if self._strict and self._rows[cut - 1][1]:
                raise InvalidArgumentError(f"compacts through {entry.through_seq}, a retracted row")
        if self._archived is not None and self._watermark_index() < cut:
            self._archived = None  # the watermark row was replaced
        self._rows = self._rows[cut:]
        self._absorb, self._placed = entry.count or 0, 0

    def _index_of(self, seq: int) -> int:
        for index, (row, _) in enumerate(self._rows):
            if row.seq == seq:
                return index
        raise InvalidArgumentError(f"seq {seq} is not a row of the view")

    def _watermark_index(self) -> int:
        """The index of the watermark row (-1: nothing archived)."""
        if self._archived is None:
            return -1
        if self._archived < self._start and all(row.seq != self._archived for row, _ in self._rows):
            # A trimmed watermark in a fold that starts after the trim: the rows below it.
            return sum(1 for row, _ in self._rows if row.seq <= self._archived) - 1
        return self._index_of(self._archived)


def redaction_marker(row: StoredMessage) -> StoredMessage:
    """The row ``redact()`` leaves without a replacement: the role kept (and a tool
    result's ``tool_call_id``, so the call it answers stays paired), content
    ``"[redacted]"``, ``redacted=True``, the same seq and commit time."""
    return StoredMessage(
        role=row.role,
        content=REDACTED_TEXT,
        tool_call_id=row.tool_call_id if row.role == "tool" else None,
        seq=row.seq,
        at=row.at,
        redacted=True,
    )


REDACTED_TEXT = "[redacted]"
"""The content of a redacted row without a replacement (``lua/edit_lib.lua`` writes it)."""
