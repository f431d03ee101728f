"""One follower per conversation per process, shared by every event-stream client of it.

The follower is the library's own (:class:`~redis_msglog._core.read.follow.FollowCursor` pages, a
blocking ``XREAD`` from the last seq seen): a thread for a sync client, a task for an
asyncio one. It formats each committed entry once, as the bytes of one SSE event, and
hands them to every client's bounded buffer. A client first sends its backlog from a
read, then the live events; it keeps the last seq it sent, skips what it already sent
and fills any hole from a read, so the join between backlog and live feed has no gap and
no duplicate whatever the order in which they race.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import threading
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import orjson

from .. import telemetry
from .._core.read.follow import FollowCursor
from .._core.stored.codec import edit_document, row_document
from ..edits import EditEntry, Entry, LogView
from ..errors import MessageLogError
from ..models import StoredMessage
from . import _agui as agui
from ._logs import Logs

FOLLOW_WAIT_MS = 500
"""A sync follower's ``XREAD`` wait: how soon its thread notices it should stop."""


def entry_data(row: Entry) -> dict[str, Any]:
    """The JSON of one committed entry: a message or an edit (contract of docs/web.md)."""
    if isinstance(row, EditEntry):
        return {"seq": row.seq, "at": row.at.isoformat(), "edit": edit_document(row)}
    return {"seq": row.seq, "at": row.at.isoformat(), "message": row_document(row)}


def sse_event(row: Entry) -> bytes:
    """One Server-Sent Event: ``id`` is the seq, so ``Last-Event-ID`` resumes exactly."""
    kind = b"edit" if isinstance(row, EditEntry) else b"message"
    data = orjson.dumps(entry_data(row))  # one line: orjson never writes a raw newline
    return b"id: %d\nevent: %s\ndata: %s\n\n" % (row.seq, kind, data)


def sse_error(name: str, message: str) -> bytes:
    data = orjson.dumps({"error": name, "message": message})
    return (
        b"event: "
        + (b"overflow" if name == "overflow" else b"error")
        + b"\ndata: "
        + data
        + b"\n\n"
    )


HEARTBEAT = b": hb\n\n"


@dataclass(eq=False, slots=True)
class Shared:
    """A committed entry handed to every client of a follower, with its event bytes in
    each encoding once made (``cache``: by encoding), so a thousand clients of one
    conversation encode each entry once."""

    row: Entry
    cache: dict[str, bytes] = field(default_factory=dict)


class Encoding:
    """How an event stream spells the entries: this library's own events (``message``
    and ``edit``, docs/web.md); :class:`AgUiEncoding` is AG-UI's."""

    name = "msglog"

    async def opening(
        self, logs: Logs, conversation: str, after: int, resumed: bool
    ) -> tuple[bytes, int]:
        """What is sent before the entries after ``after``, and the seq it brings the
        client to (the entries after it follow)."""
        return b"", after

    async def entry(self, logs: Logs, conversation: str, shared: Shared) -> bytes:
        found = shared.cache.get(self.name)
        if found is None:
            found = shared.cache[self.name] = sse_event(shared.row)
        return found


class AgUiEncoding(Encoding):
    """AG-UI's events (:mod:`._agui`): a run started, the view's snapshot, the messages."""

    name = agui.PROTOCOL

    async def opening(
        self, logs: Logs, conversation: str, after: int, resumed: bool
    ) -> tuple[bytes, int]:
        started = agui.run_started(conversation, uuid.uuid4().hex)
        if resumed:
            return agui.sse([started], None), after
        entries = await _entries(logs, conversation, None)
        last = entries[-1].seq if entries else 0
        return agui.sse([started, agui.snapshot(_view(entries))], last), last

    async def entry(self, logs: Logs, conversation: str, shared: Shared) -> bytes:
        found = shared.cache.get(self.name)
        if found is None:
            events = agui.entry_events(shared.row)
            if events is None:  # an edit: the view after it, read and folded
                assert isinstance(shared.row, EditEntry)
                view = _view(await _entries(logs, conversation, shared.row.seq))
                events = [agui.edit_event(shared.row), agui.snapshot(view)]
            found = shared.cache[self.name] = agui.sse(events, shared.row.seq)
        return found


ENCODINGS: dict[str, Encoding] = {"msglog": Encoding(), agui.PROTOCOL: AgUiEncoding()}
"""The encodings an event stream speaks, by ``?protocol=``."""


