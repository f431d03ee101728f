"""A follower's place among a conversation's drafts, and the resume id naming its whole
position: the committed seq and each open draft's last delta handed out.

Resume ids: ``"<seq>"`` (no draft open) or ``"<seq>.<draft>:<pos>[.<draft>:<pos>]..."``,
each draft open then by its 32 hex digits and the deltas handed out of it:
``"42.3f2a...9c:17"``. A plain seq is a resume id, so a follower or a web client that only
knew seqs resumes as before. A resumed follower reads the drafts held now: those it was
in go on from their position, the others start from their first delta; one that ended
meanwhile ends (its message, if any, is a row after the seq); one that started and
ended meanwhile is only its message.

Order: per page, the deltas of the drafts followed, then the feed's starts and ends,
then the committed rows. A draft ends (``DraftEnded``) before the message it became,
whichever of its row or its feed entry the follower meets first, and the rest of its
deltas come before its end (read from its stream, kept for a minute after the end)."""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from ... import errors
from ...drafts import DraftEnded, DraftEvent, DraftOutcome, DraftStarted
from ...edits import Entry
from ...models import StoredMessage
from ..args import shown
from ..steps import Plan
from ..stored.entries import text
from ..stored.keys import ConversationKeys
from .deltas import decode
from .plans import DraftPlans
from .scripts import MAX_DRAFTS

_DRAFT = re.compile(r"\A([0-9a-f]{32}):([0-9]{1,15})\Z")
_ENDED_KEPT = 1000  # drafts remembered as ended, so a late feed entry is not taken as new
_OUTCOMES = ("committed", "aborted", "interrupted")

Item = Entry | DraftEvent


@dataclass(slots=True)
class Resume:
    """A parsed resume id: the committed seq, and how far into each open draft."""

    seq: int
    drafts: dict[str, int] = field(default_factory=dict)

    def __str__(self) -> str:
        return ".".join((str(self.seq), *(f"{d}:{p}" for d, p in self.drafts.items())))


def parse_resume(value: int | str) -> Resume:
    """A resume id (or a seq); :class:`~redis_msglog.InvalidArgumentError` for anything
    else."""
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 0:
            raise errors.InvalidArgumentError(f"after must be a seq >= 0, got {value}")
        return Resume(value)
    if not isinstance(value, str) or len(value) > 8192:
        raise errors.InvalidArgumentError(f"not a resume id: {shown(value)}")
    seq, *drafts = value.split(".")
    positions: dict[str, int] = {}
    for part in drafts:
        found = _DRAFT.match(part)
        if found is None:
            raise errors.InvalidArgumentError(f"not a resume id: {shown(value)}")
        positions[found[1]] = int(found[2])
    if not (seq.isascii() and seq.isdigit() and len(seq) <= 15) or len(positions) > MAX_DRAFTS:
        raise errors.InvalidArgumentError(f"not a resume id: {shown(value)}")
    return Resume(int(seq), positions)


