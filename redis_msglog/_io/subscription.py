"""Subscriptions: a follow that feeds a callback in the background, a thread for the sync
client and a task for the asyncio one. Hand-written side by side, because threads and
tasks stop differently; everything else of the clients is generated from one source."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from types import TracebackType
from typing import Any

from ..drafts import DraftEvent
from ..edits import Entry
from ..models import StoredMessage
from . import io_async as _io_async

OnAppend = Callable[[list[StoredMessage]], object]
"""A hook or callback of the sync client: called with the committed rows."""
AsyncOnAppend = Callable[[list[StoredMessage]], "Awaitable[object] | object"]
"""A hook or callback of the asyncio client: plain or async."""
OnCommit = Callable[[list[Entry]], object]
"""A subscription's callback (sync client): called with committed entries, edits too."""
AsyncOnCommit = Callable[[list[Entry]], "Awaitable[object] | object"]
"""A subscription's callback (asyncio client): plain or async."""
OnItems = Callable[[list[Entry | DraftEvent]], object]
"""A ``subscribe(drafts=True)`` callback (sync client): entries and drafts' events."""
AsyncOnItems = Callable[[list[Entry | DraftEvent]], "Awaitable[object] | object"]
"""A ``subscribe(drafts=True)`` callback (asyncio client): plain or async."""
Pages = Callable[[Callable[[], bool]], Iterator[list[Any]]]
"""What a subscription reads from: called with its ``stopped()`` test, the non-empty pages
of new rows, in order, until that test is true (a log's ``_pages`` on its cursor)."""
AsyncPages = Callable[[Callable[[], bool]], AsyncIterator[list[Any]]]
"""What an asyncio subscription reads from (see :data:`Pages`)."""


class Subscription:
    """A background thread feeding commits to a callback; see :meth:`MessageLog.subscribe`.

    Close it (or use it as a context manager) to stop; the thread notices within the
    subscription's ``XREAD`` wait (at most half a second).
    """

    WAIT_MS = 500

    def __init__(
        self,
        pages: Pages,
        callback: Callable[[list[Any]], object],
        *,
        position: int,
        name: str,
        resume: Callable[[], str] | None = None,
    ) -> None:
        """Deliver the pages of ``pages`` (new rows after seq ``position``) to
        ``callback`` on a thread named after ``name`` (the conversation); ``resume``
        gives the resume id after the page last handed out (``drafts=True``)."""
        self.position = position
        self.resume = str(position)
        """The resume id after the last batch handled (``subscribe(drafts=True)``):
        pass it back as ``after``; the last seq handled otherwise."""
        self.error: BaseException | None = None
        self._callback = callback
        self._where = resume
        self._stop = threading.Event()
        self._pages: Iterator[list[Any]] = pages(self._stop.is_set)
        self._thread = threading.Thread(
            target=self._deliver, name=f"msglog-subscription-{name}", daemon=True
        )
        self._thread.start()

    def _deliver(self) -> None:
        try:
            for rows in self._pages:
                self._callback(rows)
                self.position, self.resume = _advanced(rows, self.position, self._where)
        except BaseException as exc:  # kept for close(): a thread has no caller to raise to
            self.error = exc

    @property
    def running(self) -> bool:
        """Whether the thread is still delivering."""
        return self._thread.is_alive()

    def close(self, timeout: float | None = None) -> None:
        """Stop delivering and wait for the thread; re-raise the callback's (or the
        server's) error if the subscription died of one. From inside the callback, the
        subscription stops once the callback returns."""
        self._stop.set()
        if threading.current_thread() is self._thread:
            return  # a thread cannot join itself; the loop sees the stop after the callback
        self._thread.join(timeout)
        if self.error is not None:
            raise self.error

    def __enter__(self) -> Subscription:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class AsyncSubscription:
    """A task feeding commits to a callback; see :meth:`AsyncMessageLog.subscribe`.

    ``await close()`` (or ``async with``) cancels it, releasing its connection at once.
    """

    WAIT_MS = 5000  # a cancel interrupts the wait: no need to wake up often

    def __init__(
        self,
        pages: AsyncPages,
        callback: Callable[[list[Any]], Awaitable[object] | object],
        *,
        position: int,
        name: str,
        resume: Callable[[], str] | None = None,
    ) -> None:
        """The asyncio twin of :class:`Subscription`'s, on a task."""
        self.position = position
        self.resume = str(position)
        """See :attr:`Subscription.resume`."""
        self.error: BaseException | None = None
        self._callback = callback
        self._where = resume
        self._closing = False
        self._pages: AsyncIterator[list[Any]] = pages(lambda: self._closing)
        self._task = asyncio.get_running_loop().create_task(
            self._deliver(), name=f"msglog-subscription-{name}"
        )

    async def _deliver(self) -> None:
        try:
            async for rows in self._pages:
                await _io_async.call_hook(self._callback, rows)
                self.position, self.resume = _advanced(rows, self.position, self._where)
        except Exception as exc:  # kept for close(): a task has no caller to raise to
            self.error = exc

    @property
    def running(self) -> bool:
        """Whether the task is still delivering."""
        return not self._task.done()

    async def close(self) -> None:
        """Stop delivering and wait for the task to end; re-raise the callback's (or the
        server's) error if the subscription died of one. From inside the callback, the
        subscription stops once the callback returns."""
        self._closing = True  # seen at the next read even if the cancel is lost (3.10)
        if asyncio.current_task() is self._task:
            return
        self._task.cancel()
        await asyncio.wait([self._task])  # unlike awaiting it, lets our own cancel through
        if self.error is not None:
            raise self.error

    async def __aenter__(self) -> AsyncSubscription:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()


def _advanced(rows: list[Any], position: int, where: Callable[[], str] | None) -> tuple[int, str]:
    """A subscription's place after a batch: the last seq in it (a batch of drafts'
    events alone leaves it), and the resume id."""
    seq = next((row.seq for row in reversed(rows) if not isinstance(row, DraftEvent)), position)
    return seq, where() if where is not None else str(seq)
