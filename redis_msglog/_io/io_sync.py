"""The few things the sync client does differently from the asyncio one (its twin is
``_io/io_async.py``); everything else of the client is generated from one source."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

sleep = time.sleep


def honouring_cancel(result: T) -> T:
    """Nothing to honour: a thread is not cancelled (the asyncio twin checks its task)."""
    return result


def call_hook(hook: Callable[[Any], object], rows: Any) -> None:
    """Call a hook (``on_append``, a subscription's callback)."""
    hook(rows)


def write_now(conn: Any, packed: list[bytes]) -> bool:
    """``conn.send_packed_command(packed)``: always written (the asyncio twin writes to
    the stream when that cannot block, to skip ``asyncio.wait_for``)."""
    conn.send_packed_command(packed)
    return True


def send(conn: Any, packed: list[bytes]) -> None:
    """``conn.send_packed_command(packed)`` (:func:`write_now` always writes first)."""
    conn.send_packed_command(packed)


def read_reply(conn: Any) -> Any:
    """``conn.read_response()`` (the asyncio twin bounds it with a shared timer)."""
    return conn.read_response()
