"""The operator viewer in a real browser: headless Debian Chromium driven by
Playwright opens the page served by uvicorn, sees a message appended by another process
appear, images render (a blob reference and inline data), a pop hide its row, and the
physical/visible toggle show it again as removed; hostile text stays text.

Chromium (``/usr/bin/chromium``, which ``.ci/run`` installs) and the ``playwright``
package are required: missing, the test is skipped locally and FAILS under ``CI=true``.
Screenshots are kept in ``test-artifacts/browser/`` (git-ignored).
"""

from __future__ import annotations

import importlib
import os
import random
import struct
import subprocess
import sys
import threading
import time
import uuid
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import redis

from redis_msglog import AgentMessage, MessageLog, ToolCall
from redis_msglog.parts import (
    AudioPart,
    FilePart,
    ImagePart,
    ReasoningPart,
    RedactedThinkingPart,
    RefusalPart,
    TextPart,
    ThinkingPart,
)
from redis_msglog.testing import EphemeralServer

from ..conftest import SERVER_ARGS, require_binary, require_in_ci

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = ROOT / "test-artifacts" / "browser"
CHROMIUM_ARGS = [
    "--no-sandbox",  # CI runs as root in a container
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
HOSTILE = '<img src=x onerror="alert(1)"><script>alert(2)</script>'
TYPED = "(token) => (document.querySelector('#rows li.draft') || {}).textContent?.includes(token)"
WAIT_MS = 20_000  # how long the page may take to show a change (a wait, not an assert)


def _require(available: bool, what: str) -> None:
    require_in_ci(available, what, "the browser test")


def _png(width: int, height: int, seed: int) -> bytes:
    """A real PNG of random RGB pixels (noise: it does not compress below the blob
    threshold)."""
    rng = random.Random(seed)
    raw = b"".join(
        b"\x00" + bytes(rng.randrange(256) for _ in range(width * 3)) for _ in range(height)
    )

    def chunk(kind: bytes, body: bytes) -> bytes:
        checksum = struct.pack(">I", zlib.crc32(kind + body))
        return struct.pack(">I", len(body)) + kind + body + checksum

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(raw))
        + chunk(b"IEND", b"")
    )


class Uvicorn:
    """The app under uvicorn on a free loopback port (port 0: the kernel picks), in a
    thread of this process; the browser and the other process reach it over TCP."""

    def __init__(self, app: Any, port: int = 0) -> None:
        import uvicorn

        config = uvicorn.Config(
            app,
            host="127.0.0.1",
            port=port,
            log_level="warning",
            lifespan="on",
            timeout_graceful_shutdown=1,  # an open event stream does not end by itself
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        while not self.server.started:
            if not self.thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            threading.Event().wait(0.02)
        (listener,) = self.server.servers
        host, port = listener.sockets[0].getsockname()[:2]
        return f"http://{host}:{port}"

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)


def _append_from_another_process(url: str, conversation: str, text: str) -> None:
    program = (
        "import sys, redis, redis_msglog\n"
        "log = redis_msglog.MessageLog(redis.Redis.from_url(sys.argv[1]), sys.argv[2])\n"
        "log.add('assistant', sys.argv[3])\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run(
        [sys.executable, "-c", program, url, conversation, text], check=True, env=env, timeout=60
    )


class Viewed(NamedTuple):
    url: str
    conversation: str
    log: MessageLog


@pytest.fixture
def browser_page() -> Iterator[Any]:
    _require(Path(CHROMIUM).is_file(), f"no {CHROMIUM} (Debian's chromium package)")
    try:
        sync_api = importlib.import_module("playwright.sync_api")
    except ImportError:
        _require(False, "the playwright package is not installed")
        raise
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser.new_page(viewport={"width": 1100, "height": 900})
        finally:
            browser.close()


@pytest.fixture
def viewer_app() -> Callable[[str], Any]:
    try:
        from redis_msglog.web import create_app
    except ImportError as error:  # the web extra (starlette, uvicorn) is missing
        _require(False, f"redis_msglog.web cannot be imported: {error}")
        raise

    def allow_all(request: Any, conversation: str | None, action: str) -> bool:
        return True  # an operator viewer on loopback, as `msglog serve`

    def build(url: str) -> Any:  # a sync client, as `msglog serve` gives it
        return create_app(redis.Redis.from_url(url), authorize=allow_all, viewer=True)

    return build


