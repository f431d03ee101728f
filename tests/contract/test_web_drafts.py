"""Drafts on the web stream (docs/drafts.md, "On the web"): the events endpoint sends a
draft's start, deltas and end between the committed entries, each SSE ``id`` a resume
id, so a reconnect from any event, on either of two web apps, gets exactly the rest;
the same through AG-UI (every event validated by the ``ag-ui-protocol`` models) and the
AI SDK's UI message stream. Real servers, uvicorn, httpx."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from typing import Any

import httpx
import orjson
import pytest
import redis
import redis.asyncio

from redis_msglog import MessageLog, StoredMessage
from redis_msglog.testing import EphemeralServer
from redis_msglog.web import create_app

from ..conftest import new_id
from .test_web import Event, allow, serving, sse_events
from .test_web_agui import EVENT

PIECES = [
    ("reasoning", "Adding "),
    ("reasoning", "two numbers."),
    ("text", "The "),
    ("text", "sum "),
    ("call", '{"a": 1, '),
    ("call", '"b": 2}'),
    ("text", "is 3, "),
    ("text", "é✓ 🙂"),
]
LONG = PIECES[:4] + [("text", f"{n}, ") for n in range(30)] + PIECES[4:]
"""A longer answer, its tool call's arguments still written once."""


def stream_answer(log: MessageLog, pieces: list[tuple[str, str]], pause: float) -> int:
    """A draft written a piece per delta (each flushed), then committed: its seq."""
    with log.draft() as draft:
        for kind, text in pieces:
            if kind == "text":
                draft.write(text)
            elif kind == "reasoning":
                draft.write_reasoning(text)
            else:
                draft.write_tool_call("call_1", "add", text)
            draft.flush()
            time.sleep(pause)
    assert draft.seq is not None
    return draft.seq


def message_at(log: MessageLog, seq: int) -> StoredMessage:
    [row] = log.read(seq - 1, 1)
    assert isinstance(row, StoredMessage)
    return row


@pytest.fixture
def two_apps(
    shared_server: Callable[[str], EphemeralServer],
) -> Iterator[tuple[list[str], MessageLog]]:
    """Two web apps (two "nodes") on one server, the first on a sync client, the second
    on an asyncio one (its follower a task, not a thread), and a fresh conversation."""
    url = shared_server("redis").url
    log = MessageLog(redis.Redis.from_url(url), new_id())
    clients = [redis.Redis.from_url(url), redis.asyncio.Redis.from_url(url)]
    with ExitStack() as stack:
        bases = [
            stack.enter_context(serving(create_app(client, authorize=allow))) for client in clients
        ]
        yield bases, log


def events_until(
    base: str,
    conversation: str,
    until: Callable[[list[Event]], bool],
    *,
    query: str = "",
    headers: dict[str, str] | None = None,
) -> list[Event]:
    """The events (no heartbeats) of one connection until ``until(events)``; an
    AssertionError after a minute (the heartbeats keep an idle stream's reads short)."""
    got: list[Event] = []
    deadline = time.monotonic() + 60
    url = f"{base}/conversations/{conversation}/events{query}"
    with (
        httpx.Client(timeout=30) as http,
        http.stream("GET", url, headers=headers or {}) as response,
    ):
        assert response.status_code == 200, response.read()
        for event in sse_events(response.iter_lines()):
            if "comment" not in event:
                got.append(event)
            if until(got):
                return got
            if time.monotonic() > deadline:
                break
    raise AssertionError(f"the stream ended or stalled first: {got}")


def _has_message(got: list[Event]) -> bool:
    return any(e.get("event") == "message" and e["data"]["seq"] == 2 for e in got)


def _deltas(events: list[Event]) -> list[tuple[int, str, str]]:
    return [
        (e["data"]["pos"], e["data"]["kind"], e["data"]["text"])
        for e in events
        if e.get("event") == "draft-delta"
    ]