async def _entries(logs: Logs, conversation: str, through: int | None) -> list[Entry]:
    """The physical log, through seq ``through`` (``None``: to its end now)."""
    return [row async for row in _rows(logs, conversation, 0, through)]


def _view(entries: list[Entry]) -> list[StoredMessage]:
    """The visible view of ``entries`` (a trimmed log's, from its first entry)."""
    return LogView(entries, start=entries[0].seq if entries else 1).rows


@dataclass(eq=False)  # each one is itself: kept in a set
class Listener:
    """One client's bounded buffer of (seq, event bytes)."""

    bound: int
    events: collections.deque[tuple[int, Shared]] = field(default_factory=collections.deque)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    overflowed: bool = False
    failure: MessageLogError | None = None
    feed: Feed | None = None  # the follower it listens to, once joined

    def push(self, seq: int, event: Shared) -> None:
        if self.overflowed:
            return
        if len(self.events) >= self.bound:
            self.overflowed = True  # keep nothing more: the client resumes from its last id
        else:
            self.events.append((seq, event))
        self.wake.set()

    def fail(self, error: MessageLogError) -> None:
        self.failure = error
        self.wake.set()


class Feed:
    """The shared follower of one conversation, from the seq it started at."""

    def __init__(self, logs: Logs, conversation: str, start: int) -> None:
        self.conversation = conversation
        self.listeners: set[Listener] = set()
        self.failure: MessageLogError | None = None
        self._logs = logs
        self._loop = asyncio.get_running_loop()
        self._stop = threading.Event()
        self._task: asyncio.Future[None] | None = None
        self._thread: threading.Thread | None = None
        log = logs.log(conversation)
        cursor = FollowCursor(
            log._core,
            start,
            block_ms=min(FOLLOW_WAIT_MS, log._block_ms()) if logs.sync else log._block_ms(),
            reconnect_within=None,  # a restart or a failover is waited out
            blobs="refs",
        )
        if logs.sync:  # its own thread: it blocks, the executor's few threads must not
            self._thread = threading.Thread(
                target=self._follow_in_thread,
                args=(log, cursor),
                name=f"msglog-web-follower-{conversation}",
                daemon=True,
            )
            self._thread.start()
        else:
            self._task = self._loop.create_task(self._follow(log, cursor))

    def _follow_in_thread(self, log: Any, cursor: FollowCursor) -> None:
        try:
            for rows in log._pages(cursor, self._stop.is_set):
                events = [(row.seq, Shared(row)) for row in rows]
                if self._stop.is_set():
                    return
                self._loop.call_soon_threadsafe(self._deliver, events)
        except MessageLogError as exc:
            with contextlib.suppress(RuntimeError):  # the loop closed first
                self._loop.call_soon_threadsafe(self._failed, exc)

    async def _follow(self, log: Any, cursor: FollowCursor) -> None:
        try:
            async for rows in log._pages(cursor):
                self._deliver([(row.seq, Shared(row)) for row in rows])
        except MessageLogError as exc:
            self._failed(exc)

    def _deliver(self, events: list[tuple[int, Shared]]) -> None:
        for listener in self.listeners:
            for seq, event in events:
                listener.push(seq, event)

    def _failed(self, error: MessageLogError) -> None:
        self.failure = error
        for listener in self.listeners:
            listener.fail(error)

    async def stop(self) -> None:
        self._stop.set()
        if self._task is not None:
            self._task.cancel()
            await asyncio.wait([self._task])
        elif self._thread is not None:  # within one XREAD wait (FOLLOW_WAIT_MS)
            await asyncio.to_thread(self._thread.join)


