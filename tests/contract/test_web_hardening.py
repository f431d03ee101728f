"""The web app's bounds and request hygiene (docs/web.md "Threat model"), through uvicorn
on a loopback port and httpx: the follower cap and the followers' own pool, JSON-only
appends, CORS, the body cap, the Host check, ids with ``/``, the paged listing."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any
from urllib.parse import quote

import httpx
import pytest
import redis
import redis.asyncio

from redis_msglog import MessageLog
from redis_msglog.testing import EphemeralServer
from redis_msglog.web import create_app

from ..conftest import new_id
from .test_web import allow, read_events, serving

JSON = {"Content-Type": "application/json"}
MESSAGE = b'{"role": "user", "content": "hi"}'


def _open_stream(stack: ExitStack, http: httpx.Client, url: str) -> httpx.Response:
    """An event stream, open (kept in ``stack``) once it answered."""
    response = stack.enter_context(http.stream("GET", url))
    if response.status_code == 200:
        lines = response.iter_lines()
        assert next(lines) == ": hb"  # joined: its follower runs
        response.extensions["lines"] = lines  # a dropped iterator closes the connection
    return response


@pytest.mark.parametrize("kind", ["sync", "asyncio"])
def test_streams_past_the_follower_cap_are_503_and_pages_still_answer(
    kind: str, shared_server: Callable[[str], EphemeralServer]
) -> None:
    """Eight followed conversations on a client whose own pool holds 4 connections: the
    followers read over a pool of their own, so a page and an append answer at once (a
    1 s client timeout, which they would miss waiting for a connection); the streams of
    two more conversations are 503 with Retry-After; one that ends gives its place back."""
    url = shared_server("redis").url
    maker = redis.Redis if kind == "sync" else redis.asyncio.Redis
    client = maker.from_url(url, max_connections=4)
    app = create_app(client, authorize=allow, allow_appends=True, heartbeat=0.2, max_followers=8)
    ids = [new_id() for _ in range(11)]
    with serving(app) as base, ExitStack() as stack, httpx.Client(timeout=30) as http:
        streams = [_open_stream(stack, http, f"{base}/conversations/{c}/events") for c in ids[:8]]
        assert [s.status_code for s in streams] == [200] * 8
        assert app.state.msglog.hub.followers == 8
        for extra in ids[8:10]:
            refused = http.get(f"{base}/conversations/{extra}/events")
            assert (refused.status_code, refused.json()["error"]) == (503, "TooManyFollowers")
            assert refused.headers["Retry-After"] == "10"
        again = _open_stream(stack, http, f"{base}/conversations/{ids[0]}/events")
        assert again.status_code == 200  # a followed conversation takes no new place
        with httpx.Client(base_url=base, timeout=1) as quick:
            for _ in range(3):
                page = quick.get(f"/conversations/{ids[1]}/messages")
                assert page.status_code == 200
                added = quick.post(
                    f"/conversations/{ids[1]}/messages", content=MESSAGE, headers=JSON
                )
                assert added.status_code == 201
        streams[2].close()  # the only client of its conversation: the place comes back
        for _ in range(250):
            with http.stream("GET", f"{base}/conversations/{ids[10]}/events") as answer:
                if answer.status_code == 200:
                    break
            time.sleep(0.02)
        else:
            pytest.fail("the place of a closed stream never came back")


def test_cross_site_posts_are_refused_and_cors_is_opt_in(
    shared_server: Callable[[str], EphemeralServer],
) -> None:
    """A form or text/plain POST (what a page of another site may send without a CORS
    preflight) is a 415; a JSON POST whose Origin is another site's a 403; nothing is
    written. Listed origins get CORS answers; others none."""
    url = shared_server("redis").url
    conversation = new_id()
    log = MessageLog(redis.Redis.from_url(url), conversation)
    listed = "https://app.example.com"
    app = create_app(
        redis.Redis.from_url(url), authorize=allow, allow_appends=True, cors_origins=[listed]
    )
    with serving(app) as base, httpx.Client(base_url=base, timeout=30) as http:
        path = f"/conversations/{conversation}/messages"
        for kind in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data"):
            refused = http.post(path, content=MESSAGE, headers={"Content-Type": kind})
            assert (refused.status_code, refused.json()["error"]) == (415, "UnsupportedMediaType")
        assert http.post(path, content=MESSAGE).status_code == 415  # no type at all
        evil = {**JSON, "Origin": "https://evil.example"}
        refused = http.post(path, content=MESSAGE, headers=evil)
        assert (refused.status_code, refused.json()["error"]) == (403, "CrossOrigin")
        assert log.count() == 0
        own = http.post(path, content=MESSAGE, headers={**JSON, "Origin": base})
        assert own.status_code == 201
        typed = {"Content-Type": "application/json; charset=utf-8", "Origin": listed}
        assert http.post(path, content=MESSAGE, headers=typed).status_code == 201
        preflight = {
            "Origin": listed,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "content-type",
        }
        answer = http.options(path, headers=preflight)
        assert answer.headers["access-control-allow-origin"] == listed
        foreign = http.options(path, headers={**preflight, "Origin": "https://evil.example"})
        assert "access-control-allow-origin" not in foreign.headers
        read = http.get(path, headers={"Origin": "https://evil.example"})
        assert "access-control-allow-origin" not in read.headers
    closed = create_app(redis.Redis.from_url(url), authorize=allow, allow_appends=True)
    with serving(closed) as base, httpx.Client(base_url=base, timeout=30) as http:
        answer = http.options(path, headers=preflight)  # none listed: no CORS at all
        assert "access-control-allow-origin" not in answer.headers
        refused = http.post(path, content=MESSAGE, headers={**JSON, "Origin": listed})
        assert refused.status_code == 403
    assert log.count() == 2


def _raw_post(base: str, path: str, head: str) -> bytes:
    """A POST of headers only (the body never comes): the server's first answer."""
    host, port = base.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(f"POST {path} HTTP/1.1\r\nHost: {host}\r\n{head}\r\n".encode())
        return sock.recv(65536)


