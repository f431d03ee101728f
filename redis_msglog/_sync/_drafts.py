# Generated from _async/_drafts.py by scripts/unasync.py: edit that file, then run it.
"""Drafts on MessageLog: the writer of a message while it is written, and the reads
of the drafts in progress (docs/drafts.md; the model and its plans are in
``_core/drafts/``)."""

from __future__ import annotations

import time
from datetime import timedelta
from types import TracebackType
from typing import Any, Literal, get_args

import orjson

from .. import errors
from .._core.args import shown
from .._core.checks import require_seq
from .._core.drafts import deltas as draft_deltas
from .._core.drafts.deltas import Spelled, coalesce, delta_document
from .._core.drafts.plans import DRAFT_ID, marked, new_id
from .._core.drafts.scripts import DEFAULT_LEASE, FLUSH_BYTES, FLUSH_SECONDS
from .._io import io_sync as io
from ..drafts import Draft, DraftDelta, DraftOutcome
from ..errors import InvalidArgumentError
from ..models import Role
from ..telemetry import traced
from ._api import LogAPI

_ROLES = frozenset(get_args(Role))
# What a draft's message may be refused for when it is written: the draft then ends
# without one (aborted), and the writer gets the error.
_REFUSALS = (errors.InvalidMessageError, errors.CodecError, errors.MessageTooLargeError)


class LogDrafts(LogAPI):
    """Drafts: what :class:`MessageLog` adds for messages while they are written."""

    def draft(
        self,
        role: Role = "assistant",
        *,
        name: str | None = None,
        lease: timedelta = DEFAULT_LEASE,
        on_interrupt: Literal["commit", "discard"] = "commit",
    ) -> DraftWriter:
        """A draft of one message, written as it is produced (``async with
        log.draft() as d: d.write("Hel")``), read by others while it is written
        (:meth:`drafts`, ``follow(drafts=True)``, the web stream), and ended exactly once:

        - leaving the block normally commits it as one message at one seq (``d.seq``),
          with exactly the content its deltas spelled, through ``before_append`` and
          exactly once under retries;
        - an exception ends it as aborted (no message), or with ``on_interrupt="commit"``
          and deltas written, as interrupted (a message with what was written,
          ``StoredMessage.interrupted``); the exception propagates;
        - a writer that stops renewing its ``lease`` (a crash: writes and a heartbeat
          renew it) is ended as interrupted by whoever notices first: :meth:`drafts`,
          a ``follow(drafts=True)``, :meth:`end_lapsed_drafts`.

        Raises :class:`~redis_msglog.InvalidArgumentError` for a bad argument (here) and,
        on entering, :class:`~redis_msglog.TooManyDraftsError` or
        :class:`~redis_msglog.ConversationErasedError`; nothing is written then."""
        return DraftWriter(self, role, name, lease, on_interrupt)

    @traced("drafts")
    def drafts(self) -> list[Draft]:
        """The drafts in progress, each with what it spells so far (two round trips;
        one when there are none). A draft found with its lease lapsed is ended first
        (interrupted) and not listed."""
        found, lapsed = self._run(self._core.drafts.list_plan())
        if not lapsed:
            return found
        for draft_id in lapsed:
            self._settle_draft(draft_id, "interrupt")
        return (self._run(self._core.drafts.list_plan()))[0]

    def draft_deltas(self, draft_id: str, after: int = 0) -> list[DraftDelta]:
        """Draft ``draft_id``'s deltas after position ``after`` (empty once it is gone:
        a minute after it ends)."""
        if not isinstance(draft_id, str) or not DRAFT_ID.fullmatch(draft_id):
            raise InvalidArgumentError(f"draft_id must be a draft's id, got {shown(draft_id)}")
        require_seq("after", after)  # a position counts like a seq
        return self._run(self._core.drafts.deltas_plan(draft_id, after))

    @traced("end_lapsed_drafts")
    def end_lapsed_drafts(self) -> int:
        """End every draft whose writer's lease lapsed (interrupted, by this caller);
        return how many this call ended. :meth:`drafts` and ``follow(drafts=True)`` do
        this as they go; a sweeper (cron) may call it for conversations nobody reads."""
        states, now = self._run(self._core.drafts.states_plan())
        ended = 0
        for state in states:
            if state.lapsed(now):
                ended += (self._settle_draft(state.id, "interrupt"))[2]
        return ended

    def _settle_draft(
        self, draft_id: str, intent: str, token: str = "", spelled: Spelled | None = None
    ) -> tuple[str, int, bool]:
        """End the draft (``draft_claim.lua``): as its writer (``token``) with
        ``intent``, or as whoever noticed its lease lapse. Its message, if the outcome
        has one, is appended under the key ``draft:<id>`` (every claimant writes the same
        one: exactly once), then the draft finished. Returns (outcome, seq, whether this
        call ended it); ``("live", 0, False)`` while its lease holds."""
        plans = self._core.drafts
        claim = self._run(plans.claim_plan(draft_id, intent, token))
        if claim.status != "claimed":
            return claim.outcome or claim.status, claim.seq, claim.status == "finished"
        if spelled is None or claim.outcome != "committed":
            spelled = draft_deltas.spelled(self._run(plans.deltas_plan(draft_id)))
        message = spelled.message(claim.role, claim.name)
        try:
            batch = marked(self._core.batch((message,)), draft_id, claim.outcome == "interrupted")
        except _REFUSALS:
            self._run(plans.finish_plan(draft_id, 0, "aborted"))
            raise
        seq = self._commit(batch, f"draft:{draft_id}")
        outcome, seq = self._run(plans.finish_plan(draft_id, seq))
        return outcome, seq, True


