"""Google ADK's session service on the message log (``pip install
'redis-msglog[google-adk]'``).

:class:`MessageLogSessionService` is a ``BaseSessionService``: a session is the log
conversation ``<app>:<user>:<session>`` (each id encoded, see ``_google_adk_codec``) in
the scope ``(<app>, <user>)``, one message per event, and its state (the fold of its
events' ``state_delta``) in the conversation's attributes, changed in the same atomic
call as the event. ``user:`` and ``app:`` state are current values, kept in place (no
history: ``_google_adk_state``) for one conversation per user (``<app>:<user>:~user``)
and per app (``<app>:~app``), written right after the event (another slot).
``append_event`` commits only if nobody wrote to the session since it was read
(``expected_seq``): a stale writer gets ADK's ``StaleSessionError`` and nothing is
written. docs/integrations.md maps every call to its round trips and keys.

This module imports ADK; ``redis_msglog`` itself never does.
"""

from __future__ import annotations

import asyncio
import threading
from collections import OrderedDict
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from .._core.args import missing_extra

try:
    from google.adk.errors import StaleSessionError
    from google.adk.errors.already_exists_error import AlreadyExistsError
    from google.adk.errors.session_not_found_error import SessionNotFoundError
    from google.adk.events.event import Event
    from google.adk.platform import time as platform_time
    from google.adk.platform import uuid as platform_uuid
    from google.adk.sessions import _session_util
    from google.adk.sessions.base_session_service import (
        BaseSessionService,
        GetSessionConfig,
        ListSessionsResponse,
    )
    from google.adk.sessions.session import Session
    from google.adk.sessions.state import State
except ModuleNotFoundError as exc:  # the extra is not installed
    raise missing_extra("google-adk", exc) from exc

from .._async import AsyncDirectory, AsyncMessageLog
from .._core.lifecycle.erase import DEFAULT_ERASED_FOR, check_erased_for
from ..errors import ConversationErasedError, InvalidArgumentError, SeqConflictError
from ..models import StoredMessage
from . import _google_adk_codec as codec
from ._clients import LoopClients, LoopLog, client_factory
from ._google_adk_state import SharedState
from ._log_options import integration_options

__all__ = ["MessageLogSessionService", "SessionsPage"]

_MARKER = "msglog:"  # Session._storage_update_marker: "msglog:<the seq it was read at>"
_SNAPSHOT_TRIES = 8  # reads of a session restarted because a writer got in between
_REDELIVERY_WINDOW = 64  # the session's newest events an event delivered again is found in
_LOGS_KEPT = 1024  # log objects kept (each registers its scope once, on its first write)
_STALE = (  # ADK's database service's words, and the seqs
    "The session has been modified in storage since it was loaded (its last seq is "
    "{now}, the session object was loaded at {then}). Please reload the session before "
    "appending more events."
)


class SessionsPage(ListSessionsResponse):
    """A page of ``list_sessions(..., page_size=...)``: its sessions and the token of the
    next page (``None``: this is the last)."""

    next_page_token: str | None = None