class DraftTracker:
    """The drafts part of a ``follow(drafts=True)``: which drafts it follows and how far,
    and the events of each page (see the module)."""

    def __init__(self, plans: DraftPlans, resume: Resume) -> None:
        self._plans = plans
        self._keys: ConversationKeys = plans.keys
        self.feed: str | None = None  # the feed's last entry read: None before the first look
        self.positions = dict(resume.drafts)
        self._ended: OrderedDict[str, None] = OrderedDict()

    def resume(self, seq: int) -> str:
        return str(Resume(seq, self.positions))

    def streams(self) -> list[tuple[str, str]]:
        """The streams a page reads besides the log (each from where the follower is)."""
        if self.feed is None:
            return []
        return [
            (self._keys.draft_feed, self.feed),
            *((self._keys.draft(d), f"0-{p}") for d, p in self.positions.items()),
        ]

    def start_plan(self, seq: int) -> Plan[list[tuple[Item, str]]]:
        """A follower's first look (no feed position yet): the feed's last entry, then the
        drafts held (in that order: a draft started in between is met on the feed and
        known already). A draft of the resume id goes on from its position (or ends, if
        it ended meanwhile); any other in progress is followed from its first delta."""
        if self.feed is not None:
            return []
        (last,) = yield from self._plans._reader.read(
            ("XREVRANGE", self._keys.draft_feed, "+", "-", "COUNT", 1)
        )
        states, _ = yield from self._plans.states_plan()
        self.feed = text(last[0][0]) if last else "0-0"
        out: list[tuple[Item, str]] = []
        for state in states:
            if state.id in self.positions:
                if state.status == "ended" and state.outcome in _OUTCOMES:
                    yield from self._end(state.id, state.outcome, state.seq, state.pos, seq, out)
            elif state.status != "ended" and len(self.positions) < MAX_DRAFTS:
                self.positions[state.id] = 0
                event = DraftStarted(state.id, state.role, state.name, self.resume(seq))
                out.append((event, event.resume))
        return out

    def idle_plan(self, seq: int) -> Plan[tuple[list[tuple[Item, str]], list[str]]]:
        """After a wait with nothing new, while drafts are followed: the drafts held now.
        One followed but ended without the follower meeting its end (its feed entry
        trimmed, or read before a resume) ends now, ``"aborted"`` when the server forgot
        it (its message, had it one, was a row before now); and the ids of those whose
        lease lapsed, for the caller to end (``draft_claim.lua``)."""
        states, now = yield from self._plans.states_plan()
        held = {state.id: state for state in states}
        out: list[tuple[Item, str]] = []
        lapsed = []
        for draft in list(self.positions):
            state = held.get(draft)
            if state is None:
                yield from self._end(draft, "aborted", 0, 0, seq, out)
            elif state.status == "ended" and state.outcome in _OUTCOMES:
                yield from self._end(draft, state.outcome, state.seq, state.pos, seq, out)
            elif state.lapsed(now):
                lapsed.append(draft)
        return out, lapsed

    def page_plan(
        self, extra: Mapping[str, Any], rows: list[Entry], seq: int
    ) -> Plan[list[tuple[Item, str]]]:
        """The page's items in order with the resume id after each: the deltas of
        ``extra`` (the other streams' entries, by key), the feed's starts and ends, then
        ``rows`` (the log's entries after ``seq``)."""
        out: list[tuple[Item, str]] = []
        for draft in list(self.positions):
            entries = extra.get(self._keys.draft(draft))
            if entries:
                self._deltas(draft, decode(draft, entries, self.positions[draft]), seq, out)
        for raw_id, fields in extra.get(self._keys.draft_feed) or ():
            self.feed = text(raw_id)
            yield from self._feed_entry(_fields(fields), seq, out)
        for row in rows:
            made_of = row.draft if isinstance(row, StoredMessage) else None
            if made_of is not None and made_of in self.positions:
                outcome = "interrupted" if cast(StoredMessage, row).interrupted else "committed"
                yield from self._end(made_of, outcome, row.seq, None, row.seq - 1, out)
            out.append((row, self.resume(row.seq)))
        return out

    def _feed_entry(
        self, fields: dict[str, str], seq: int, out: list[tuple[Item, str]]
    ) -> Plan[None]:
        draft, event = fields.get("draft", ""), fields.get("event")
        if event == "start" and draft not in self.positions and draft not in self._ended:
            if len(self.positions) >= MAX_DRAFTS or fields.get("role") not in _ROLES:
                return  # not one this library wrote: not followed
            self.positions[draft] = 0
            started = DraftStarted(draft, fields["role"], fields.get("name"), self.resume(seq))  # type: ignore[arg-type]
            out.append((started, started.resume))
        elif event == "end" and draft in self.positions:
            outcome = fields.get("outcome", "")
            final = _number(fields.get("pos"))
            ended_seq = _number(fields.get("seq"))
            if outcome in _OUTCOMES:
                yield from self._end(draft, outcome, ended_seq, final, seq, out)

    def _end(
        self,
        draft: str,
        outcome: str,
        ended_seq: int,
        final: int | None,
        seq: int,
        out: list[tuple[Item, str]],
    ) -> Plan[None]:
        """The rest of the draft's deltas (up to ``final``; ``None``: all there are), then
        its end."""
        if final is None or self.positions[draft] < final:
            rest = yield from self._plans.deltas_plan(draft, self.positions[draft])
            if final is not None:
                rest = [d for d in rest if d.pos <= final]
            self._deltas(draft, rest, seq, out)
        del self.positions[draft]
        self._ended[draft] = None
        if len(self._ended) > _ENDED_KEPT:
            self._ended.popitem(last=False)
        ended = DraftEnded(draft, cast(DraftOutcome, outcome), ended_seq, self.resume(seq))
        out.append((ended, ended.resume))

    def _deltas(
        self, draft: str, deltas: Iterable[Any], seq: int, out: list[tuple[Item, str]]
    ) -> None:
        for delta in deltas:
            self.positions[draft] = delta.pos
            resume = self.resume(seq)
            out.append((_with_resume(delta, resume), resume))


_ROLES = ("system", "user", "assistant", "tool")


def _with_resume(delta: Any, resume: str) -> Any:
    return type(delta)(
        delta.draft, delta.pos, delta.kind, delta.text, delta.tool_call_id, delta.tool_name, resume
    )


def _fields(flat: Any) -> dict[str, str]:
    if isinstance(flat, Mapping):
        return {text(k): text(v) for k, v in flat.items()}
    return {text(flat[i]): text(flat[i + 1]) for i in range(0, len(flat) - 1, 2)}


def _number(value: str | None) -> int:
    return int(value) if value is not None and value.isdigit() and len(value) <= 15 else 0