def test_the_body_cap_is_checked_before_reading_past_it(
    shared_server: Callable[[str], EphemeralServer],
) -> None:
    """A Content-Length over ``max_body_bytes`` is a 413 at once (the 1 GB body is never
    sent: reading it would hang the test); a chunked body is cut off once it passes the
    cap; nothing is written."""
    url = shared_server("redis").url
    conversation = new_id()
    log = MessageLog(redis.Redis.from_url(url), conversation)
    app = create_app(
        redis.Redis.from_url(url), authorize=allow, allow_appends=True, max_body_bytes=1000
    )
    with serving(app) as base, httpx.Client(base_url=base, timeout=10) as http:
        path = f"/conversations/{conversation}/messages"
        head = "Content-Type: application/json\r\nContent-Length: 1000000000\r\n"
        assert _raw_post(base, path, head).startswith(b"HTTP/1.1 413 ")

        def chunks() -> Iterator[bytes]:
            yield b'{"role": "user", "content": "'
            yield b"x" * 2000
            yield b'"}'

        cut = http.post(path, content=chunks(), headers=JSON)
        assert (cut.status_code, cut.json()["error"]) == (413, "PayloadTooLarge")
        fits = b'{"role": "user", "content": "' + b"x" * 900 + b'"}'
        assert http.post(path, content=fits, headers=JSON).status_code == 201
    assert log.count() == 1


def test_a_foreign_host_is_refused(shared_server: Callable[[str], EphemeralServer]) -> None:
    """``allowed_hosts``: another name in ``Host`` (a DNS-rebinding page's) is a 421."""
    url = shared_server("redis").url
    conversation = new_id()
    app = create_app(
        redis.Redis.from_url(url), authorize=allow, allowed_hosts=["127.0.0.1", "viewer.lan"]
    )
    with serving(app) as base, httpx.Client(base_url=base, timeout=10) as http:
        path = f"/conversations/{conversation}/messages"
        assert http.get(path).status_code == 200
        assert http.get(path, headers={"Host": "viewer.lan:8000"}).status_code == 200
        for host in ("rebind.example", "rebind.example:8000", "127.0.0.1.evil", ""):
            refused = http.get(path, headers={"Host": host})
            assert (refused.status_code, refused.json()["error"]) == (421, "MisdirectedRequest")