class MessageLogSessionService(BaseSessionService):
    """ADK's ``BaseSessionService`` on the message log (asyncio, as ADK's interface is).

    Args:
        redis: a ``redis.asyncio.Redis`` or ``RedisCluster`` client (or a function
            making one); each event loop gets a client of its own (docs/integrations.md).
        check_stale: ``True`` (the default): ``append_event`` commits only if the
            session's last seq is still the one the session object was read (or last
            written) at, else ADK's ``StaleSessionError`` and nothing is written.
            ``False``: a second writer that appends after whatever is there.
        erased_for: how long ``delete_session``'s tombstone refuses writes to the
            deleted session (and ``create_session`` of its id): default 24 h.
        **log_options: options of :class:`~redis_msglog.AsyncMessageLog` (``prefix``,
            ``ttl``, ``durability``, ``retry``...) but ``scope``, which the service sets.
            ``ttl`` and ``max_age`` apply to the sessions, not to the ``user:`` and
            ``app:`` state, which is kept (current values only) until its scope is
            erased.
    """

    def __init__(
        self,
        redis: Redis | RedisCluster | Callable[[], Redis | RedisCluster],
        *,
        check_stale: bool = True,
        erased_for: timedelta = DEFAULT_ERASED_FOR,
        **log_options: Any,
    ) -> None:
        if "scope" in log_options:
            raise InvalidArgumentError("scope is set by the service: (app_name, user_id)")
        if not isinstance(check_stale, bool):
            raise InvalidArgumentError(f"check_stale must be a bool, got {check_stale!r}")
        log_options = integration_options(log_options)  # ttl: int seconds or a timedelta
        check_erased_for(erased_for)
        self.check_stale = check_stale
        self._erased_for = erased_for
        self._options = log_options
        self._clients = LoopClients(redis)
        self._shared = SharedState(self._clients, log_options)
        self._logs: OrderedDict[str, AsyncMessageLog] = OrderedDict()
        self._lock = threading.Lock()

    @classmethod
    def from_url(
        cls,
        *,
        url: str,
        cluster: bool = False,
        redis_kwargs: dict[str, Any] | None = None,
        **options: Any,
    ) -> MessageLogSessionService:
        """A service on clients of its own (one per event loop), made from ``url``
        (``cluster=True`` for a Redis Cluster node); ``redis_kwargs`` go to ``from_url``."""
        factory = client_factory(url, cluster=cluster, redis_kwargs=redis_kwargs)
        return cls(factory, **options)

    async def close(self) -> None:
        """Close the clients the service made for the running event loop."""
        await self._clients.aclose()

    # -- the logs -------------------------------------------------------------------

    def _log(self, parts: tuple[str, ...], scope: tuple[str, ...], *, fresh: bool = False) -> Any:
        conversation = ":".join(parts)
        with self._lock:  # loops in several threads may share the service
            log = None if fresh else self._logs.get(conversation)
            if log is None:
                log = LoopLog(self._clients, conversation, scope=scope, **self._options)
                self._logs[conversation] = log
                while len(self._logs) > _LOGS_KEPT:
                    self._logs.popitem(last=False)
            else:
                self._logs.move_to_end(conversation)
            return log

    def _session_log(self, app: str, user: str, sid: str, *, fresh: bool = False) -> Any:
        a, u = codec.encode_id("app_name", app), codec.encode_id("user_id", user)
        s = codec.encode_id("session_id", sid)
        return self._log((a, u, s), (a, u), fresh=fresh)

    # -- the BaseSessionService interface -------------------------------------------

    async def create_session(
        self,
        *,
        app_name: str,
        user_id: str,
        state: dict[str, Any] | None = None,
        session_id: str | None = None,
    ) -> Session:
        """A new session: one attributes entry (its ids, state and creation time) written
        only if the conversation is empty (``expected_seq=0``), else ADK's
        ``AlreadyExistsError``; then its ``user:`` and ``app:`` state."""
        sid = _normal(session_id)
        if sid is None or sid == "":  # a blank id is no id, as ADK's contract says
            sid = platform_uuid.new_uuid()
        log = self._session_log(app_name, user_id, sid, fresh=True)
        deltas = _session_util.extract_state_delta(state or {})
        self._shared.check(deltas)  # before anything is written
        now = platform_time.get_time()
        attrs: dict[str, str | None] = {codec.APP: app_name, codec.USER: user_id, codec.ID: sid}
        attrs[codec.UPDATED] = repr(now)
        attrs.update(codec.state_attrs(deltas["session"]))
        try:
            seq = await log.set_attrs(attrs, expected_seq=0)
        except SeqConflictError:
            raise AlreadyExistsError(f"Session with id {sid} already exists.") from None
        await self._shared.write(app_name, user_id, deltas)
        app_state, user_state = await self._shared.read(app_name, user_id)
        session = Session(
            id=sid,
            app_name=app_name,
            user_id=user_id,
            state=_merged(deltas["session"], app_state, user_state),
            last_update_time=now,
        )
        _mark(session, seq)
        return session

    async def get_session(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        config: GetSessionConfig | None = None,
    ) -> Session | None:
        """The session (``None`` if there is none): its attributes and last seq (one
        round trip), then its events as of that seq (``last(n)`` for
        ``num_recent_events``; for ``after_timestamp``, pages read backwards from the end
        until an older event, as ``InMemorySessionService`` filters), with the shared
        state read meanwhile."""
        session_id = _normal(session_id)
        log = self._session_log(app_name, user_id, session_id)
        shared = asyncio.ensure_future(self._shared.read(app_name, user_id))
        # Its failure is retrieved, whenever it ends: the session's own one is raised.
        shared.add_done_callback(lambda done: done.cancelled() or done.exception())
        try:
            for _ in range(_SNAPSHOT_TRIES):
                attrs = await log.attrs()
                if attrs.values.get(codec.ID) != session_id:
                    return None
                events = await _events(log, attrs.last_seq, config or GetSessionConfig())
                if events is not None:
                    break
            else:
                raise StaleSessionError(f"session {session_id!r} changed on every read")
            app_state, user_state = await shared
        finally:
            shared.cancel()
        session = Session(
            id=session_id,
            app_name=app_name,
            user_id=user_id,
            state=_merged(codec.state_of(attrs.values), app_state, user_state),
            events=events,
            last_update_time=float(attrs.values[codec.UPDATED]),
        )
        _mark(session, attrs.last_seq)
        return session

    async def list_sessions(
        self,
        *,
        app_name: str,
        user_id: str | None = None,
        page_size: int | None = None,
        page_token: str | None = None,
    ) -> ListSessionsResponse:
        """Every session of the app (or of one of its users), without events, ordered by
        last update time, user and id (as ADK's services): the scope's index read 1,000
        at a time (``AsyncDirectory.list``), then each session's attributes (100 reads
        at a time, concurrently).

        Our extension (ADK 2.13's interface has no paging): with ``page_size`` (1 to
        1,000), one page of the index, newest-created first, and its
        ``next_page_token`` (``None`` on the last page) to pass as ``page_token``. A
        page holds at most ``page_size`` sessions (fewer where the index lists the
        app's or a user's state)."""
        a = codec.encode_id("app_name", app_name)
        scope = (a,) if user_id is None else (a, codec.encode_id("user_id", user_id))
        directory = AsyncDirectory(self._clients.get(), **_directory_options(self._options))
        ids: list[str] = []
        cursor = page_token
        while True:
            page = await directory.list(scope, limit=page_size or 1000, cursor=cursor)
            ids.extend(c.conversation for c in page.conversations)
            cursor = page.cursor
            if cursor is None or page_size is not None:
                break
        found = [i for i in ids if not i.rsplit(":", 1)[-1].startswith(("~user", "~app"))]
        sessions = await _gather_sessions(self, found)
        if page_size is not None:
            return SessionsPage(sessions=sessions, next_page_token=cursor)
        sessions.sort(key=lambda s: (s.last_update_time, s.user_id, s.id))
        return ListSessionsResponse(sessions=sessions)

    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        """Erase the session's conversation (``erase()``: every key, one atomic call;
        docs/lifecycle.md); a session that does not exist is left alone."""
        session_id = _normal(session_id)
        log = self._session_log(app_name, user_id, session_id)
        if (await log.attrs()).values.get(codec.ID) == session_id:
            await log.erase(erased_for=self._erased_for)
        with self._lock:
            self._logs.pop(log.conversation, None)

    async def get_user_state(self, *, app_name: str, user_id: str) -> dict[str, Any]:
        """The user's state (unprefixed keys): its current values."""
        return await self._shared.user_state(app_name, user_id)

    async def append_event(self, session: Session, event: Event) -> Event:
        """Append the event (skipped when ``partial``, or when equal to one of the
        session object's 64 newest events with its id: delivered again; ``temp:`` state
        applied to the session only) with its session state in one atomic call, conditional on the
        session's last seq (``check_stale``); then its ``user:`` and ``app:`` state (a
        refusal of those, e.g. under an erasure's tombstone, raises with the event stored
        and in the session object)."""
        if event.partial:
            return event
        recent = session.events[-_REDELIVERY_WINDOW:]
        if any(e.id == event.id and e == event for e in recent):
            return event  # delivered again: not written twice (as InMemorySessionService)
        self._apply_temp_state(session, event)
        event = self._trim_temp_delta_state(event)
        delta = event.actions.state_delta if event.actions else {}
        deltas = _session_util.extract_state_delta(delta or {})
        self._shared.check(deltas)  # before anything is written
        attrs = codec.state_attrs(deltas["session"])
        attrs[codec.UPDATED] = repr(event.timestamp)
        message = codec.event_message(event)
        log = self._session_log(session.app_name, session.user_id, session.id)
        expected = await self._expected_seq(log, session)
        try:
            seq = await log.append_many([message], attrs=attrs, expected_seq=expected)
        except SeqConflictError as exc:
            then = _seq_of(session)
            raise StaleSessionError(_STALE.format(now=exc.current_seq, then=then)) from None
        except ConversationErasedError:
            raise SessionNotFoundError(f"Session {session.id} not found.") from None
        session.last_update_time = event.timestamp
        _mark(session, seq)
        committed = self._commit_event_to_session(session, event)  # stored: the session has it
        # Another slot, so another call: a refusal here leaves the event stored (and the
        # session object current) and raises, its user: and app: state not written.
        await self._shared.write(session.app_name, session.user_id, deltas)
        return committed

    async def _expected_seq(self, log: Any, session: Session) -> int | None:
        """The seq the append is conditional on: the session object's, when checking;
        an existence check otherwise (and for a session object not read here)."""
        seq = _seq_of(session)
        if self.check_stale and seq is not None:
            return seq
        attrs = await log.attrs()
        if attrs.values.get(codec.ID) != session.id:
            raise SessionNotFoundError(f"Session {session.id} not found.")
        return attrs.last_seq if self.check_stale else None