class DraftWriter:
    """A draft being written (``log.draft(...)``): ``async with`` it, write deltas, leave.

    Deltas are sent in the background, coalesced: those written within
    ``FLUSH_SECONDS`` (30 ms), or up to ``FLUSH_BYTES`` (4 KiB), go in one round trip, so
    a fast model costs a bounded number of them; :meth:`flush` sends them now. A
    heartbeat renews the lease while nothing is written. ``id``: the draft's id (its
    events and its message carry it); ``seq``: its message's seq once committed;
    ``outcome``: how it ended; ``position``: the deltas sent."""

    def __init__(
        self,
        log: LogDrafts,
        role: Role,
        name: str | None,
        lease: timedelta,
        on_interrupt: str,
    ) -> None:
        if not isinstance(role, str) or role not in _ROLES:
            raise InvalidArgumentError(f"role must be one of {sorted(_ROLES)}, got {shown(role)}")
        if name is not None and (not isinstance(name, str) or not name):
            raise InvalidArgumentError(f"name must be a non-empty str or None, got {shown(name)}")
        if not isinstance(lease, timedelta) or not (
            timedelta(seconds=1) <= lease <= timedelta(days=1)
        ):
            raise InvalidArgumentError(
                f"lease must be a timedelta of 1 s to 1 day, got {shown(lease)}"
            )
        if on_interrupt not in ("commit", "discard"):
            raise InvalidArgumentError(
                f'on_interrupt must be "commit" or "discard", got {shown(on_interrupt)}'
            )
        self._log, self.role, self.name = log, role, name
        self._lease_s = lease.total_seconds()
        self._keep = on_interrupt == "commit"
        self.id = new_id()
        self._token = new_id()
        self.seq: int | None = None
        self.outcome: DraftOutcome | None = None
        self.position = 0
        self._pending: list[dict[str, Any]] = []
        self._sent_bytes = 0
        self._pending_bytes = 0
        self._spelled = Spelled()
        self._renewed = time.monotonic()
        self._failure: BaseException | None = None
        self._state = "new"  # "open", then "ended"
        self._lock = io.Lock()
        self._ticker = io.Ticker(self._tick, self._lease_s / 3, FLUSH_SECONDS)

    # -- the block ---------------------------------------------------------------------

    def __enter__(self) -> DraftWriter:
        if self._state != "new":
            raise InvalidArgumentError("a draft writer is entered once")
        drafts, lease_ms = self._log._core.drafts, int(self._lease_s * 1000)
        args = (self.id, self._token, self.role, self.name, lease_ms, self._keep)
        try:
            self._log._run(drafts.open_plan(*args))
        except errors.TooManyDraftsError:
            # Room held by crashed writers nobody noticed: end those, then try once more.
            if not self._log.end_lapsed_drafts():
                raise
            self._log._run(drafts.open_plan(*args))
        self._state = "open"
        self._renewed = time.monotonic()
        self._ticker.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._state != "open":
            self._ticker.stop()
            return
        if exc_type is None:
            self.commit()
            return
        self._ticker.stop()
        try:
            with self._lock:
                self._flush_locked()
        except errors.MessageLogError:
            pass  # the block's own exception is the one to see; the end below decides
        self._end("interrupt")

    # -- writing -----------------------------------------------------------------------

    def write(self, text: str) -> None:
        """Add ``text`` to the message's text."""
        self._add(delta_document("t", _text("text", text), None, None))

    def write_reasoning(self, text: str) -> None:
        """Add ``text`` to the message's reasoning (stored as a thinking part before
        its text)."""
        self._add(delta_document("r", _text("text", text), None, None))

    def write_tool_call(
        self, call_id: str, name: str | None = None, arguments: str = ""
    ) -> None:
        """Add to tool call ``call_id``: its tool's ``name`` (given with its first
        piece) and a piece of its ``arguments`` (JSON text, as the model streams it)."""
        _text("call_id", call_id, empty=False)
        if name is not None:
            _text("name", name, empty=False)
        doc = delta_document("c", _text("arguments", arguments), call_id, name)
        self._add(doc)

    def flush(self) -> None:
        """Send the pending deltas now."""
        with self._lock:
            self._flush_locked()

    def commit(self) -> int:
        """End the draft as one message with what was written; return its seq (what
        leaving the block does). Raises :class:`~redis_msglog.DraftEndedError` if it
        ended already (its lease lapsed and someone interrupted it: ``outcome``)."""
        self._check_open()
        self._ticker.stop()
        with self._lock:
            self._flush_locked()
        self._end("commit")
        if self.outcome != "committed" or self.seq is None:
            raise errors.DraftEndedError(
                f"draft {self.id} was ended before its commit ({self.outcome})",
                outcome=self.outcome or "gone",
            )
        return self.seq

    def abort(self) -> None:
        """End the draft without a message (its pending deltas are dropped)."""
        self._check_open()
        self._ticker.stop()
        self._end("abort")

    # -- inside ------------------------------------------------------------------------

    def _end(self, intent: str) -> None:
        self._state = "ended"
        spelled = self._spelled if intent == "commit" else None
        outcome, seq, _ = self._log._settle_draft(self.id, intent, self._token, spelled)
        self.outcome = outcome if outcome in ("committed", "aborted", "interrupted") else None  # type: ignore[assignment]
        self.seq = seq or None

    def _add(self, doc: dict[str, Any]) -> None:
        self._check_open()
        try:
            size = len(orjson.dumps(doc))
        except orjson.JSONEncodeError as exc:  # a lone surrogate: no UTF-8 form
            raise errors.CodecError(f"a delta of draft {self.id}: {exc}") from exc
        cap = self._log._core.drafts.max_bytes
        if self._sent_bytes + self._pending_bytes + size > cap:
            raise errors.DraftTooLargeError(
                f"draft {self.id} would hold over {cap} bytes of deltas (max_message_bytes). "
                "Nothing was written."
            )
        with self._lock:
            if self._failure is not None:
                raise self._failure
            coalesce(self._pending, doc)
            self._spelled.add(doc["k"], doc["v"], doc.get("id"), doc.get("n"))
            self._pending_bytes += size
            if self._pending_bytes >= FLUSH_BYTES:
                self._flush_locked()
                return
        self._ticker.poke()

    def _flush_locked(self) -> None:
        if self._failure is not None:
            raise self._failure
        if not self._pending:
            return
        encoded = draft_deltas.encode(self._pending)
        plan = self._log._core.drafts.write_plan(self.id, self._token, self.position, encoded)
        self.position = self._log._run(plan)
        self._sent_bytes += sum(map(len, encoded))
        self._pending, self._pending_bytes = [], 0
        self._renewed = time.monotonic()

    def _tick(self) -> None:
        """The background flush of pending deltas, and the heartbeat while idle. A
        failure is kept and raised by the next write (or the block's end)."""
        with self._lock:
            if self._state != "open" or self._failure is not None:
                return
            try:
                if self._pending:
                    self._flush_locked()
                elif time.monotonic() - self._renewed >= self._lease_s / 3:
                    plan = self._log._core.drafts.write_plan(
                        self.id, self._token, self.position, ()
                    )
                    self._log._run(plan)
                    self._renewed = time.monotonic()
            except errors.MessageLogError as exc:
                self._failure = exc

    def _check_open(self) -> None:
        if self._state == "new":
            raise InvalidArgumentError("enter the draft first: with log.draft() as d")
        if self._state == "ended":
            raise errors.DraftEndedError(
                f"draft {self.id} has ended ({self.outcome})", outcome=self.outcome or "gone"
            )


def _text(name: str, value: object, *, empty: bool = True) -> str:
    if not isinstance(value, str) or (not empty and not value):
        raise InvalidArgumentError(
            f"{name} must be a {'' if empty else 'non-empty '}str, got {shown(value)}"
        )
    return value