def test_every_cut_point_of_an_answer_resumes_exactly_on_either_node(
    two_apps: tuple[list[str], MessageLog],
) -> None:
    bases, log = two_apps
    log.add("user", "what is 1 + 2?")
    first: list[Event] = []

    def read_all() -> None:
        first.extend(events_until(bases[0], log.conversation, _has_message))

    reader = threading.Thread(target=read_all)
    reader.start()
    time.sleep(0.3)  # connected: the answer streams to it live
    seq = stream_answer(log, PIECES, 0.01)
    reader.join(30)
    assert seq == 2
    names = [e["event"] for e in first]
    assert names == [
        "message",
        "draft-start",
        *["draft-delta"] * len(PIECES),
        "draft-end",
        "message",
    ]
    message = message_at(log, 2)
    draft = first[1]["data"]["draft"]
    assert first[1]["data"] == {"draft": draft, "role": "assistant", "name": None}
    assert first[-2]["data"] == {"draft": draft, "outcome": "committed", "seq": 2}
    assert first[-1]["data"]["message"]["draft"] == draft == message.draft
    deltas = _deltas(first)
    assert [pos for pos, _, _ in deltas] == list(range(1, len(PIECES) + 1))
    assert "".join(t for _, k, t in deltas if k == "text") == message.text
    assert message.tool_calls is not None and message.tool_calls[0].args == {"a": 1, "b": 2}
    # The ids: a plain seq outside the draft, the seq and the draft's position inside.
    assert first[0]["id"] == "1" and first[-1]["id"] == "2"
    assert [e["id"] for e in first[1:-2]] == [f"1.{draft}:{n}" for n in range(len(PIECES) + 1)]
    for cut in range(len(first) - 1):  # each reconnect from event `cut`, alternate nodes
        rest = events_until(
            bases[cut % 2], log.conversation, _has_message,
            headers={"Last-Event-ID": first[cut]["id"]},
        )  # fmt: skip
        # From before the draft: it ended meanwhile, so it is only its message.
        assert rest == (first[-1:] if cut == 0 else first[cut + 1 :]), cut


def test_a_reconnect_mid_answer_on_the_other_node_gets_the_rest_once(
    two_apps: tuple[list[str], MessageLog],
) -> None:
    bases, log = two_apps
    log.add("user", "count to sixty")
    pieces = [("text", f"{n} ") for n in range(60)]
    writer = threading.Thread(target=stream_answer, args=(log, pieces, 0.01))
    writer.start()
    try:
        head = events_until(
            bases[0], log.conversation, lambda got: len(_deltas(got)) >= 10, query="?after=1"
        )
        tail = events_until(
            bases[1], log.conversation, _has_message, headers={"Last-Event-ID": head[-1]["id"]}
        )
    finally:
        writer.join(30)
    deltas = _deltas(head + tail)
    assert [pos for pos, _, _ in deltas] == list(range(1, 61))
    assert "".join(t for _, _, t in deltas) == message_at(log, 2).text
    assert time.monotonic() > 0 and tail[-1]["data"]["message"]["draft"] == head[0]["data"]["draft"]


def test_a_bad_resume_id_is_a_400(two_apps: tuple[list[str], MessageLog]) -> None:
    bases, log = two_apps
    url = f"{bases[0]}/conversations/{log.conversation}/events"
    for bad in ("x", "1.zz:1", "1." + "a" * 32 + ":-1", "-1", "1" * 20):
        response = httpx.get(url, headers={"Last-Event-ID": bad}, timeout=10)
        assert response.status_code == 400, bad
        assert response.json()["error"] == "InvalidArgumentError"
        assert httpx.get(url, params={"after": bad}, timeout=10).status_code == 400


# -- AG-UI ------------------------------------------------------------------------------


def agui_until(
    base: str, conversation: str, until: Callable[[list[dict[str, Any]]], bool], **headers: str
) -> list[dict[str, Any]]:
    """AG-UI events (SSE ``id`` as ``_id``), each validated by the protocol's models."""
    events = events_until(
        base, conversation, lambda got: until([e["data"] for e in got]),
        query="?protocol=ag-ui", headers=headers,
    )  # fmt: skip
    for event in events:
        EVENT.validate_python(event["data"])
    return [{**e["data"], "_id": e.get("id")} for e in events]


def _committed(events: list[dict[str, Any]]) -> bool:
    return any(e.get("name") == "msglog.commit" for e in events)


