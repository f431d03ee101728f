"""The few things the asyncio client does differently from the sync one (its twin is
``_io_sync.py``); everything else of the client is generated from one source."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")

sleep = asyncio.sleep


def _cancel_requests() -> int:
    """Cancellations requested of the current task and not withdrawn (0 before 3.11)."""
    task = asyncio.current_task()
    return task.cancelling() if task is not None and hasattr(task, "cancelling") else 0


async def honouring_cancel(awaitable: Awaitable[T]) -> T:
    """``await awaitable``, then raise ``CancelledError`` if the task was cancelled meanwhile.

    A cancel can be lost on the way: redis-py sends under ``asyncio.wait_for``, which
    before Python 3.12 returns the result when the cancel lands as the send completes.
    The request is still counted by ``Task.cancelling()`` (3.11+), so it is honoured here;
    comparing with the count before the await leaves a cancel that was already handled
    (cleanup code in an ``except CancelledError``) alone."""
    before = _cancel_requests()
    result = await awaitable
    if _cancel_requests() > before:
        raise asyncio.CancelledError
    return result


async def call_hook(hook: Callable[[Any], object], rows: Any) -> None:
    """Call a plain or async hook (``on_append``, a subscription's callback)."""
    result = hook(rows)
    if inspect.isawaitable(result):
        await honouring_cancel(result)