def _normal(session_id: Any) -> Any:
    """A session id as ADK's contract normalizes it: without surrounding whitespace
    (anything not a ``str`` is refused later, by the encoding)."""
    return session_id.strip() if isinstance(session_id, str) else session_id


def _directory_options(options: dict[str, Any]) -> dict[str, Any]:
    return {k: options[k] for k in ("prefix", "retry") if k in options}


def _merged(session: dict[str, Any], app: dict[str, Any], user: dict[str, Any]) -> dict[str, Any]:
    merged = dict(session)
    merged.update({State.APP_PREFIX + k: v for k, v in app.items()})
    merged.update({State.USER_PREFIX + k: v for k, v in user.items()})
    return merged


def _mark(session: Session, seq: int) -> None:
    session._storage_update_marker = f"{_MARKER}{seq}"


def _seq_of(session: Session) -> int | None:
    marker = session._storage_update_marker
    if isinstance(marker, str) and marker.startswith(_MARKER):
        return int(marker[len(_MARKER) :])
    return None


async def _events(log: Any, seq: int, config: GetSessionConfig) -> list[Event] | None:
    """The events of the log as of ``seq`` that ``config`` asks for; ``None`` when a
    writer got in between (the read starts over)."""
    n, after = config.num_recent_events, config.after_timestamp
    if n == 0:
        return []
    if n is not None:
        rows: list[StoredMessage] = await log.last(n)
        if rows and rows[-1].seq > seq:
            return None
        return _after([codec.message_event(r) for r in rows], after)
    if after is None:
        return [codec.message_event(r) for r in await log.all() if r.seq <= seq]
    return await _events_since(log, seq, after)