def test_agui_streams_a_draft_as_a_text_message_and_resumes_mid_answer(
    two_apps: tuple[list[str], MessageLog],
) -> None:
    bases, log = two_apps
    log.add("user", "what is 1 + 2?")
    writer = threading.Thread(target=stream_answer, args=(log, LONG, 0.02))
    writer.start()
    try:
        got = agui_until(bases[0], log.conversation, _committed)
        half = next(i for i, e in enumerate(got) if e["type"] == "TOOL_CALL_ARGS")
        again = agui_until(
            bases[1], log.conversation, _committed, **{"Last-Event-ID": got[half]["_id"]}
        )
    finally:
        writer.join(30)
    message = message_at(log, 2)
    draft = message.draft
    assert [e["type"] for e in got[:2]] == ["RUN_STARTED", "MESSAGES_SNAPSHOT"]
    text = "".join(e["delta"] for e in got if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert text == message.text
    args = "".join(e["delta"] for e in got if e["type"] == "TOOL_CALL_ARGS")
    assert orjson.loads(args) == message.tool_calls[0].args  # type: ignore[index]
    ends = [e for e in got if e["type"] == "CUSTOM"]
    assert [e["value"] for e in ends] == [
        {"messageId": draft, "outcome": "committed", "seq": 2},
        {"messageId": draft, "seq": 2, "interrupted": False},
    ]
    # Resumed mid-answer: the message and its open parts started again, then the rest.
    assert [e["type"] for e in again[:4]] == [
        "RUN_STARTED", "TEXT_MESSAGE_START", "REASONING_MESSAGE_START", "TOOL_CALL_START"
    ]  # fmt: skip
    assert [e for e in again[4:]] == got[half + 1 :]
    # A new connection's snapshot names the message by its draft's id.
    snap = agui_until(bases[0], log.conversation, lambda got: len(got) >= 2)[1]
    assert [m["id"] for m in snap["messages"]] == ["msglog-1", draft]


# -- the AI SDK's UI message stream ----------------------------------------------------


def test_ai_sdk_stream_is_one_answer_then_done_and_204_without_one(
    two_apps: tuple[list[str], MessageLog],
) -> None:
    bases, log = two_apps
    url = f"{bases[0]}/conversations/{log.conversation}/events?protocol=ai-sdk"
    idle = httpx.get(url, timeout=10)
    assert idle.status_code == 204  # no answer in progress: useChat's "no active stream"
    assert idle.headers["x-vercel-ai-ui-message-stream"] == "v1"
    log.add("user", "what is 1 + 2?")
    writer = threading.Thread(target=stream_answer, args=(log, LONG, 0.02))
    writer.start()
    try:
        while not log.drafts():
            time.sleep(0.005)
        chunks, ids = _ai_sdk(url, {})
        cut = max(i for i, one in enumerate(ids) if one == ids[len(ids) // 2])  # an event's last
        rest, _ = _ai_sdk(url, {"Last-Event-ID": ids[cut]})
    finally:
        writer.join(30)
    message = message_at(log, 2)
    assert chunks[0] == {"type": "start", "messageId": message.draft}
    assert chunks[-3:] == [
        {"type": "message-metadata", "messageMetadata": {"seq": 2, "outcome": "committed"}},
        {"type": "finish", "finishReason": "stop"},
        "[DONE]",
    ]
    assert "".join(c["delta"] for c in chunks[:-1] if c["type"] == "text-delta") == message.text
    done = [c for c in chunks if isinstance(c, dict) and c["type"] == "tool-input-available"]
    assert done == [
        {"type": "tool-input-available", "toolCallId": "call_1", "toolName": "add",
         "input": orjson.loads("".join(p for k, p in LONG if k == "call"))},
    ]  # fmt: skip
    # Resumed from an id: start and the open parts' starts, then exactly the rest.
    opened = [c for c in chunks[1 : cut + 1] if c["type"].endswith("-start")]
    assert rest == [chunks[0], *opened, *chunks[cut + 1 :]]


def _ai_sdk(url: str, headers: dict[str, str]) -> tuple[list[Any], list[str]]:
    """The chunks of one AI SDK stream, to its end, and each chunk's SSE id."""
    chunks: list[Any] = []
    ids: list[str] = []
    with httpx.Client(timeout=30) as http, http.stream("GET", url, headers=headers) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["x-vercel-ai-ui-message-stream"] == "v1"
        for event in _raw_events(response.iter_lines()):
            data = event["data"]
            chunks.append("[DONE]" if data == "[DONE]" else orjson.loads(data))
            ids.append(event.get("id", ""))
    return chunks, ids


def _raw_events(lines: Iterator[str]) -> Iterator[dict[str, str]]:
    event: dict[str, str] = {}
    for line in lines:
        if line == "":
            if "data" in event:
                yield event
            event = {}
        elif not line.startswith(":"):
            name, _, value = line.partition(": ")
            event[name] = value
