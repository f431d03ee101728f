"""Lint and types are part of the test command: ruff (with a complexity limit), and
mypy strict on the package, its tests and the benchmarks (pyproject's [tool.mypy] files)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True)


def test_ruff_lint() -> None:
    result = _run("ruff", "check", ".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_format() -> None:
    result = _run("ruff", "format", "--check", ".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_strict_on_the_package() -> None:
    result = _run("mypy")
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_sync_client_is_generated_from_the_async_one() -> None:
    """Every file of ``_sync/`` is exactly what ``scripts/unasync.py`` makes of its twin in
    ``_async/`` (and ``_sync/`` holds no other)."""
    result = subprocess.run(
        [sys.executable, "scripts/unasync.py", "--check"], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_append_scripts_header_matches_its_wrapper() -> None:
    """``lua/append.lua`` documents KEYS and ARGV by position; the wrapper builds them by
    name: the two lists must agree."""
    import re

    from redis_msglog._append_script import ARGV_NAMES, KEY_NAMES

    header = (ROOT / "lua" / "append.lua").read_text(encoding="utf-8")
    keys = re.findall(r"^-- KEYS\[(\d+)\]", header, flags=re.M)
    argv = re.findall(r"^-- ARGV\[(\d+)\]", header, flags=re.M)
    assert keys == [str(i) for i in range(1, len(KEY_NAMES) + 1)]
    assert argv == [str(i) for i in range(1, len(ARGV_NAMES) + 1)]
    assert f"local HEADER = {len(ARGV_NAMES)} + 2 * BLOBS" in header
