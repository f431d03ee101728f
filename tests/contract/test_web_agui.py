"""The event stream in AG-UI (``?protocol=ag-ui``, redis_msglog/web/_agui.py): every event
validated against the ``ag-ui-protocol`` models, a snapshot of the visible view on
connect, each committed message as its text and tool-call events, an edit as a new
snapshot, and a reconnect with ``Last-Event-ID`` that gets the rest exactly once. The
``@ag-ui/client`` runtime under Node is in test_web_agui_node.py."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import ag_ui.core as agui
import httpx
import pytest
import redis
from pydantic import TypeAdapter

from redis_msglog import MessageLog
from redis_msglog.testing import EphemeralServer
from redis_msglog.web import create_app

from ..conftest import new_id
from .test_web import allow, serving, sse_events

EVENT: TypeAdapter[Any] = TypeAdapter(agui.Event)  # every AG-UI event, by its type


@pytest.fixture
def served(shared_server: Callable[[str], EphemeralServer]) -> Iterator[tuple[str, MessageLog]]:
    url = shared_server("redis").url
    app = create_app(redis.Redis.from_url(url), authorize=allow)
    log = MessageLog(redis.Redis.from_url(url), new_id())
    with serving(app) as base:
        yield base, log


def agui_events(
    base: str, log: MessageLog, until: Callable[[list[dict[str, Any]]], bool], **headers: str
) -> list[dict[str, Any]]:
    """The AG-UI events of one connection (SSE ``id`` kept as ``_id``), each validated by
    the protocol's own models, until ``until(events)``."""
    got: list[dict[str, Any]] = []
    url = f"{base}/conversations/{log.conversation}/events?protocol=ag-ui"
    with httpx.Client(timeout=30) as http, http.stream("GET", url, headers=headers) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        for event in sse_events(response.iter_lines()):
            if "comment" in event:
                continue
            data = event["data"]
            EVENT.validate_python(data)  # the ag-ui-protocol models accept it
            got.append({**data, "_id": event.get("id")})
            if until(got):
                return got
    raise AssertionError(f"the stream ended first: {got}")


def write_a_tool_turn(log: MessageLog) -> None:
    """A question, a tool call, its result: seqs 1 to 3 (:data:`A_TOOL_TURN` in AG-UI)."""
    log.add("user", "what is 1 + 2?")
    log.append({"role": "assistant", "content": "", "tool_calls": [
        {"id": "c1", "name": "add", "arguments": '{"a": 1, "b": 2}'}]})  # fmt: skip
    log.append({"role": "tool", "content": "3", "tool_call_id": "c1"})


A_TOOL_TURN = [
    {"id": "msglog-1", "role": "user", "content": "what is 1 + 2?"},
    {"id": "msglog-2", "role": "assistant", "content": "", "toolCalls": [
        {"id": "c1", "type": "function",
         "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'}}]},
    {"id": "msglog-3", "role": "tool", "content": "3", "toolCallId": "c1"},
]  # fmt: skip
"""The AG-UI messages of :func:`write_a_tool_turn`'s rows."""


def types(events: list[dict[str, Any]]) -> list[str]:
    return [e["type"] for e in events]


def test_a_connection_is_a_run_a_snapshot_then_each_message_as_it_lands(
    served: tuple[str, MessageLog],
) -> None:
    base, log = served
    write_a_tool_turn(log)
    opened = agui_events(base, log, lambda got: len(got) == 2)
    assert types(opened) == ["RUN_STARTED", "MESSAGES_SNAPSHOT"]
    assert opened[0]["threadId"] == log.conversation
    assert opened[1]["_id"] == "3"  # the seq it covers: a resume point
    assert opened[1]["messages"] == A_TOOL_TURN
    log.append({"role": "assistant", "content": "1 + 2 = 3", "name": "calc"})
    resumed = agui_events(base, log, lambda got: "TEXT_MESSAGE_END" in types(got),
                          **{"Last-Event-ID": "3"})  # fmt: skip
    assert resumed[1:] == [
        {"type": "TEXT_MESSAGE_START", "messageId": "msglog-4", "role": "assistant",
         "name": "calc", "_id": None},
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": "msglog-4", "delta": "1 + 2 = 3",
         "_id": None},
        {"type": "TEXT_MESSAGE_END", "messageId": "msglog-4", "_id": "4"},
    ]  # fmt: skip
    assert types(resumed)[0] == "RUN_STARTED"  # a resumed run: no snapshot


def test_live_messages_and_an_edit_arrive_on_an_open_connection(
    served: tuple[str, MessageLog],
) -> None:
    base, log = served
    log.add("user", "hi")
    events: list[dict[str, Any]] = []

    def more(got: list[dict[str, Any]]) -> bool:
        if len(got) == 2:  # the snapshot is in: write while the stream is open
            log.append({"role": "assistant", "content": "", "tool_calls": [
                {"id": "k", "name": "look", "args": {"q": "x"}}]})  # fmt: skip
            log.retract([1])
        return types(got).count("MESSAGES_SNAPSHOT") == 2

    events = agui_events(base, log, more)
    assert types(events) == [
        "RUN_STARTED", "MESSAGES_SNAPSHOT", "TEXT_MESSAGE_START", "TEXT_MESSAGE_END",
        "TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END", "CUSTOM", "MESSAGES_SNAPSHOT",
    ]  # fmt: skip
    assert events[5]["delta"] == '{"q":"x"}' and events[4]["parentMessageId"] == "msglog-2"
    assert events[7]["name"] == "msglog.edit" and events[7]["value"]["op"] == "retract"
    assert [m["id"] for m in events[8]["messages"]] == ["msglog-2"]  # the view after it
    assert events[8]["_id"] == "3" and events[6]["_id"] == "2"


def test_an_unknown_protocol_is_a_400(served: tuple[str, MessageLog]) -> None:
    base, log = served
    url = f"{base}/conversations/{log.conversation}/events?protocol=nope"
    response = httpx.get(url, timeout=10)
    assert response.status_code == 400 and "ag-ui" in response.text