def _after(events: list[Event], after: float | None) -> list[Event]:
    """The events from the end back to the first older than ``after`` (ADK's filter)."""
    if after is None:
        return events
    i = len(events)
    while i > 0 and events[i - 1].timestamp >= after:
        i -= 1
    return events[i:]


async def _events_since(log: Any, seq: int, after: float) -> list[Event]:
    """Pages read backwards from ``seq`` (64 seqs, then twice as many each time) until
    an event older than ``after``: costs what it returns, not the history's length."""
    out: list[Event] = []
    high, span = seq, 64
    while high > 0:
        low = max(0, high - span)
        rows = [r for r in await log.read(low, high - low) if r.seq <= high]
        page = [codec.message_event(r) for r in rows]
        kept = _after(page, after)
        out[:0] = kept
        if len(kept) < len(page):
            break
        high, span = low, span * 2
    return out


async def _gather_sessions(service: MessageLogSessionService, ids: list[str]) -> list[Session]:
    """The sessions (no events) of the conversations ``ids``, their attributes read 100
    at a time, with their users' and the app's state."""
    sessions: list[Session] = []
    shared: dict[tuple[str, str], tuple[dict[str, Any], dict[str, Any]]] = {}
    for start in range(0, len(ids), 100):
        logs = [LoopLog(service._clients, i, **service._options) for i in ids[start : start + 100]]
        for attrs in await asyncio.gather(*(log.attrs() for log in logs)):
            values = attrs.values
            if codec.ID not in values:
                continue  # erased meanwhile, or not a session of ours
            app, user = values[codec.APP], values[codec.USER]
            if (app, user) not in shared:
                shared[(app, user)] = await service._shared.read(app, user)
            app_state, user_state = shared[(app, user)]
            session = Session(
                id=values[codec.ID],
                app_name=app,
                user_id=user,
                state=_merged(codec.state_of(values), app_state, user_state),
                last_update_time=float(values[codec.UPDATED]),
            )
            _mark(session, attrs.last_seq)
            sessions.append(session)
    return sessions
