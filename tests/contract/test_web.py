"""The web app (redis_msglog.web, docs/web.md) through the real stack: uvicorn on a free
loopback port, httpx clients, real servers. The event stream's resume contract under
writers that append and edit from 8 processes, a server restart, a cluster; one shared
follower per conversation; the per-client bound; authorize before any Redis call;
appends with Idempotency-Key and If-Match; bad input refused with nothing written."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import multiprocessing
import os
import random
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from multiprocessing.process import BaseProcess
from typing import Any

import httpx
import orjson
import pytest
import redis
import redis.asyncio.cluster
import uvicorn
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from redis.crc import key_slot

from redis_msglog import ConversationKeys, InvalidArgumentError, InvalidEditError, MessageLog
from redis_msglog._cli import main as cli
from redis_msglog.testing import EphemeralServer
from redis_msglog.web import create_app

from ..conftest import free_tcp_port, new_id, require_binary
from ..support.cluster import LocalCluster

WRITERS = 8
JSON = {"Content-Type": "application/json"}
ROUNDS = 16  # each: an append of 1, an append of 2, then a retract or a pop


def allow(request: Any, conversation: str, action: str) -> bool:
    return True


@contextmanager
def serving(app: Any) -> Iterator[str]:
    """``app`` under uvicorn in a thread, on a free loopback port: its base URL."""
    port = free_tcp_port()
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, log_level="warning", timeout_graceful_shutdown=2
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        if not thread.is_alive():
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)


Event = dict[str, Any]


def sse_events(lines: Iterator[str]) -> Iterator[Event]:
    """The events (and ``{"comment": ...}`` heartbeats) of an SSE body, as they come."""
    event: Event = {}
    for line in lines:
        if line == "":
            if event:
                yield event
            event = {}
        elif line.startswith(":"):
            yield {"comment": line[1:].strip()}
        else:
            name, _, value = line.partition(": ")
            event[name] = orjson.loads(value) if name == "data" else value


def read_events(
    base: str, conversation: str, headers: dict[str, str], stop: Callable[[list[Event]], bool]
) -> list[Event]:
    """Events (no heartbeats) of one connection, until ``stop(events)`` or its end."""
    got: list[Event] = []
    url = f"{base}/conversations/{conversation}/events"
    with httpx.Client(timeout=30) as http, http.stream("GET", url, headers=headers) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        for event in sse_events(response.iter_lines()):
            if "comment" not in event:
                got.append(event)
            if stop(got):
                break
    return got


def physical(url: str, conversation: str) -> list[tuple[int, str]]:
    rows = MessageLog(redis.Redis.from_url(url), conversation).read(view="physical")
    return [(row.seq, "message" if hasattr(row, "role") else "edit") for row in rows]


def _writer(url: str, conversation: str, worker: int, go: Any) -> None:
    """Appends and edits: each round an append, an append of 2, then a retract of its
    own first row or a pop of whatever is newest."""
    log = MessageLog(redis.Redis.from_url(url), conversation)
    go.wait(60)  # all together, once every process has started
    for i in range(ROUNDS):
        seq = log.add("user", f"{worker}:{i}")
        log.append_many(
            [{"role": "assistant", "content": f"{worker}:{i}a"}, {"role": "user", "content": "b"}]
        )
        try:  # its own first row, unless another writer popped it first
            log.retract([seq]) if i % 2 else log.pop()
        except InvalidEditError:
            log.pop()
        time.sleep(0.02)  # spread the run out: the readers reconnect mid-run, many times


def _resuming_reader(
    base: str, conversation: str, total: int, seed: int, writers: Sequence[BaseProcess]
) -> tuple[list[Event], int]:
    """Events read a few at a time, reconnecting with the last id each time, up to
    ``total``: (the events, the number of connections)."""
    seen: list[Event] = []
    connections, chunk = 0, random.Random(seed)
    while len(seen) < total:
        want = chunk.randint(1, 30)

        def enough(got: list[Event], want: int = want, before: int = len(seen)) -> bool:
            crashed = any(w.exitcode not in (None, 0) for w in writers)  # stop waiting then
            return crashed or len(got) >= want or before + len(got) >= total

        headers = {"Last-Event-ID": seen[-1]["id"]} if seen else {}
        seen += read_events(base, conversation, headers, enough)
        connections += 1
        assert all(w.exitcode in (None, 0) for w in writers)
    return seen, connections


def _late_reader(url: str, base: str, conversation: str, total: int) -> list[Event]:
    """Connects once the writers are well under way, from the start: a backlog of several
    pages read while the follower already delivers what comes next."""
    log = MessageLog(redis.Redis.from_url(url), conversation)
    while log.count() < total // 4:
        time.sleep(0.001)
    return read_events(base, conversation, {}, lambda got: len(got) >= total)


def test_resume_is_exact_while_eight_processes_append_and_edit(
    shared_server: Callable[[str], EphemeralServer],
) -> None:
    """While 8 processes append and edit: two clients that drop their connection every
    few events and resume with the last id they saw, and one that connects late and
    stays, get every entry, messages and edits, exactly once and in order."""
    url = shared_server("redis").url
    conversation = new_id()
    context = multiprocessing.get_context("spawn")
    go = context.Event()
    writers = [
        context.Process(target=_writer, args=(url, conversation, w, go)) for w in range(WRITERS)
    ]
    for writer in writers:
        writer.start()
    total = WRITERS * ROUNDS * 4  # every round: 3 messages and 1 edit
    # Pages of 4: a backlog takes several reads, while the follower delivers live entries.
    app = create_app(redis.Redis.from_url(url), authorize=allow, heartbeat=0.2, page_size=4)
    with serving(app) as base, ThreadPoolExecutor() as pool:
        resuming = [
            pool.submit(_resuming_reader, base, conversation, total, seed, writers)
            for seed in range(2)
        ]
        time.sleep(0.2)  # connected: the readers wait for the first entry
        go.set()
        late = pool.submit(_late_reader, url, base, conversation, total)
        results = [reader.result(timeout=120) for reader in resuming]
        streams = [seen for seen, _ in results] + [late.result(timeout=120)]
    for writer in writers:
        writer.join(timeout=120)
        assert writer.exitcode == 0
    expected = physical(url, conversation)
    assert len(expected) == total
    assert all(connections > 10 for _, connections in results)
    for seen in streams:
        assert [(int(e["id"]), e["event"]) for e in seen] == expected
        assert all(event["data"]["seq"] == int(event["id"]) for event in seen)
    edits = [e["data"]["edit"] for e in streams[0] if e["event"] == "edit"]
    assert len(edits) == WRITERS * ROUNDS and all(e["op"] == "retract" for e in edits)


def test_the_stream_waits_out_a_redis_restart(
    real_backend: str, private_server: Callable[..., EphemeralServer]
) -> None:
    server = private_server(real_backend, ["--appendonly", "yes"])
    conversation = new_id()
    log = MessageLog(redis.Redis.from_url(server.url), conversation)
    log.append_many([{"role": "user", "content": str(i)} for i in range(3)])
    app = create_app(redis.Redis.from_url(server.url), authorize=allow, heartbeat=0.2)
    got: list[Event] = []
    with serving(app) as base:
        url = f"{base}/conversations/{conversation}/events?after=1"
        with httpx.Client(timeout=60) as http, http.stream("GET", url) as response:
            events = sse_events(response.iter_lines())
            while len(got) < 2:
                if "comment" not in (event := next(events)):
                    got.append(event)
            server.restart()
            log.add("user", "after the restart")
            while len(got) < 3:
                if "comment" not in (event := next(events)):
                    got.append(event)
    assert [event["id"] for event in got] == ["2", "3", "4"]
    assert got[2]["data"]["message"] == {"role": "user", "content": "after the restart"}


def _follower_threads() -> int:
    return sum(t.name.startswith("msglog-web-follower-") for t in threading.enumerate())


def test_one_follower_per_conversation_for_many_clients(
    shared_server: Callable[[str], EphemeralServer],
) -> None:
    """Twenty clients of one conversation share one follower (one thread, one Redis
    reader), started by the first and stopped after the last leaves."""
    url = shared_server("redis").url
    conversation, clients = new_id(), 20
    log = MessageLog(redis.Redis.from_url(url), conversation)
    log.add("user", "before")
    app = create_app(redis.Redis.from_url(url), authorize=allow, heartbeat=0.2)
    hub = app.state.msglog.hub
    threads_before = _follower_threads()

    async def client(http: httpx.AsyncClient, ready: asyncio.Event) -> list[int]:
        seqs: list[int] = []
        path = f"/conversations/{conversation}/events"
        async with http.stream("GET", path, params={"after": "0"}) as response:
            async for line in response.aiter_lines():
                if line.startswith("id: "):
                    seqs.append(int(line[4:]))
                    ready.set()
                    if len(seqs) == 2:
                        return seqs
        return seqs

    async def run(base: str) -> tuple[list[list[int]], int, int]:
        async with httpx.AsyncClient(base_url=base, timeout=30) as http:
            ready = [asyncio.Event() for _ in range(clients)]
            tasks = [asyncio.create_task(client(http, r)) for r in ready]
            await asyncio.gather(*(r.wait() for r in ready))  # all 20 connected, backlog read
            followers, threads = hub.followers, _follower_threads() - threads_before
            await asyncio.to_thread(log.add, "assistant", "live")
            return await asyncio.gather(*tasks), followers, threads

    with serving(app) as base:
        seqs, followers, threads = asyncio.run(run(base))
        assert (followers, threads) == (1, 1)
        assert seqs == [[1, 2]] * clients
        for _ in range(500):  # the last client left: the follower stops
            if hub.followers == 0 and _follower_threads() == threads_before:
                break
            time.sleep(0.02)
        assert (hub.followers, _follower_threads()) == (0, threads_before)


def test_a_slow_client_overflows_and_resumes(
    shared_server: Callable[[str], EphemeralServer],
) -> None:
    """A client that does not read gets at most ``max_queue`` events buffered for it, then
    ``event: overflow`` and the end of its stream; resuming from its last id gets the rest."""
    url = shared_server("redis").url
    conversation = new_id()
    log = MessageLog(redis.Redis.from_url(url), conversation)
    app = create_app(redis.Redis.from_url(url), authorize=allow, heartbeat=0.2, max_queue=3)
    big, count = "x" * 512 * 1024, 40  # 20 MiB: more than the socket buffers hold
    with serving(app) as base:
        path = f"{base}/conversations/{conversation}/events"
        with httpx.Client(timeout=60) as http, http.stream("GET", path) as response:
            lines = response.iter_lines()
            assert next(lines) == ": hb"  # connected, and its follower started
            for i in range(count):
                log.add("user", f"{i}{big}")
            got = list(sse_events(lines))  # until the server ends the stream
        events = [event for event in got if "comment" not in event]
        assert events[-1]["event"] == "overflow"
        assert events[-1]["data"]["error"] == "overflow"
        ids = [int(event["id"]) for event in events[:-1]]
        assert ids == list(range(1, len(ids) + 1)) and len(ids) < count
        rest = read_events(
            base,
            conversation,
            {"Last-Event-ID": str(ids[-1])},
            lambda g: len(g) + len(ids) >= count,
        )
        assert [int(event["id"]) for event in rest] == list(range(len(ids) + 1, count + 1))


def _command_calls(client: redis.Redis) -> int:
    stats = client.info("commandstats")
    return sum(
        value["calls"]
        for name, value in stats.items()
        if name not in ("cmdstat_info", "cmdstat_config|resetstat", "cmdstat_config")
    )


def test_denied_is_403_before_any_redis_call(
    private_server: Callable[..., EphemeralServer],
) -> None:
    server = private_server("redis")
    admin = redis.Redis.from_url(server.url)
    conversation = new_id()
    asked: list[tuple[str, str]] = []

    async def deny(request: Any, conversation: str, action: str) -> bool:
        asked.append((conversation, action))
        return False

    app = create_app(redis.Redis.from_url(server.url), authorize=deny, allow_appends=True)
    truthy = create_app(redis.Redis.from_url(server.url), authorize=lambda *a: 1)  # type: ignore[arg-type]
    digest = "0" * 64
    with serving(app) as base, serving(truthy) as truthy_base, httpx.Client(timeout=30) as http:
        admin.config_resetstat()
        path = f"/conversations/{conversation}"
        responses = [
            http.get(f"{base}{path}/events"),
            http.get(f"{base}{path}/messages"),
            http.get(f"{base}{path}/blobs/{digest}"),
            http.post(f"{base}{path}/messages", json={"role": "user", "content": "x"}),
            http.get(f"{truthy_base}{path}/messages"),  # only True lets a request in
        ]
        assert _command_calls(admin) == 0
    assert [r.status_code for r in responses] == [403] * 5
    assert {r.json()["error"] for r in responses} == {"Forbidden"}
    assert asked == [(conversation, a) for a in ("read", "read", "read", "append")]
    assert admin.dbsize() == 0


def test_create_app_needs_an_authorize_hook() -> None:
    client = redis.Redis()
    with pytest.raises(InvalidArgumentError, match="authorize"):
        create_app(client)
    with pytest.raises(InvalidArgumentError, match="authorize"):
        create_app(client, authorize="yes")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="heartbeat"):
        create_app(client, authorize=allow, heartbeat=0)
    with pytest.raises(InvalidArgumentError, match="max_queue"):
        create_app(client, authorize=allow, max_queue=0)
    with pytest.raises(InvalidArgumentError, match="max_followers"):
        create_app(client, authorize=allow, max_followers=0)
    with pytest.raises(InvalidArgumentError, match="max_body_bytes"):
        create_app(client, authorize=allow, max_body_bytes=True)
    with pytest.raises(InvalidArgumentError, match="never '\\*'"):
        create_app(client, authorize=allow, cors_origins=["*"])
    with pytest.raises(InvalidArgumentError, match="allowed_hosts"):
        create_app(client, authorize=allow, allowed_hosts="localhost")


def test_post_idempotency_key_and_if_match(shared_server: Callable[[str], EphemeralServer]) -> None:
    url = shared_server("redis").url
    conversation = new_id()
    log = MessageLog(redis.Redis.from_url(url), conversation)
    app = create_app(redis.Redis.from_url(url), authorize=allow, allow_appends=True)
    closed = create_app(redis.Redis.from_url(url), authorize=allow)
    message = {"role": "user", "content": "once"}
    with serving(app) as base, serving(closed) as closed_base, httpx.Client(timeout=30) as http:
        path = f"/conversations/{conversation}/messages"
        first = http.post(base + path, json=message, headers={"Idempotency-Key": "k1"})
        again = http.post(base + path, json=message, headers={"Idempotency-Key": "k1"})
        assert (first.status_code, first.json()) == (201, {"last_seq": 1})
        assert (again.status_code, again.json()) == (201, {"last_seq": 1})
        other = http.post(
            base + path, json={"role": "user", "content": "else"}, headers={"Idempotency-Key": "k1"}
        )
        assert (other.status_code, other.json()["error"]) == (409, "IdempotencyConflictError")
        batch = [{"role": "assistant", "content": "a"}, {"role": "user", "content": "b"}]
        cas = http.post(base + path, json=batch, headers={"If-Match": "1"})
        assert (cas.status_code, cas.json()) == (201, {"last_seq": 3})
        stale = http.post(base + path, json=message, headers={"If-Match": "1"})
        assert stale.status_code == 409
        assert stale.json()["error"] == "SeqConflictError"
        assert stale.json()["current_seq"] == 3
        refused = http.post(closed_base + path, json=message)
        assert refused.status_code == 405
    assert [row.content for row in log.all()] == ["once", "a", "b"]


def test_an_erased_conversation_is_gone(shared_server: Callable[[str], EphemeralServer]) -> None:
    """Issue 25: an append into an erased conversation is 410 Gone; its pages are empty."""
    url = shared_server("redis").url
    conversation = new_id()
    log = MessageLog(redis.Redis.from_url(url), conversation)
    log.add("user", "secret")
    log.erase()
    app = create_app(redis.Redis.from_url(url), authorize=allow, allow_appends=True)
    with serving(app) as base, httpx.Client(timeout=30) as http:
        path = f"/conversations/{conversation}/messages"
        gone = http.post(base + path, json={"role": "user", "content": "back"})
        assert (gone.status_code, gone.json()["error"]) == (410, "ConversationErasedError")
        assert http.get(base + path).json()["messages"] == []
    assert log.count() == 0


def test_a_redacted_row_is_marked(shared_server: Callable[[str], EphemeralServer]) -> None:
    """Issue 25: a redacted row is in its place, with "redacted": true; the edit says why."""
    url = shared_server("redis").url
    conversation = new_id()
    log = MessageLog(redis.Redis.from_url(url), conversation)
    log.append_many([{"role": "user", "content": "hi"}, {"role": "user", "content": "secret"}])
    log.redact(2, reason="pii")
    app = create_app(redis.Redis.from_url(url), authorize=allow)
    with serving(app) as base, httpx.Client(timeout=30) as http:
        path = f"/conversations/{conversation}/messages"
        messages = http.get(base + path).json()["messages"]
        assert [m["message"].get("redacted") for m in messages] == [None, True]
        assert messages[1]["message"]["content"] == "[redacted]"
        physical = http.get(base + path, params={"view": "physical"}).json()["messages"]
        assert physical[2]["edit"] == {"op": "redact", "seqs": [2], "reason": "pii"}
        assert "secret" not in http.get(base + path).text


BAD_REQUESTS: list[tuple[str, dict[str, Any], int, str]] = [
    (
        "content",
        {"content": b"{not json", "headers": {"Content-Type": "application/json"}},
        400,
        "CodecError",
    ),
    ("content", {"json": {"role": "robot", "content": "x"}}, 400, "InvalidMessageError"),
    ("content", {"json": {"role": "user", "content": 5}}, 400, "InvalidMessageError"),
    (
        "content",
        {"json": [{"role": "user", "content": "ok"}, {"role": "user"}]},
        400,
        "InvalidMessageError",
    ),
    ("content", {"json": {"role": "user", "content": "y" * 5000}}, 413, "MessageTooLargeError"),
    (
        "content",
        {"json": {"role": "user", "content": "x"}, "headers": {"If-Match": "a"}},
        400,
        "InvalidArgumentError",
    ),
    ("content", {"json": "text"}, 400, "InvalidMessageError"),
]


def test_bad_input_is_a_4xx_with_the_library_error_and_writes_nothing(
    shared_server: Callable[[str], EphemeralServer],
) -> None:
    url = shared_server("redis").url
    conversation = new_id()
    client = redis.Redis.from_url(url)
    app = create_app(client, authorize=allow, allow_appends=True, max_message_bytes=4096)
    with serving(app) as base, httpx.Client(base_url=base, timeout=30) as http:
        path = f"/conversations/{conversation}"
        for _, request, status, error in BAD_REQUESTS:
            response = http.post(f"{path}/messages", **request)
            assert (response.status_code, response.json()["error"]) == (status, error), request
        for query in (
            "view=all",
            "after=-1",
            "limit=0",
            "limit=5000",
            "format=xml",
            "view=physical&format=openai",
            "after=1e3",
        ):
            response = http.get(f"{path}/messages?{query}")
            assert (response.status_code, response.json()["error"]) == (
                400,
                "InvalidArgumentError",
            ), query
        for headers in ({"Last-Event-ID": "x"}, {"Last-Event-ID": "-3"}):
            response = http.get(f"{path}/events", headers=headers)
            assert response.status_code == 400
        assert http.get(f"{path}/blobs/xyz").status_code == 400
        assert http.get(f"{path}/blobs/{'a' * 64}?type=<script>").status_code == 400

        @settings(
            max_examples=40,
            deadline=None,
            derandomize=True,
            suppress_health_check=[HealthCheck.function_scoped_fixture],
        )
        @given(
            st.recursive(
                st.none() | st.booleans() | st.integers() | st.text(),
                lambda inner: (
                    st.lists(inner, max_size=3)
                    | st.dictionaries(st.text(max_size=8), inner, max_size=3)
                ),
                max_leaves=8,
            )
        )
        def hostile(body: Any) -> None:
            if isinstance(body, dict) and body.get("role") in (
                "user",
                "system",
                "assistant",
                "tool",
            ):
                body["role"] = "nobody"
            if isinstance(body, list):
                body = [*body, {"role": "nobody", "content": ""}]  # one bad row rejects all
            # json, not orjson: a generated integer past 64 bits must reach the app
            response = http.post(f"{path}/messages", content=json.dumps(body), headers=JSON)
            assert 400 <= response.status_code < 500, body
            assert response.json()["error"] in ("InvalidMessageError", "CodecError")

        hostile()
    assert client.keys(f"msglog:{{{conversation}}}*") == []


def test_pages_formats_and_blobs(shared_server: Callable[[str], EphemeralServer]) -> None:
    url = shared_server("valkey").url
    conversation = new_id()
    client = redis.Redis.from_url(url)
    log = MessageLog(client, conversation, blob_threshold=16)
    png = b"\x89PNG\r\n\x1a\n" + os.urandom(64)
    log.append_many([{"role": "user", "content": f"m{i}"} for i in range(5)])
    log.append(
        {"role": "user", "content": [{"type": "image", "data": png, "media_type": "image/png"}]}
    )
    log.retract([2])
    app = create_app(client, authorize=allow)
    with serving(app) as base, httpx.Client(base_url=base, timeout=30) as http:
        path = f"/conversations/{conversation}"
        page = http.get(f"{path}/messages", params={"limit": 2}).json()
        assert [row["seq"] for row in page["messages"]] == [1, 3]
        assert (page["next_after"], page["last_seq"]) == (3, 7)
        rest = http.get(f"{path}/messages", params={"after": 3}).json()
        assert [row["seq"] for row in rest["messages"]] == [4, 5, 6]
        assert rest["next_after"] is None
        part = rest["messages"][-1]["message"]["content"][0]
        digest = hashlib.sha256(png).hexdigest()
        assert part["blob"] == digest and "data" not in part  # a reference, for <img src>
        every = http.get(f"{path}/messages", params={"view": "physical"}).json()["messages"]
        assert every[-1] == {
            "seq": 7,
            "at": every[-1]["at"],
            "edit": {"op": "retract", "seqs": [2]},
        }
        openai = http.get(f"{path}/messages", params={"format": "openai"}).json()["messages"]
        assert openai[0] == {"role": "user", "content": "m0"}
        image = openai[-1]["content"][0]["image_url"]["url"]
        assert image == "data:image/png;base64," + base64.b64encode(png).decode()
        blob = http.get(f"{path}/blobs/{digest}")
        assert blob.content == png and blob.headers["content-type"] == "image/png"
        typed = http.get(f"{path}/blobs/{digest}", params={"type": "image/x-test"})
        assert typed.headers["content-type"] == "image/x-test"
        missing = http.get(f"{path}/blobs/{'0' * 64}")
        assert (missing.status_code, missing.json()["error"]) == (404, "NotFound")


def test_async_clients_on_a_cluster(shared_cluster: Callable[[], LocalCluster]) -> None:
    """An asyncio cluster client behind the app, an async HTTP client in front: the
    backlog from ``?after=``, then live entries, then a resume with Last-Event-ID."""
    cluster = shared_cluster()
    conversation = new_id()
    log = MessageLog(cluster.client(), conversation)
    log.append_many([{"role": "user", "content": str(i)} for i in range(4)])
    node = cluster.primaries[0]
    app = create_app(
        redis.asyncio.cluster.RedisCluster(host="127.0.0.1", port=node.port),
        follower_client=redis.asyncio.cluster.RedisCluster(host="127.0.0.1", port=node.port),
        authorize=allow,
        heartbeat=0.2,
        allow_appends=True,
    )

    async def events(
        http: httpx.AsyncClient,
        headers: dict[str, str],
        params: dict[str, str],
        want: int,
        then: Callable[[], Any] | None = None,
    ) -> list[Event]:
        got: list[Event] = []
        path = f"/conversations/{conversation}/events"
        async with http.stream("GET", path, headers=headers, params=params) as response:
            lines: list[str] = []
            async for line in response.aiter_lines():
                lines.append(line)
                if line == "" and lines[0].startswith("id: "):
                    got.append(next(sse_events(iter(lines))))
                    if len(got) == 2 and then is not None:
                        await then()
                if line == "":
                    lines = []
                if len(got) == want:
                    return got
        return got

    async def run(base: str) -> tuple[list[Event], list[Event]]:
        async with httpx.AsyncClient(base_url=base, timeout=30) as http:

            async def post() -> None:
                response = await http.post(
                    f"/conversations/{conversation}/messages",
                    json={"role": "assistant", "content": "live"},
                )
                assert response.status_code == 201

            first = await events(http, {}, {"after": "1"}, 4, post)
            again = await events(http, {"Last-Event-ID": "2"}, {"after": "0"}, 3)
            return first, again

    with serving(app) as base:
        first, again = asyncio.run(run(base))
    assert [e["id"] for e in first] == ["2", "3", "4", "5"]
    assert first[-1]["data"]["message"] == {"role": "assistant", "content": "live"}
    assert [e["id"] for e in again] == ["3", "4", "5"]  # the header wins over ?after=


def test_serve_refuses_a_public_address_without_allow() -> None:
    result = CliRunner().invoke(cli, ["serve", "--host", "0.0.0.0", "--url", "redis://x:1"])
    assert result.exit_code == 1
    assert "--allow" in result.output


def test_serve_runs_the_app_with_the_viewer(
    shared_server: Callable[[str], EphemeralServer],
) -> None:
    url = shared_server("redis").url
    conversation = new_id()
    MessageLog(redis.Redis.from_url(url), conversation).add("user", "served")
    port = free_tcp_port()
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    command = [sys.executable, "-m", "redis_msglog", "serve", "--url", url, "--port", str(port)]
    command += ["--allow-host", "viewer.lan"]
    process = subprocess.Popen(command, env=env, stderr=subprocess.PIPE)
    try:
        assert process.stderr is not None
        assert b"serving" in process.stderr.readline()
        base = f"http://127.0.0.1:{port}"
        for _ in range(500):
            try:
                listing = httpx.get(f"{base}/conversations", timeout=10)
                break
            except httpx.ConnectError:
                time.sleep(0.02)
        names = {c["conversation"]: c["count"] for c in listing.json()["conversations"]}
        cursor = listing.json()["next_cursor"]
        while conversation not in names and cursor is not None:  # the listing is paged
            page = httpx.get(f"{base}/conversations", params={"cursor": cursor}, timeout=10)
            names |= {c["conversation"]: c["count"] for c in page.json()["conversations"]}
            cursor = page.json()["next_cursor"]
        assert names[conversation] == 1
        page = httpx.get(f"{base}/conversations/{conversation}/messages").json()
        assert page["messages"][0]["message"] == {"role": "user", "content": "served"}
        for host, status in (("localhost", 200), ("viewer.lan:80", 200), ("rebind.example", 421)):
            answer = httpx.get(
                f"{base}/conversations/{conversation}/messages", headers={"Host": host}
            )
            assert answer.status_code == status, host
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_the_package_and_the_command_import_no_web_framework() -> None:
    check = (
        "import sys, redis_msglog, redis_msglog._cli\n"
        "assert not {'starlette', 'uvicorn'} & {m.split('.')[0] for m in sys.modules}"
    )
    subprocess.run([sys.executable, "-c", check], check=True, env={**os.environ})


def test_a_failed_follower_ends_its_streams_and_is_replaced(
    shared_server: Callable[[str], EphemeralServer],
) -> None:
    """The log deleted under a stream (a rewind for its follower): its clients get
    ``event: error`` and their streams end; the next client gets a new follower."""
    url = shared_server("redis").url
    conversation = new_id()
    client = redis.Redis.from_url(url)
    log = MessageLog(client, conversation)
    log.append_many([{"role": "user", "content": str(i)} for i in range(3)])
    app = create_app(redis.Redis.from_url(url), authorize=allow, heartbeat=0.2)
    with serving(app) as base, httpx.Client(timeout=30) as http:
        path = f"{base}/conversations/{conversation}/events"
        with http.stream("GET", path) as response:
            got: list[Event] = []
            deleted = 0
            for event in sse_events(response.iter_lines()):
                if "comment" not in event:
                    got.append(event)
                if len(got) == 3 and not deleted:  # once: heartbeats come meanwhile
                    deleted = client.delete(*client.keys(f"msglog:{{{conversation}}}*"))
        assert [e.get("event") for e in got] == ["message"] * 3 + ["error"]
        assert got[-1]["data"]["error"] == "LogRewoundError"
        log.add("user", "anew")
        fresh = read_events(base, conversation, {}, lambda got: len(got) >= 1)
        assert fresh[0]["data"]["message"]["content"] == "anew"


def test_the_stream_waits_out_a_cluster_failover() -> None:
    """A sync cluster client behind the app: the primary owning the conversation fails
    over while a client streams; the stream goes on, exactly."""
    conversation = new_id()
    slot = key_slot(ConversationKeys.build("msglog", conversation).seq.encode())
    with LocalCluster(require_binary("any")) as cluster:
        log = MessageLog(cluster.client(socket_timeout=5), conversation)
        log.append_many([{"role": "user", "content": str(i)} for i in range(2)])
        app = create_app(
            cluster.client(socket_timeout=5),
            follower_client=cluster.client(socket_timeout=5),
            authorize=allow,
            heartbeat=0.2,
        )
        got: list[Event] = []
        with serving(app) as base, httpx.Client(timeout=60) as http:
            url = f"{base}/conversations/{conversation}/events"
            with http.stream("GET", url) as response:
                events = sse_events(response.iter_lines())
                while len(got) < 2:
                    if "comment" not in (event := next(events)):
                        got.append(event)
                primary = cluster.owner(slot)
                cluster.failover(primary)  # returns once the replica is the primary
                log.add("user", "after the failover")
                while len(got) < 3:
                    if "comment" not in (event := next(events)):
                        got.append(event)
    assert [event["id"] for event in got] == ["1", "2", "3"]
    assert got[2]["data"]["message"] == {"role": "user", "content": "after the failover"}