@pytest.fixture(scope="module")
def browser_server() -> Iterator[EphemeralServer]:
    """A server of this module's own: the viewer's listing is paged, and on the shared
    server a test's conversation need not be on its first page."""
    server = EphemeralServer(require_binary("redis"), SERVER_ARGS).start()
    yield server
    server.stop()


@pytest.fixture
def viewed(browser_server: EphemeralServer) -> Viewed:
    """A new conversation on the module's redis-server (binaries over 1 KiB stored as
    blobs), for a test to show in the viewer."""
    url = browser_server.url
    conversation = f"browser-{uuid.uuid4().hex[:8]}"
    log = MessageLog(redis.Redis.from_url(url), conversation, blob_threshold=1024)
    return Viewed(url, conversation, log)


def test_viewer_follows_a_conversation_live(
    browser_page: Any,
    viewer_app: Callable[[str], Any],
    viewed: Viewed,
) -> None:
    page = browser_page
    url, conversation, log = viewed
    big, small = _png(48, 48, seed=1), _png(8, 6, seed=2)
    assert len(big) > 1024 > len(small)  # one blob reference, one inline
    log.add("user", HOSTILE)
    log.append(
        AgentMessage(
            role="assistant",
            content=[
                ThinkingPart(thinking="secret chain of thought", signature="sig"),
                TextPart(text="two images:"),
                ImagePart(data=big, media_type="image/png"),
                ImagePart(data=small, media_type="image/png"),
            ],
        )
    )
    requests: list[str] = []
    dialogs: list[str] = []
    page.on("request", lambda request: requests.append(request.url))

    def on_dialog(dialog: Any) -> None:
        dialogs.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", on_dialog)
    with Uvicorn(viewer_app(url)) as base:
        page.goto(f"{base}/#{conversation}")
        rows = page.locator("#rows")
        page.wait_for_selector('#rows li[data-seq="2"]', timeout=WAIT_MS)

        # the list of conversations names this one
        page.wait_for_selector(f'#conversations li[data-id="{conversation}"]', timeout=WAIT_MS)

        # hostile text is text: shown verbatim, nothing ran, no element made from it
        first = rows.locator('li[data-seq="1"]')
        assert HOSTILE in first.inner_text()
        assert first.locator("script, img").count() == 0

        # part labels; thinking collapsed; both images decoded by the browser
        second = rows.locator('li[data-seq="2"]')
        labels = second.locator(".label").all_inner_texts()
        assert labels == ["thinking", "text", "image", "image"]
        assert second.locator("details").get_attribute("open") is None
        assert not second.get_by_text("secret chain of thought").is_visible()
        images = second.locator("img")
        assert images.count() == 2
        sources = [images.nth(i).get_attribute("src") or "" for i in range(2)]
        assert sources[0].startswith(f"conversations/{conversation}/blobs/")
        assert sources[1].startswith("data:image/png;base64,")
        page.wait_for_function(
            "() => [...document.querySelectorAll('#rows img')]"
            ".every((img) => img.complete && img.naturalWidth > 0)",
            timeout=WAIT_MS,
        )
        assert images.nth(0).evaluate("img => img.naturalWidth") == 48
        assert images.nth(1).evaluate("img => img.naturalWidth") == 8
        page.screenshot(path=str(ARTIFACTS / "1-opened.png"), full_page=True)

        # a message appended by another process appears, live
        _append_from_another_process(url, conversation, "from another process")
        page.wait_for_selector('#rows li[data-seq="3"]', timeout=WAIT_MS)
        assert "from another process" in rows.locator('li[data-seq="3"]').inner_text()
        page.screenshot(path=str(ARTIFACTS / "2-appended.png"), full_page=True)

        # a pop makes the row disappear from the visible view
        log.pop()
        page.wait_for_selector('#rows li[data-seq="3"]', state="detached", timeout=WAIT_MS)
        page.wait_for_function(
            "() => document.querySelector('#rows').dataset.lastSeq === '4'", timeout=WAIT_MS
        )
        assert rows.locator("li").count() == 2
        page.screenshot(path=str(ARTIFACTS / "3-popped.png"), full_page=True)

        # physical: every entry, the popped row marked removed, the edit itself a row
        page.check("#physical")
        page.wait_for_selector('#rows li[data-seq="4"].edit', timeout=WAIT_MS)
        assert rows.locator("li").count() == 4
        assert rows.locator('li[data-seq="3"]').get_attribute("class") == "row message gone"
        assert "retract" in rows.locator('li[data-seq="4"]').inner_text()
        page.screenshot(path=str(ARTIFACTS / "4-physical.png"), full_page=True)
        page.uncheck("#physical")
        page.wait_for_selector('#rows li[data-seq="4"]', state="detached", timeout=WAIT_MS)
        assert rows.locator("li").count() == 2
        page.goto("about:blank")  # closes the EventSource before the server stops

    assert dialogs == []  # the hostile text's alert() never ran
    # offline: nothing but the app and the inline data: URL was requested
    assert requests and all(r.startswith((base, "data:")) for r in requests), requests