@contextmanager
def _id_app(url: str) -> Iterator[tuple[httpx.Client, str]]:
    app = create_app(redis.Redis.from_url(url), authorize=allow, allow_appends=True)
    with serving(app) as base, httpx.Client(base_url=base, timeout=30) as http:
        yield http, base


IDS = ["a/b", "a%2Fb", "100%", "ünï/cødé ✓", "x/events", "a/messages", "/lead", "trail/"]


def test_ids_with_slashes_percent_and_unicode_are_reachable(
    shared_server: Callable[[str], EphemeralServer],
) -> None:
    """Each id percent-encoded in the path (``/`` as ``%2F``) reaches its own log: an
    append, a page and the event stream, none confused with another."""
    url = shared_server("redis").url
    tag = new_id()
    with _id_app(url) as (http, base):
        for name in IDS:
            path = f"/conversations/{quote(tag + name, safe='')}"
            body = f'{{"role": "user", "content": "{name}"}}'.encode()
            assert http.post(f"{path}/messages", content=body, headers=JSON).status_code == 201
        for name in IDS:
            encoded = quote(tag + name, safe="")
            page = http.get(f"/conversations/{encoded}/messages").json()
            assert [m["message"]["content"] for m in page["messages"]] == [name]
            assert page["conversation"] == tag + name
            events = read_events(base, encoded, {}, lambda got: len(got) >= 1)
            assert events[0]["data"]["message"]["content"] == name
    for name in IDS:
        assert [r.content for r in MessageLog(redis.Redis.from_url(url), tag + name).all()] == [
            name
        ]


def test_a_last_event_id_past_the_largest_seq_is_400(
    shared_server: Callable[[str], EphemeralServer],
) -> None:
    url = shared_server("redis").url
    with _id_app(url) as (http, _):
        path = f"/conversations/{new_id()}/events"
        for value in ("9223372036854775808", "9" * 19, "1000000000000000"):
            answer = http.get(path, headers={"Last-Event-ID": value})
            assert (answer.status_code, answer.json()["error"]) == (400, "InvalidArgumentError")
            assert http.get(path, params={"after": value}).status_code == 400


def _calls(client: redis.Redis) -> int:
    stats: dict[str, Any] = client.info("commandstats")
    skip = ("cmdstat_info", "cmdstat_config|resetstat", "cmdstat_config")
    return sum(value["calls"] for name, value in stats.items() if name not in skip)


def test_the_listing_is_paged(private_server: Callable[..., EphemeralServer]) -> None:
    """60 conversations, pages of 10: every one listed once over the pages, each page
    bounded, and the whole listing at most 3 commands per conversation plus the scans."""
    server = private_server("redis")
    admin = redis.Redis.from_url(server.url)
    names = sorted(f"c{i:02d}" for i in range(60))
    for name in names:
        MessageLog(admin, name).add("user", name)
    MessageLog(admin, "c00").add("user", "two")
    app = create_app(redis.Redis.from_url(server.url), authorize=allow, viewer=True)
    seen: dict[str, int] = {}
    pages = 0
    with serving(app) as base, httpx.Client(base_url=base, timeout=30) as http:
        admin.config_resetstat()
        cursor: str | None = None
        while True:
            params = {"limit": "10", **({"cursor": cursor} if cursor else {})}
            page = http.get("/conversations", params=params).json()
            pages += 1
            assert len(page["conversations"]) <= 40  # SCAN's COUNT is a hint, not unbounded
            for listed in page["conversations"]:
                assert listed["conversation"] not in seen
                seen[listed["conversation"]] = listed["count"]
            cursor = page["next_cursor"]
            if cursor is None:
                break
        calls = _calls(admin)
        bad = http.get("/conversations", params={"cursor": "x"})
        assert (bad.status_code, bad.json()["error"]) == (400, "InvalidArgumentError")
    assert seen == {name: 1 for name in names} | {"c00": 2} and pages > 2
    assert calls <= 3 * len(names) + 8 * pages
