"""``follow(drafts=True)`` on AsyncMessageLog: the committed entries and the drafts'
events, in order, with the resume id after each (``_core/drafts/cursor.py``)."""

from __future__ import annotations

import collections
from collections.abc import AsyncIterator, Callable
from typing import Any

from .._core.drafts.cursor import DraftTracker, Item
from .._core.read.follow import FollowCursor


class AsyncDraftFollow:
    """An iterator over a conversation's committed entries and its drafts' events
    (:class:`~redis_msglog.DraftStarted`, :class:`~redis_msglog.DraftDelta`,
    :class:`~redis_msglog.DraftEnded`), live, for as long as it is iterated.

    ``resume``: the position after the last item handed out, to pass back as ``after``
    (a str; docs/drafts.md): a follow resumed from it gets every later delta and entry
    exactly once."""

    def __init__(self, log: Any, cursor: FollowCursor, tracker: DraftTracker) -> None:
        self._log, self._cursor, self._tracker = log, cursor, tracker
        self._items: collections.deque[tuple[Item, str]] = collections.deque()
        self.resume = tracker.resume(cursor.position)

    def __aiter__(self) -> AsyncDraftFollow:
        return self

    async def __anext__(self) -> Item:
        item, self.resume = await self._next()
        return item

    async def _next(self) -> tuple[Item, str]:
        """The next item and the resume id after it (the web stream reads these)."""
        while not self._items:
            await self._page()
        return self._items.popleft()

    async def _page(self) -> None:
        log, cursor, tracker = self._log, self._cursor, self._tracker
        if tracker.feed is None:
            self._items.extend(await log._run(tracker.start_plan(cursor.position)))
        cursor.other_streams = tracker.streams()
        seq = cursor.position
        rows = await log._follow_page(cursor)
        others, cursor.other_entries = cursor.other_entries, {}
        if rows or others:
            self._items.extend(await log._run(tracker.page_plan(others, rows, seq)))
        elif tracker.positions:  # a wait with nothing new, while drafts are followed
            ended, lapsed = await log._run(tracker.idle_plan(seq))
            self._items.extend(ended)
            for draft_id in lapsed:
                await log._settle_draft(draft_id, "interrupt")

    async def _pages(self, stopped: Callable[[], bool]) -> AsyncIterator[list[Item]]:
        """Non-empty pages of items until ``stopped()`` (a subscription's): ``resume``
        is the position after each page once it is handed out."""
        while not stopped():
            await self._page()
            if self._items:
                page = list(self._items)
                self._items.clear()
                self.resume = page[-1][1]
                yield [item for item, _ in page]