def test_viewer_replaces_compacted_rows(
    browser_page: Any,
    viewer_app: Callable[[str], Any],
    viewed: Viewed,
) -> None:
    page = browser_page
    url, conversation, log = viewed
    for n in range(1, 4):
        log.add("user", f"turn {n}")
    with Uvicorn(viewer_app(url)) as base:
        page.goto(f"{base}/#{conversation}")
        page.wait_for_selector('#rows li[data-seq="3"]', timeout=WAIT_MS)
        log.compact([{"role": "system", "content": "summary of 1-2"}], through_seq=2)
        page.wait_for_selector('#rows li[data-seq="1"]', state="detached", timeout=WAIT_MS)
        # The compaction's edit entry hides rows 1-2; its summary is the next event.
        page.locator("#rows li", has_text="summary of 1-2").wait_for(timeout=WAIT_MS)
        texts = page.locator("#rows li").all_inner_texts()
        assert len(texts) == 2
        assert "summary of 1-2" in texts[0]
        assert "turn 3" in texts[1]
        page.screenshot(path=str(ARTIFACTS / "5-compacted.png"), full_page=True)
        page.goto("about:blank")


def test_viewer_resumes_with_last_event_id_after_a_restart(
    browser_page: Any,
    viewer_app: Callable[[str], Any],
    viewed: Viewed,
) -> None:
    """The server goes away; a message is appended meanwhile; a new server comes up on
    the same port: the browser's EventSource reconnects by itself with Last-Event-ID,
    and the page shows the missed message once (no gap, no duplicate)."""
    page = browser_page
    url, conversation, log = viewed
    log.add("user", "one")
    log.add("assistant", "two")
    resumed: list[str | None] = []

    def on_request(request: Any) -> None:
        if "/events" in request.url:
            resumed.append(request.all_headers().get("last-event-id"))

    page.on("request", on_request)
    first = Uvicorn(viewer_app(url))
    with first as base:
        page.goto(f"{base}/#{conversation}")
        page.wait_for_selector('#rows li[data-seq="2"]', timeout=WAIT_MS)
    port = int(base.rsplit(":", 1)[1])
    _append_from_another_process(url, conversation, "three, while the server was down")
    with Uvicorn(viewer_app(url), port=port):
        page.wait_for_selector('#rows li[data-seq="3"]', timeout=WAIT_MS)
        texts = page.locator("#rows li").all_inner_texts()
        page.screenshot(path=str(ARTIFACTS / "6-resumed.png"), full_page=True)
        page.goto("about:blank")
    assert [t.count("three, while the server was down") for t in texts] == [0, 0, 1]
    assert resumed[0] is None  # the first connection: ?after=0
    assert "2" in resumed[1:], resumed  # a reconnection sent the last id it had seen