class Hub:
    """The feeds of one app: started on a conversation's first client, stopped after its
    last one leaves. ``logs`` serves the reads; ``follow`` (a client of its own, so a
    blocking ``XREAD`` never holds a connection a page or an append needs) the followers.
    At most ``limit`` conversations are followed at once: :meth:`admit` refuses others."""

    def __init__(self, logs: Logs, follow: Logs, limit: int) -> None:
        self._logs, self._follow, self.limit = logs, follow, limit
        self._feeds: dict[str, Feed] = {}
        self._starting: dict[str, asyncio.Lock] = collections.defaultdict(asyncio.Lock)
        self._admitted: collections.Counter[str] = collections.Counter()

    def admit(self, conversation: str) -> bool:
        """Count one more client of ``conversation``, if it is followed already or fewer
        than ``limit`` conversations are; ``False`` (nothing counted) otherwise. No await
        between the check and the count: concurrent requests cannot both take the last
        place. Each admitted client is given back once, by :meth:`release`."""
        if conversation not in self._admitted and len(self._admitted) >= self.limit:
            return False
        self._admitted[conversation] += 1
        telemetry.add_event_streams(1)
        return True

    def release(self, conversation: str) -> None:
        telemetry.add_event_streams(-1)
        self._admitted[conversation] -= 1
        if self._admitted[conversation] <= 0:
            del self._admitted[conversation]

    @property
    def followers(self) -> int:
        """How many followers run (one per conversation with clients)."""
        return len(self._feeds)

    async def join(self, conversation: str, listener: Listener) -> None:
        async with self._starting[conversation]:
            feed = self._feeds.get(conversation)
            if feed is None or feed.failure is not None:  # a failed one is replaced
                start = await self._logs.call(conversation, "count")
                feed = self._feeds[conversation] = Feed(self._follow, conversation, start)
            feed.listeners.add(listener)
            listener.feed = feed

    async def leave(self, conversation: str, listener: Listener) -> None:
        feed = listener.feed
        if feed is None:
            return
        listener.feed = None
        feed.listeners.discard(listener)
        if not feed.listeners:
            if self._feeds.get(conversation) is feed:
                del self._feeds[conversation]
                lock = self._starting.get(conversation)
                if lock is not None and not lock.locked():
                    del self._starting[conversation]  # keeps the dict to the live feeds
            await feed.stop()

    async def close(self) -> None:
        feeds, self._feeds = list(self._feeds.values()), {}
        for feed in feeds:
            await feed.stop()


async def event_stream(
    hub: Hub,
    logs: Logs,
    conversation: str,
    after: int,
    *,
    bound: int,
    heartbeat: float,
    encoding: Encoding = ENCODINGS["msglog"],
    resumed: bool = False,
) -> AsyncIterator[bytes]:
    """The events of ``conversation`` after seq ``after`` in ``encoding``: what it opens
    with, the backlog, then live ones; heartbeats while idle; ``overflow`` (then the end)
    when the client lags ``bound`` events behind; ``error`` (then the end) when a read
    or the follower fails."""
    listener = Listener(bound)
    try:
        await hub.join(conversation, listener)  # first: nothing committed from now is missed
        opening, after = await encoding.opening(logs, conversation, after, resumed)
        if opening:
            yield opening
        async for event in _events(logs, conversation, after, listener, heartbeat, encoding):
            yield event
    except MessageLogError as exc:  # the headers are out: the error is the last event
        yield sse_error(type(exc).__name__, str(exc))
    finally:
        await hub.leave(conversation, listener)


async def _events(
    logs: Logs,
    conversation: str,
    after: int,
    listener: Listener,
    heartbeat: float,
    encoding: Encoding,
) -> AsyncIterator[bytes]:
    sent = after  # the last seq sent: every event is seq sent + 1
    async for row in _rows(logs, conversation, sent, None):
        sent = row.seq
        yield await encoding.entry(logs, conversation, Shared(row))
    while True:
        while listener.events:
            seq, event = listener.events.popleft()
            if seq <= sent:
                continue  # already sent from a read
            async for row in _rows(logs, conversation, sent, seq - 1):
                sent = row.seq  # the live feed started after the read ended: the hole
                yield await encoding.entry(logs, conversation, Shared(row))
            sent = seq
            yield await encoding.entry(logs, conversation, event)
        if listener.overflowed:
            yield sse_error("overflow", f"more than {listener.bound} events behind: resume")
            return
        if listener.failure is not None:
            raise listener.failure
        listener.wake.clear()
        try:
            await asyncio.wait_for(listener.wake.wait(), heartbeat)
        except asyncio.TimeoutError:
            yield HEARTBEAT


async def _rows(
    logs: Logs, conversation: str, after: int, through: int | None
) -> AsyncIterator[Entry]:
    """The entries after ``after`` (through ``through``, else to the end of the log as it
    is now), read a page at a time."""
    while through is None or after < through:
        limit = logs.page_size if through is None else min(logs.page_size, through - after)
        rows: list[Entry] = await logs.call(
            conversation, "read", after, limit, blobs="refs", view="physical"
        )
        if not rows:
            return
        for row in rows:
            yield row
        after = rows[-1].seq
