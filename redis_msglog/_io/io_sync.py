"""The few things the sync client does differently from the asyncio one (its twin is
``_io/io_async.py``); everything else of the client is generated from one source."""

from __future__ import annotations

import threading
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


Lock = threading.Lock


class Ticker:
    """Calls ``tick()`` from a thread of its own every ``interval`` seconds, and ``soon``
    seconds after each :meth:`poke`, until :meth:`stop` (a draft writer's flush of its
    pending deltas and heartbeat; the asyncio twin runs a task)."""

    def __init__(self, tick: Callable[[], object], interval: float, soon: float) -> None:
        self._tick, self._interval, self._soon = tick, interval, soon
        self._poked, self._stopped = threading.Event(), threading.Event()
        self._thread = threading.Thread(target=self._run, name="msglog-draft", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def poke(self) -> None:
        self._poked.set()

    def stop(self) -> None:
        self._stopped.set()
        self._poked.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()

    def _run(self) -> None:
        while not self._stopped.is_set():
            if self._poked.wait(self._interval):
                self._poked.clear()
                if self._stopped.wait(self._soon):
                    return
            if self._stopped.is_set():
                return
            self._tick()
