"""The few things the asyncio client does differently from the sync one (its twin is
``_io_sync.py``); everything else of the client is generated from one source."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from ._redis_private import stream_writer

T = TypeVar("T")

sleep = asyncio.sleep


async def honouring_cancel(awaitable: Awaitable[T]) -> T:
    """``await awaitable``, then raise ``CancelledError`` if the task was cancelled meanwhile.

    A cancel can be lost on the way: redis-py sends under ``asyncio.wait_for``, which
    before Python 3.12 returns the result when the cancel lands as the send completes.
    The request is still counted by ``Task.cancelling()`` (3.11+), so it is honoured here;
    comparing with the count before the await leaves a cancel that was already handled
    (cleanup code in an ``except CancelledError``) alone."""
    task = asyncio.current_task()
    if task is None or not hasattr(task, "cancelling"):  # before 3.11: nothing counted
        return await awaitable
    before = task.cancelling()  # cancellations requested and not withdrawn
    result = await awaitable
    if task.cancelling() > before:
        raise asyncio.CancelledError
    return result


async def send(conn: Any, packed: list[bytes]) -> None:
    """``conn.send_packed_command(packed)``, written straight to the connection's stream
    when that cannot block: connected, no health check due, nothing buffered and the
    command under the transport's high-water mark (so no ``drain`` could wait). redis-py
    sends every command under ``asyncio.wait_for`` (its default ``socket_timeout`` is
    5 s), which on Python 3.11 is a new task and an event-loop iteration per command;
    here, a write that cannot wait needs no timeout. Anything else goes through redis-py,
    honouring a cancel its ``wait_for`` may lose.
    A failed write surfaces as a failed read, which the caller treats like a failed send
    (the reply is lost either way)."""
    writer = stream_writer(conn)
    if writer is not None and conn.is_connected and not conn.health_check_interval:
        transport = writer.transport
        if (
            isinstance(transport, asyncio.WriteTransport)  # not fakeredis's stand-in
            and not transport.is_closing()
            and not transport.get_write_buffer_size()
            and sum(map(len, packed)) <= transport.get_write_buffer_limits()[1]
        ):
            writer.writelines(packed)  # no await: no cancel can land here
            return
    await honouring_cancel(conn.send_packed_command(packed))


async def call_hook(hook: Callable[[Any], object], rows: Any) -> None:
    """Call a plain or async hook (``on_append``, a subscription's callback)."""
    result = hook(rows)
    if inspect.isawaitable(result):
        await honouring_cancel(result)