def test_viewer_labels_every_part_kind(
    browser_page: Any,
    viewer_app: Callable[[str], Any],
    viewed: Viewed,
) -> None:
    page = browser_page
    url, conversation, log = viewed
    log.append(
        AgentMessage(
            role="user",
            content=[
                AudioPart(data=b"RIFF\x00\x00\x00\x00WAVE", media_type="audio/wav"),
                FilePart(data=b"%PDF-1.4", media_type="application/pdf", filename="a.pdf"),
            ],
        )
    )
    log.append(
        AgentMessage(
            role="assistant",
            content=[
                ReasoningPart(summary=["weighed it"], provider="openai"),
                RedactedThinkingPart(data="opaque", provider="anthropic"),
                RefusalPart(refusal="I will not"),
            ],
            tool_calls=[ToolCall(id="call-1", name="lookup", args={"q": "<b>x</b>"})],
        )
    )
    log.append(AgentMessage(role="tool", content="42", tool_call_id="call-1"))
    with Uvicorn(viewer_app(url)) as base:
        page.goto(f"{base}/#{conversation}")
        page.wait_for_selector('#rows li[data-seq="3"]', timeout=WAIT_MS)
        rows = page.locator("#rows li")
        labels = [rows.nth(i).locator(".label").all_inner_texts() for i in range(3)]
        assert labels == [
            ["audio", "file"],
            ["reasoning", "redacted thinking", "refusal", "tool call"],
            ["tool result", "text"],
        ]
        assert rows.nth(0).locator("audio").count() == 1
        assert rows.nth(0).locator("a[download='a.pdf']").count() == 1
        assert rows.nth(1).locator("details:not([open])").count() == 2  # collapsed
        assert 'lookup (call-1) {"q":"<b>x</b>"}' in rows.nth(1).inner_text()
        assert rows.nth(1).locator("b").count() == 0
        assert "call call-1" in rows.nth(2).inner_text()
        page.screenshot(path=str(ARTIFACTS / "7-parts.png"), full_page=True)
        page.goto("about:blank")


def test_viewer_folds_redactions_and_trims_live(
    browser_page: Any,
    viewer_app: Callable[[str], Any],
    viewed: Viewed,
) -> None:
    """A redaction replaces the row's content on the open page (the marker, or the
    replacement it was given), a trim takes its rows away, even from the physical view:
    what a reload would show, without one."""
    page = browser_page
    url, conversation, log = viewed
    for text in ("one", "card 4242 4242", "three", "four"):
        log.add("user", text)
    with Uvicorn(viewer_app(url)) as base:
        page.goto(f"{base}/#{conversation}")
        rows = page.locator("#rows")
        page.wait_for_selector('#rows li[data-seq="4"]', timeout=WAIT_MS)
        assert "card 4242" in rows.inner_text()
        log.redact(2, reason="pii")
        rows.locator('li[data-seq="2"]', has_text="[redacted]").wait_for(timeout=WAIT_MS)
        log.redact(3, {"role": "user", "content": "three, reworded"})
        rows.locator('li[data-seq="3"]', has_text="three, reworded").wait_for(timeout=WAIT_MS)
        log.trim(1)
        page.wait_for_selector('#rows li[data-seq="1"]', state="detached", timeout=WAIT_MS)
        page.check("#physical")
        page.wait_for_selector('#rows li[data-seq="7"].edit', timeout=WAIT_MS)
        seqs = rows.locator("li").evaluate_all("(items) => items.map((li) => li.dataset.seq)")
        assert seqs == ["2", "3", "4", "5", "6", "7"]  # the trimmed row is gone here too
        text = rows.inner_text()
        assert "card 4242" not in text and "one" not in text.split("\n")
        page.screenshot(path=str(ARTIFACTS / "8-redacted-trimmed.png"), full_page=True)
        page.goto("about:blank")


