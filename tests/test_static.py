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
