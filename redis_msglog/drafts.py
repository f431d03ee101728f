"""Drafts: messages while they are written (docs/drafts.md).

A writer opens a draft (``log.draft(...)``), writes deltas into it as its model streams
them, and ends it: committed as one ordinary message at one seq, aborted, or
interrupted when its lease lapses. These are what readers see of it: the drafts in
progress (:class:`Draft`, from ``log.drafts()``) and the events a ``follow(drafts=True)``
yields between the committed entries (:class:`DraftStarted`, :class:`DraftDelta`,
:class:`DraftEnded`). Each event carries ``resume``: the position after it, to pass back
as a follow's ``after`` (the web stream's ``Last-Event-ID``), so a resumed reader gets
every delta exactly once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from .models import Role, ToolCall

DraftOutcome = Literal["committed", "aborted", "interrupted"]
"""How a draft ended: ``"committed"`` (its writer finished it: one message at
``seq``), ``"aborted"`` (no message), ``"interrupted"`` (its lease lapsed, or its writer's
code failed: one message with what was written, ``StoredMessage.interrupted``, when it
was opened with ``on_interrupt="commit"`` and had deltas; else none, ``seq`` 0)."""

DeltaKind = Literal["text", "reasoning", "tool_call"]
"""What a delta adds to: the message's text, its reasoning (a thinking part), or the
arguments of one of its tool calls."""


@dataclass(frozen=True, slots=True)
class Draft:
    """A draft in progress, as ``log.drafts()`` lists it."""

    id: str
    """The draft's id (32 hex digits): its events carry it, and so does the message it
    becomes (``StoredMessage.draft``)."""
    role: Role
    name: str | None
    text: str
    """The text written so far."""
    reasoning: str
    """The reasoning written so far ("" when none)."""
    tool_calls: tuple[ToolCall, ...]
    """The tool calls written so far, their arguments as far as written."""
    position: int
    """How many deltas it holds: a :class:`DraftDelta`'s ``pos`` runs from 1 to this."""
    status: Literal["open", "ending"]
    """``"open"``: being written; ``"ending"``: its end is being written."""
    started: datetime
    expires: datetime
    """When its lease lapses unless its writer renews it (server time, UTC)."""


@dataclass(frozen=True, slots=True)
class DraftStarted:
    """A draft was opened."""

    draft: str
    role: Role
    name: str | None
    resume: str = field(compare=False)


@dataclass(frozen=True, slots=True)
class DraftDelta:
    """A piece of a draft: ``text`` adds to the message's text, its reasoning, or (kind
    ``"tool_call"``) the arguments of tool call ``tool_call_id`` (its ``tool_name`` given
    with its first piece)."""

    draft: str
    pos: int
    kind: DeltaKind
    text: str
    tool_call_id: str | None = None
    tool_name: str | None = None
    resume: str = field(default="", compare=False)


@dataclass(frozen=True, slots=True)
class DraftEnded:
    """A draft ended: ``outcome``, and the seq of the message it became (0: none)."""

    draft: str
    outcome: DraftOutcome
    seq: int
    resume: str = field(default="", compare=False)


DraftEvent = DraftStarted | DraftDelta | DraftEnded
"""What ``follow(drafts=True)`` yields besides the committed entries."""