def test_viewer_reads_well_on_a_desktop_and_a_phone(
    browser_page: Any,
    viewer_app: Callable[[str], Any],
    viewed: Viewed,
) -> None:
    """What a newcomer found: commit times in local time with the seq beside them (not
    raw ISO microseconds), a listing newest activity first that refreshes by itself, a
    redacted row that does not look like normal text, and a layout that holds at a
    phone's width (nothing wider than the screen). Screenshots at 1280 and 390 px."""
    page = browser_page
    url, conversation, log = viewed
    log.add("user", "card 4242 4242 4242 4242")
    log.append({"role": "assistant", "content": "noted " + "long-word" * 30,
                "usage": {"input_tokens": 1200, "output_tokens": 30, "cost": 0.0042,
                          "currency": "USD"}})  # fmt: skip
    log.redact(1, reason="pii")
    page.add_init_script("document.documentElement.dataset.listEveryMs = '300'")
    with Uvicorn(viewer_app(url)) as base:
        page.set_viewport_size({"width": 1280, "height": 800})
        page.goto(f"{base}/#{conversation}")
        page.wait_for_selector('#rows li[data-seq="2"]', timeout=WAIT_MS)
        head = page.locator('#rows li[data-seq="2"] .meta').inner_text()
        assert "#2" in head and "1200 in" in head and "0.0042 USD" in head
        assert "+00:00" not in head and ".%06d" not in head  # a local time, not the ISO text
        stamp = page.locator('#rows li[data-seq="2"] time')
        newest = log.last()
        assert newest is not None and stamp.get_attribute("title") == newest.at.isoformat()
        totals = page.locator("#totals")  # the conversation's, from GET .../usage
        totals.filter(has_text="0.0042 USD").wait_for(timeout=WAIT_MS)
        assert "1200 in" in totals.inner_text()
        redacted = page.locator('#rows li[data-seq="1"]')
        assert "redacted" in (redacted.get_attribute("class") or "")
        assert "card 4242" not in redacted.inner_text()
        # A conversation made meanwhile appears by itself, first (the newest activity).
        other = MessageLog(redis.Redis.from_url(url), conversation + "-newer")
        other.add("user", "hello")
        page.wait_for_function(
            "(id) => document.querySelector('#conversations li')?.dataset.id === id",
            arg=other.conversation,
            timeout=WAIT_MS,
        )
        page.screenshot(path=str(ARTIFACTS / "9-desktop-1280.png"), full_page=True)
        page.set_viewport_size({"width": 390, "height": 844})
        page.wait_for_timeout(100)
        wide = page.evaluate("document.scrollingElement.scrollWidth - window.innerWidth")
        assert wide <= 0, f"the page is {wide} px wider than a phone's screen"
        nav, rows = page.locator("nav").bounding_box(), page.locator("#rows").bounding_box()
        assert nav and rows and rows["y"] >= nav["y"] + nav["height"] - 1  # stacked
        page.screenshot(path=str(ARTIFACTS / "10-phone-390.png"), full_page=True)
        page.goto("about:blank")


def test_viewer_types_a_draft_live_resumes_after_a_reload_and_marks_interrupted(
    browser_page: Any,
    viewer_app: Callable[[str], Any],
    viewed: Viewed,
) -> None:
    """An answer written as a draft shows typing, delta by delta; a reload mid-answer
    shows what was written so far and goes on, no token repeated or missing; the
    committed message replaces the draft; an answer whose writer failed is marked
    interrupted."""
    page = browser_page
    url, conversation, log = viewed
    log.add("user", "count to eighty")
    tokens = [f"{n}, " for n in range(80)]
    started = threading.Event()

    def answer() -> None:
        with log.draft() as draft:
            for token in tokens:
                draft.write(token)
                draft.flush()
                started.set()
                time.sleep(0.04)

    with Uvicorn(viewer_app(url)) as base:
        page.goto(f"{base}/#{conversation}")
        page.wait_for_selector('#rows li[data-seq="1"]', timeout=WAIT_MS)
        writer = threading.Thread(target=answer)
        writer.start()
        try:
            started.wait(10)
            typing = page.locator("#rows li.draft")
            page.wait_for_function(TYPED, arg="5, ", timeout=WAIT_MS)
            assert typing.locator(".label").first.inner_text() == "typing"
            page.screenshot(path=str(ARTIFACTS / "11-typing.png"), full_page=True)
            page.reload()  # mid-answer: the draft so far, then the rest, live
            page.wait_for_function(TYPED, arg="40, ", timeout=WAIT_MS)
            page.wait_for_selector('#rows li[data-seq="2"]', timeout=WAIT_MS)
        finally:
            writer.join(30)
        assert page.locator("#rows li.draft").count() == 0  # the message took its place
        text = page.locator('#rows li[data-seq="2"] .part').inner_text()
        assert text == "text" + "".join(tokens)  # every token once, in order

        def fails() -> None:
            with log.draft() as draft:  # on_interrupt="commit": what was written is kept
                draft.write("half an ans")
                draft.flush()
                raise RuntimeError("the worker failed")

        with pytest.raises(RuntimeError):
            fails()
        page.wait_for_selector('#rows li.interrupted[data-seq="3"]', timeout=WAIT_MS)
        third = page.locator('#rows li[data-seq="3"]')
        assert "interrupted" in third.locator(".label").all_inner_texts()
        assert "half an ans" in third.inner_text()
        page.screenshot(path=str(ARTIFACTS / "12-interrupted.png"), full_page=True)
        page.goto("about:blank")
