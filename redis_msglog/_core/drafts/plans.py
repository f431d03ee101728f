"""The plans of a log's drafts: open, write (and renew), claim the end, finish, read the
deltas, list the drafts. Each script call is idempotent (a draft is named by its id and
its writer's token, a write by the position it follows), so each is sent like a read:
re-sent while the server cannot take it. See docs/drafts.md for the model."""

from __future__ import annotations

import dataclasses
import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, cast, get_args

import orjson

from ... import errors
from ...drafts import Draft, DraftDelta
from ...models import Role
from ..lifecycle.scope import error_for as scope_error_for
from ..read.roundtrip import Reader
from ..steps import Command, Plan, Refused, StepFailure
from ..stored.entries import hash_fields
from ..stored.entries import text as text_of
from ..write.encode import Batch
from . import scripts
from .deltas import decode, spelled

DRAFT_ID = re.compile(r"\A[0-9a-f]{32}\Z")
_CODE = re.compile(r"\b(MSGLOG_[A-Z_]+)\b ?(\S*)")
_ROLES = frozenset(get_args(Role))


def marked(batch: Batch, draft_id: str, interrupted: bool) -> Batch:
    """A draft's message batch (one message), its row marked with the draft's id and,
    for an interrupted draft, ``"interrupted": true`` (``StoredMessage``'s fields)."""
    doc = orjson.loads(batch.encoded[0])
    doc["draft"] = draft_id
    if interrupted:
        doc["interrupted"] = True
    return dataclasses.replace(batch, encoded=(orjson.dumps(doc),))


def new_id() -> str:
    """A draft id or a writer's token: 128 random bits, as 32 hex digits."""
    return secrets.token_hex(16)


@dataclass(frozen=True, slots=True)
class Claim:
    """The reply of ``draft_claim.lua`` (see there)."""

    status: str  # "claimed", "finished" (by this call), "ended", "live", "busy" or "gone"
    outcome: str
    seq: int
    pos: int
    role: str
    name: str | None


@dataclass(frozen=True, slots=True)
class DraftState:
    """A draft's state as ``draft_open.lua`` and the others keep it."""

    id: str
    role: Role
    name: str | None
    status: str
    pos: int
    started_ms: int
    expires_ms: int
    claim_expires_ms: int
    outcome: str  # an ended draft's
    seq: int  # an ended draft's message's (0: none)

    def lapsed(self, now_ms: int) -> bool:
        """Whether whoever notices may end it: its lease lapsed (open), or its claimant's
        time ran out (claimed)."""
        if self.status == "open":
            return now_ms >= self.expires_ms
        return self.status == "claimed" and now_ms >= self.claim_expires_ms


