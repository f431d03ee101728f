"""AG-UI's own client runtime against the event stream (``?protocol=ag-ui``): Node runs
``@ag-ui/client``'s ``HttpAgent`` (tests/js/agui_client.mjs), whose event verification and
message reducer apply every event, on a live conversation: it ends with the messages the
log holds, and a reconnect with ``Last-Event-ID`` (the largest seq it saw, from the
``msglog-<seq>`` message ids) gets exactly the messages after it.

Node (``node`` on the PATH) and the npm registry are required: the test installs
tests/js's locked packages (``npm ci``) when they are missing; without them it is skipped
locally and FAILS under ``CI=true``."""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis

from redis_msglog import MessageLog, StoredMessage
from redis_msglog.testing import EphemeralServer
from redis_msglog.web import create_app

from ..conftest import new_id, require_in_ci
from .test_web import allow, serving
from .test_web_agui import A_TOOL_TURN, write_a_tool_turn
from .test_web_drafts import LONG, stream_answer

pytestmark = pytest.mark.browser  # the JavaScript clients' tier, beside the browser's

JS = Path(__file__).resolve().parents[1] / "js"


def _require(available: bool, what: str) -> None:
    require_in_ci(available, what, "the JavaScript clients")


@pytest.fixture(scope="module")
def node() -> str:
    found = shutil.which("node")
    _require(found is not None and shutil.which("npm") is not None, "no node and npm")
    assert found is not None
    modules = JS / "node_modules"
    if not ((modules / "@ag-ui" / "client").is_dir() and (modules / "ai").is_dir()):
        installed = subprocess.run(
            ["npm", "ci", "--no-audit", "--no-fund", "--silent"],
            cwd=JS, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        _require(installed.returncode == 0, f"npm ci failed: {installed.stderr[-2000:]}")
    return found


def run_client(
    node: str, url: str, want: int, last_event_id: str | None = None, until: str | None = None
) -> Any:
    args = [node, str(JS / "agui_client.mjs"), url, str(want)]
    extra = [last_event_id or "", until] if until else [last_event_id] if last_event_id else []
    done = subprocess.run([*args, *extra], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr or done.stdout
    return orjson.loads(done.stdout)


@pytest.fixture
def served(shared_server: Callable[[str], EphemeralServer]) -> Iterator[tuple[str, MessageLog]]:
    url = shared_server("redis").url
    log = MessageLog(redis.Redis.from_url(url), new_id())
    with serving(create_app(redis.Redis.from_url(url), authorize=allow)) as base:
        yield f"{base}/conversations/{log.conversation}/events?protocol=ag-ui", log


def test_agui_client_follows_a_live_conversation_and_resumes_exactly(
    node: str, served: tuple[str, MessageLog]
) -> None:
    url, log = served
    write_a_tool_turn(log)

    def answer_later() -> None:  # committed while the client is connected
        time.sleep(1.0)
        log.append({"role": "assistant", "content": "1 + 2 = 3"})

    writer = threading.Thread(target=answer_later)
    writer.start()
    first = run_client(node, url, 4)
    writer.join()
    assert first["messages"] == [
        *A_TOOL_TURN,
        {"id": "msglog-4", "role": "assistant", "content": "1 + 2 = 3"},
    ]
    assert first["types"][:2] == ["RUN_STARTED", "MESSAGES_SNAPSHOT"]
    # Away, two more land; back with the largest seq it saw: exactly those, once each.
    seen = max(int(m["id"].removeprefix("msglog-")) for m in first["messages"])
    log.add("user", "and 2 + 2?")
    log.add("assistant", "4")
    second = run_client(node, url, 2, str(seen))
    assert [(m["id"], m["content"]) for m in second["messages"]] == [
        ("msglog-5", "and 2 + 2?"), ("msglog-6", "4"),
    ]  # fmt: skip
    assert "MESSAGES_SNAPSHOT" not in second["types"]  # resumed: no snapshot


def test_agui_client_builds_a_streamed_answer_from_its_draft(
    node: str, served: tuple[str, MessageLog]
) -> None:
    url, log = served
    log.add("user", "what is 1 + 2?")
    failed: list[BaseException] = []  # the writer's error, named if the client waits on

    def write() -> None:
        try:
            stream_answer(log, LONG, 0.02)
        except BaseException as exc:
            failed.append(exc)
            raise

    writer = threading.Thread(target=write)
    # The answer starts once the client is connected: started before, it could be
    # committed before a slow Node start (CI: over a second), leaving no commit to see.
    client = subprocess.Popen(
        [node, str(JS / "agui_client.mjs"), url, "0", "", "msglog.commit"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert client.stderr is not None
        first = client.stderr.readline()
        assert first == "connected\n", first + client.stderr.read()
        writer.start()
        out, err = client.communicate(timeout=60)
        assert client.returncode == 0, f"{err or out}; the writer: {failed or 'no error'}"
        got = orjson.loads(out)
    finally:
        client.kill()
        if writer.ident is not None:  # started
            writer.join(30)
    assert not failed
    [_, answer] = log.all()
    assert isinstance(answer, StoredMessage) and answer.tool_calls
    assert "TEXT_MESSAGE_CONTENT" in got["types"] and "TOOL_CALL_ARGS" in got["types"]
    built = [m for m in got["messages"] if m["id"] == answer.draft]
    assert len(built) == 1 and built[0]["content"] == answer.text
    [call] = built[0]["toolCalls"]
    assert orjson.loads(call["function"]["arguments"]) == answer.tool_calls[0].args


def test_the_ai_sdk_resumes_an_answer_after_a_reload_mid_answer(
    node: str, shared_server: Callable[[str], EphemeralServer]
) -> None:
    url = shared_server("redis").url
    log = MessageLog(redis.Redis.from_url(url), new_id())
    log.add("user", "count")
    with serving(create_app(redis.Redis.from_url(url), authorize=allow)) as base:
        stream = f"{base}/conversations/{log.conversation}/events?protocol=ai-sdk"
        pieces = [("text", f"{n}, ") for n in range(80)]
        writer = threading.Thread(target=stream_answer, args=(log, pieces, 0.02))
        writer.start()
        try:
            while not log.drafts():
                time.sleep(0.005)
            done = subprocess.run(
                [node, str(JS / "ai_sdk_client.mjs"), stream, "10"],
                capture_output=True, text=True, timeout=60,
            )  # fmt: skip
        finally:
            writer.join(30)
        assert done.returncode == 0, done.stderr or done.stdout
        got = orjson.loads(done.stdout)
        idle = subprocess.run(
            [node, str(JS / "ai_sdk_client.mjs"), stream, "0"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    [_, answer] = log.all()
    assert isinstance(answer, StoredMessage)

    def text(message: dict[str, Any]) -> str:
        return "".join(p["text"] for p in message["parts"] if p["type"] == "text")

    assert got["final"]["id"] == got["partial"]["id"] == answer.draft
    assert text(got["final"]) == answer.text  # replayed from its first delta: whole, once
    partial = text(got["partial"])
    assert partial and answer.text.startswith(partial) and partial != answer.text
    assert got["final"]["metadata"] == {"seq": 2, "outcome": "committed"}
    assert orjson.loads(idle.stdout) == {"partial": None, "final": None}  # 204: none now
