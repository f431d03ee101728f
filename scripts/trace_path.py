"""Trace the path of one ``MessageLog.append`` and one cold ``all()`` through the package.

    python scripts/trace_path.py [--calls]

Starts a private server, warms a log up (so the once-per-client checks are done), then
records, with ``sys.setprofile``, every function of ``redis_msglog`` entered during one
append and one ``all()`` of a fresh log object (cold: nothing cached). Prints, for each:
the functions entered (distinct), the files, the file switches (how often the next
function entered is in another file than the last) and the round trips (writes to a
socket). ``--calls`` lists the functions.
Issue 24 asks for these numbers before and after a restructuring: run it on both trees.
"""

from __future__ import annotations

import argparse
import itertools
import socket
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import redis

import redis_msglog
from redis_msglog import MessageLog
from redis_msglog.testing import EphemeralServer, find_server_binary

PACKAGE = str(Path(redis_msglog.__file__).parent)


def trace(call: Callable[[], Any]) -> tuple[list[tuple[str, str]], int]:
    """The package functions entered while ``call`` runs, in order (file, function), and
    the round trips it made (writes to a socket: a pipelined round trip is one write)."""
    entered: list[tuple[str, str]] = []
    writes = 0
    sendall = socket.socket.sendall

    def counting_sendall(sock: socket.socket, data: Any, *rest: Any) -> None:
        nonlocal writes
        writes += 1
        sendall(sock, data, *rest)

    def profile(frame: FrameType, event: str, _arg: Any) -> None:
        if event == "call" and frame.f_code.co_filename.startswith(PACKAGE):
            name = frame.f_code.co_filename[len(PACKAGE) + 1 :]
            entered.append((name, getattr(frame.f_code, "co_qualname", frame.f_code.co_name)))

    socket.socket.sendall = counting_sendall  # type: ignore[method-assign,assignment]
    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(None)
        socket.socket.sendall = sendall  # type: ignore[method-assign]
    return entered, writes


def summary(label: str, traced: tuple[list[tuple[str, str]], int], show: bool) -> None:
    entered, writes = traced
    files = [f for f, _ in entered]
    switches = sum(1 for a, b in itertools.pairwise(files) if a != b)
    distinct = list(dict.fromkeys(entered))
    print(
        f"{label}: {len(distinct)} functions ({len(entered)} calls) in "
        f"{len(set(files))} files, {switches} file switches, {writes} round trips"
    )
    if show:
        for file, func in distinct:
            print(f"    {file}:{func}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", action="store_true", help="list the functions entered")
    args = parser.parse_args()
    binary = find_server_binary()
    assert binary is not None, "no valkey-server or redis-server found"
    with EphemeralServer(binary) as server:
        client = redis.Redis.from_url(server.url)
        conversation = f"trace-{uuid.uuid4().hex[:8]}"
        log = MessageLog(client, conversation)
        log.add("user", "warm-up")  # the once-per-client checks, the script loaded
        summary("append", trace(lambda: log.add("assistant", "hello")), args.calls)
        reader = redis.Redis.from_url(server.url)
        reader.ping()  # connected before: the trace counts the read's round trips only
        cold = MessageLog(reader, conversation)
        summary("all() cold", trace(cold.all), args.calls)
        summary("all() warm", trace(cold.all), args.calls)


if __name__ == "__main__":
    main()
