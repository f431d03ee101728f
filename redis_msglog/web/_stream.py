"""One follower per conversation per process, shared by every event-stream client of it.

The follower is the library's own ``follow(drafts=True)`` (blocking ``XREAD`` pages of
the log, its drafts' feed and the drafts it follows): a thread for a sync client, a task
for an asyncio one. It hands each item, with its resume id, to every client's bounded
buffer. A client first catches up from reads, then takes the live items; its place
(:mod:`._place`) skips what it sent already and fills any hole from a read, so the join
between catch-up and live feed has no gap and no duplicate whatever the order in which
they race. An item's bytes are made once per encoding for the clients at the
follower's place (:mod:`._encodings`).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import orjson

from .. import telemetry
from .._async._follow_drafts import AsyncDraftFollow
from .._core.drafts.cursor import DraftTracker, Item, Resume
from .._core.read.follow import FollowCursor
from .._sync._follow_drafts import DraftFollow
from ..drafts import DraftDelta, DraftEnded
from ..errors import MessageLogError
from ._encodings import Encoding, Shared
from ._logs import Logs
from ._place import Place, Reads

FOLLOW_WAIT_MS = 500
"""A sync follower's ``XREAD`` wait: how soon its thread notices it should stop."""


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


@dataclass(eq=False)  # each one is itself: kept in a set
class Listener:
    """One client's bounded buffer of the follower's items."""

    bound: int
    events: collections.deque[Shared] = field(default_factory=collections.deque)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    overflowed: bool = False
    failure: MessageLogError | None = None
    feed: Feed | None = None  # the follower it listens to, once joined

    def push(self, events: list[Shared]) -> None:
        if self.overflowed:
            return
        if len(self.events) + len(events) > self.bound:
            self.overflowed = True  # keep nothing more: the client resumes from its last id
        else:
            self.events.extend(events)
        self.wake.set()

    def fail(self, error: MessageLogError) -> None:
        self.failure = error
        self.wake.set()


class Feed:
    """The shared follower of one conversation, from the seq it started at: the
    library's ``follow(drafts=True)``, a page at a time, so a sync one's thread looks at
    its stop flag after each blocking read."""

    def __init__(self, logs: Logs, conversation: str, start: int) -> None:
        self.conversation = conversation
        self.listeners: set[Listener] = set()
        self.failure: MessageLogError | None = None
        self._loop = asyncio.get_running_loop()
        self._stop = threading.Event()
        self._task: asyncio.Future[None] | None = None
        self._thread: threading.Thread | None = None
        self._last: dict[str, int] = {}  # each draft's last delta handed out
        self._resume = str(Resume(start))  # the resume id after the last item handed out
        log = logs.log(conversation)
        cursor = FollowCursor(
            log._core,
            start,
            block_ms=min(FOLLOW_WAIT_MS, log._block_ms()) if logs.sync else log._block_ms(),
            reconnect_within=None,  # a restart or a failover is waited out
            blobs="refs",
        )
        tracker = DraftTracker(log._core.drafts, Resume(start))
        if logs.sync:  # its own thread: it blocks, the executor's few threads must not
            self._thread = threading.Thread(
                target=self._follow_in_thread,
                args=(DraftFollow(log, cursor, tracker),),
                name=f"msglog-web-follower-{conversation}",
                daemon=True,
            )
            self._thread.start()
        else:
            self._task = self._loop.create_task(
                self._follow(AsyncDraftFollow(log, cursor, tracker))
            )

    def _follow_in_thread(self, follow: DraftFollow) -> None:
        try:
            while not self._stop.is_set():
                follow._page()
                items = self._shared(follow._items)
                if items and not self._stop.is_set():
                    self._loop.call_soon_threadsafe(self._deliver, items)
        except MessageLogError as exc:
            with contextlib.suppress(RuntimeError):  # the loop closed first
                self._loop.call_soon_threadsafe(self._failed, exc)

    async def _follow(self, follow: AsyncDraftFollow) -> None:
        try:
            while True:
                await follow._page()
                if follow._items:
                    self._deliver(self._shared(follow._items))
        except MessageLogError as exc:
            self._failed(exc)

    def _shared(self, items: collections.deque[tuple[Item, str]]) -> list[Shared]:
        out = []
        while items:
            item, resume = items.popleft()
            final = 0
            if isinstance(item, DraftDelta):
                self._last[item.draft] = item.pos
            elif isinstance(item, DraftEnded):
                final = self._last.pop(item.draft, 0)
            out.append(Shared(item, self._resume, resume, final))
            self._resume = resume
        return out

    def _deliver(self, events: list[Shared]) -> None:
        for listener in self.listeners:
            listener.push(events)

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
    resume: Resume,
    *,
    bound: int,
    heartbeat: float,
    encoding: type[Encoding] = Encoding,
    resumed: bool = False,
) -> AsyncIterator[bytes]:
    """The events of ``conversation`` after ``resume`` in ``encoding``: what it opens
    with, the catch-up, then live ones; heartbeats while idle; ``overflow`` (then the
    end) when the client lags ``bound`` events behind; ``error`` (then the end) when a
    read or the follower fails."""
    listener = Listener(bound)
    reads = Reads(logs, conversation)
    place = Place(resume, reads)
    encoder = encoding(reads, place)
    try:
        await hub.join(conversation, listener)  # first: nothing committed from now is missed
        opening = await encoder.opening(resumed)
        if opening:
            yield opening
        async for sent in place.catch_up():
            data = await encoder.encode(sent, None)
            if data:
                yield data
            if encoder.done:
                return
        async for data in _live(place, encoder, listener, heartbeat):
            yield data
    except MessageLogError as exc:  # the headers are out: the error is the last event
        yield sse_error(type(exc).__name__, str(exc))
    finally:
        await hub.leave(conversation, listener)


async def _live(
    place: Place, encoder: Encoding, listener: Listener, heartbeat: float
) -> AsyncIterator[bytes]:
    while True:
        if listener.events:  # what is waiting, sent as one write
            out, done = await _taken(place, encoder, listener.events)
            data = b"".join(out)
            if data:
                yield data
            if done:
                return
        if listener.overflowed:
            yield sse_error("overflow", f"more than {listener.bound} events behind: resume")
            return
        if listener.failure is not None:
            raise listener.failure
        if listener.events:
            continue
        listener.wake.clear()
        # A timer, not wait_for: wait_for makes a task per wait, and with a thousand
        # clients each delta was a thousand tasks (16% of the app's time, profiled).
        timer = asyncio.get_running_loop().call_later(heartbeat, listener.wake.set)
        await listener.wake.wait()
        timer.cancel()
        if not (listener.events or listener.overflowed or listener.failure):
            yield HEARTBEAT


async def _taken(
    place: Place, encoder: Encoding, events: collections.deque[Shared]
) -> tuple[list[bytes], bool]:
    """The bytes of the items waiting, and whether the stream ends after them. A client
    where the follower was takes each item as is (:meth:`Place.take`), its bytes shared;
    else its place decides what it is sent (:meth:`Place.live`)."""
    out: list[bytes] = []
    while events:
        shared = events.popleft()
        sent = place.take(shared.item, shared.before, shared.resume)
        if sent is not None:
            out.append(await encoder.encode(sent, shared))
        else:
            async for one in place.live(shared.item, shared.final):
                out.append(await encoder.encode(one, shared))
                if encoder.done:
                    return out, True
        if encoder.done:
            return out, True
    return out, False