class DraftPlans:
    """One log's draft plans."""

    def __init__(
        self, reader: Reader, *, scope: str, ttl: timedelta | None, max_bytes: int
    ) -> None:
        self._reader = reader
        self.keys = reader.keys
        self._scripts = scripts.DraftScripts()
        self._scope = scope
        # The conversation's keys' TTL, which the draft keys share (0: none).
        self._ttl_ms = 0 if ttl is None else int(ttl.total_seconds() * 1000)
        self.max_bytes = max_bytes
        # This log object as a claimant: claims it makes are its own until they lapse.
        self.claimant = new_id()
        # How long a claim holds before another noticer may take the draft over (a
        # claimant that died between its claim and its finish).
        self.claim_ms = scripts.CLAIM_MS

    # -- the writer's side ------------------------------------------------------------

    def open_plan(
        self, draft_id: str, token: str, role: str, name: str | None, lease_ms: int, keep: bool
    ) -> Plan[str]:
        """Open the draft; its start entry's feed ID."""
        keys = self.keys
        reply = yield from self._script(
            scripts.OPEN,
            (keys.seq, keys.owner, keys.drafts, keys.draft_feed),
            (
                draft_id,
                token,
                role,
                name or "",
                lease_ms,
                "commit" if keep else "discard",
                self._scope,
                scripts.MAX_DRAFTS,
                scripts.GRACE_MS,
                scripts.FEED_MAX,
                self._ttl_ms,
            ),
            draft_id,
        )
        return text_of(reply)

    def write_plan(self, draft_id: str, token: str, at: int, deltas: Sequence[bytes]) -> Plan[int]:
        """Add ``deltas`` after position ``at`` (none: renew the lease); the new position."""
        reply = yield from self._script(
            scripts.WRITE,
            (self.keys.drafts, self.keys.draft(draft_id)),
            (draft_id, token, at, self.max_bytes, scripts.RETENTION_MS, *deltas),
            draft_id,
        )
        return int(reply)

    def claim_plan(self, draft_id: str, intent: str, token: str = "") -> Plan[Claim]:
        """Decide the draft's end (``draft_claim.lua``): the writer's ``intent``, or with
        no ``token`` an interruption if its lease lapsed."""
        keys = self.keys
        reply = yield from self._script(
            scripts.CLAIM,
            (keys.drafts, keys.draft_feed, keys.draft(draft_id)),
            (
                draft_id,
                self.claimant,
                intent,
                token,
                self.claim_ms,
                scripts.GRACE_MS,
                scripts.FEED_MAX,
                self._ttl_ms,
            ),
            draft_id,
        )
        status, outcome, seq, pos, role, name = reply
        name = text_of(name)
        return Claim(
            text_of(status), text_of(outcome), int(seq), int(pos), text_of(role), name or None
        )

    def finish_plan(self, draft_id: str, seq: int, outcome: str = "") -> Plan[tuple[str, int]]:
        """End a claimed draft: its message is at ``seq`` (0: none, ``outcome`` says why)."""
        keys = self.keys
        reply = yield from self._script(
            scripts.FINISH,
            (keys.drafts, keys.draft_feed, keys.draft(draft_id)),
            (draft_id, seq, outcome, scripts.GRACE_MS, scripts.FEED_MAX, self._ttl_ms),
            draft_id,
        )
        return text_of(reply[0]), int(reply[1])

    # -- a redaction of a draft's message ----------------------------------------------

    def source_plan(self, seq: int) -> Plan[str | None]:
        """The id of the draft the message at ``seq`` was written from (``None``: none,
        or no such message): what a redaction of it must also forget."""
        (entries,) = yield from self._reader.read(("XRANGE", self.keys.stream, seq, seq))
        for _, fields in entries or []:
            try:
                doc = orjson.loads(hash_fields(fields).get("msg", ""))
            except orjson.JSONDecodeError:
                return None  # not a message this library wrote: the redaction refuses it
            found = doc.get("draft") if isinstance(doc, dict) else None
            return found if isinstance(found, str) and DRAFT_ID.match(found) else None
        return None

    def forget_plan(self, draft_id: str) -> Plan[None]:
        """Delete the deltas a draft's committed message was spelled from (kept a minute
        after its end for late followers): its message was redacted, and no copy of the
        text may outlive the redaction. A follower resumed inside it then meets its end
        and the redacted row."""
        yield from self._reader.read(("UNLINK", self.keys.draft(draft_id)))

    # -- readers ------------------------------------------------------------------------

    def deltas_plan(self, draft_id: str, after: int = 0) -> Plan[list[DraftDelta]]:
        """The draft's deltas after position ``after`` (none once it is gone)."""
        (entries,) = yield from self._reader.read(
            ("XRANGE", self.keys.draft(draft_id), f"({'0-' + str(after)}", "+")
        )
        return decode(draft_id, entries or [], after)

    def states_plan(self) -> Plan[tuple[list[DraftState], int]]:
        """Every draft held (ended ones too), and the server's time in ms: one round trip."""
        flat, now = yield from self._reader.read(("HGETALL", self.keys.drafts), ("TIME",))
        fields = hash_fields(flat)
        states = [self._state(text_of(k), v) for k, v in fields.items()]
        return states, int(now[0]) * 1000 + int(now[1]) // 1000

    def list_plan(self) -> Plan[tuple[list[Draft], list[str]]]:
        """The drafts in progress with what they spell so far (one more round trip when
        there are any), and the ids of those whose lease (or claim) lapsed."""
        states, now = yield from self.states_plan()
        live = [s for s in states if s.status != "ended"]
        lapsed = [s.id for s in live if s.lapsed(now)]
        if not live:
            return [], lapsed
        replies = yield from self._reader.read(
            *(("XRANGE", self.keys.draft(s.id), "-", "+") for s in live)
        )
        drafts = []
        for state, entries in zip(live, replies, strict=True):
            spelt = spelled(decode(state.id, entries or [], 0))
            drafts.append(
                Draft(
                    id=state.id,
                    role=state.role,
                    name=state.name,
                    text="".join(spelt.text),
                    reasoning="".join(spelt.reasoning),
                    tool_calls=spelt.tool_calls(),
                    position=state.pos,
                    status="open" if state.status == "open" else "ending",
                    started=_time(state.started_ms),
                    expires=_time(state.expires_ms),
                )
            )
        return drafts, lapsed

    # -- the scripts ----------------------------------------------------------------------

    def _script(
        self, name: str, keys: tuple[str, ...], args: tuple[Any, ...], draft: str
    ) -> Plan[Any]:
        command: Command = (len(keys), *keys, *args)
        try:
            return (yield from self._scripts.run_script(name, command, self._send))
        except StepFailure as failure:
            raise self._error_for(failure, draft) from (failure.origin or failure)

    def _send(self, command: Command) -> Plan[Any]:
        (reply,) = yield from self._reader.read_raw((command,), patient=True)
        return reply

    def _error_for(self, failure: StepFailure, draft: str) -> errors.MessageLogError:
        found = _CODE.search(failure.text) if isinstance(failure, Refused) else None
        if found is not None and found[1] == "MSGLOG_SCOPE":
            return scope_error_for(failure, self.keys.seq)
        error = self._reader.error_for(failure)
        error.args = (f"draft {draft}: {error}",)
        return error

    def _state(self, draft_id: str, raw: Any) -> DraftState:
        try:
            doc = orjson.loads(raw)
        except orjson.JSONDecodeError:
            doc = None
        role = doc.get("role") if isinstance(doc, dict) else None
        name = doc.get("name") if isinstance(doc, dict) else None
        if (
            not isinstance(doc, dict)
            or not DRAFT_ID.match(draft_id)
            or not isinstance(role, str)
            or role not in _ROLES
            or not isinstance(name, (str, type(None)))
            or doc.get("status") not in ("open", "claimed", "ended")
        ):
            raise errors.CorruptLogError(
                f"draft {draft_id!r} of {self.keys.drafts} holds a state this library does "
                "not write (written by hand?)"
            )
        outcome = doc.get("outcome")
        return DraftState(
            draft_id,
            cast(Role, role),
            name,
            doc["status"],
            _int(doc.get("pos")),
            _int(doc.get("started")),
            _int(doc.get("expires")),
            _int(doc.get("claim_expires")),
            outcome if isinstance(outcome, str) else "",
            _int(doc.get("seq")),
        )


def _int(value: Any) -> int:
    return int(value) if isinstance(value, (int, float)) else 0


def _time(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, timezone.utc)
