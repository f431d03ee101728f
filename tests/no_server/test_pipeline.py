"""The one pipeline helper both a write and a read go through (``_carrier._pipeline``),
on a scripted connection: no server needed.

A write is sent once (a failure after sending is ``ReplyLost``, the connection
disconnected); the reply of a ``WAIT`` behind it may be an error (a durability
shortfall); a read keeps the replies of an earlier try after a redirection; on the
target of an ``ASK`` every command is preceded by ``ASKING``."""

from __future__ import annotations

from collections import deque
from types import SimpleNamespace
from typing import Any

import pytest
from redis import exceptions as redis_errors

from redis_msglog._core.steps import Command, ReplyLost
from redis_msglog._sync._carrier import _pipeline

APPEND: Command = ("EVALSHA", "ab" * 20, 1, "k", "v")
WAIT: Command = ("WAIT", 1, 100)


class ScriptedConnection:
    """Records what is sent; answers each read with the next scripted reply (an
    exception instance is raised, as redis-py raises an error reply)."""

    def __init__(self, *replies: Any) -> None:
        self.encoder = SimpleNamespace(encoding="latin-1", encoding_errors="strict")
        self.replies = deque(replies)
        self.sent: list[list[Command]] = []
        self.disconnected = False

    def pack_commands(self, commands: list[Command]) -> list[Any]:
        return list(commands)

    def send_packed_command(self, packed: list[Command]) -> None:
        self.sent.append(packed)

    def read_response(self) -> Any:
        reply = self.replies.popleft()
        if isinstance(reply, BaseException):
            raise reply
        return reply

    def disconnect(self) -> None:
        self.disconnected = True


def test_a_write_is_sent_once_and_its_reply_returned() -> None:
    conn = ScriptedConnection([1, "ok"])
    assert _pipeline(conn, (APPEND,), False) == [[1, "ok"]]
    assert conn.sent == [[APPEND]]


def test_a_refused_wait_behind_a_write_comes_back_as_a_durability_shortfall() -> None:
    shortfall = redis_errors.ResponseError("NOREPLICAS not enough good replicas")
    conn = ScriptedConnection([1, "ok"], shortfall)
    assert _pipeline(conn, (APPEND, WAIT), False) == [[1, "ok"], shortfall]
    assert conn.sent == [[APPEND, WAIT]]


def test_a_refused_write_raises_after_every_reply_is_read() -> None:
    conn = ScriptedConnection(redis_errors.ResponseError("MSGLOG_BADSEQ 3"), 0)
    with pytest.raises(redis_errors.ResponseError, match="MSGLOG_BADSEQ"):
        _pipeline(conn, (APPEND, WAIT), False)
    assert not conn.replies and not conn.disconnected  # nothing left unread on it


def test_a_write_whose_reply_is_lost_is_reply_lost_and_disconnects() -> None:
    conn = ScriptedConnection(redis_errors.ConnectionError("Connection reset by peer"))
    with pytest.raises(ReplyLost, match="reset"):
        _pipeline(conn, (APPEND,), False)
    assert conn.disconnected and conn.sent == [[APPEND]]


def test_a_login_refused_is_raised_as_it_is() -> None:
    conn = ScriptedConnection(redis_errors.BusyLoadingError("Redis is loading"))
    with pytest.raises(redis_errors.BusyLoadingError):
        _pipeline(conn, (APPEND,), False)
    assert not conn.disconnected


def test_a_read_keeps_the_replies_of_a_try_before_a_redirection() -> None:
    commands: tuple[Command, ...] = (("GET", "a"), ("XLEN", "s"), ("GET", "c"))
    kept: dict[int, Any] = {}
    moved = redis_errors.MovedError("3999 127.0.0.1:7001")
    first = ScriptedConnection("1", moved, "3")
    with pytest.raises(redis_errors.MovedError):
        _pipeline(first, commands, False, kept)
    assert kept == {0: "1", 2: "3"}
    second = ScriptedConnection("OK", 7)  # the ASK target: ASKING, then the missing one
    _pipeline(second, commands, True, kept)
    assert second.sent == [[("ASKING",), ("XLEN", "s")]]
    assert [kept[i] for i in range(3)] == ["1", 7, "3"]


def test_a_failed_read_is_raised_as_it_is_for_the_plan_to_read_again() -> None:
    conn = ScriptedConnection(redis_errors.TimeoutError("Timeout reading from socket"))
    with pytest.raises(redis_errors.TimeoutError):
        _pipeline(conn, (("GET", "a"),), False, {})
    assert not conn.disconnected  # the router discards it


def test_on_an_ask_target_every_command_of_a_write_follows_asking() -> None:
    conn = ScriptedConnection("OK", [1, "ok"], "OK", 1)
    assert _pipeline(conn, (APPEND, WAIT), True) == [[1, "ok"], 1]
    assert conn.sent == [[("ASKING",), APPEND, ("ASKING",), WAIT]]
