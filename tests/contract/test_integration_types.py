"""mypy strict on everything pyproject's ``[tool.mypy]`` names, the integrations, their
tests and the framework benchmarks included: it needs the agent frameworks (the
``test-frameworks`` extra), so it runs in that tier; ``no_server/test_static.py`` checks
the rest without them, in the no-server tier."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.frameworks

ROOT = Path(__file__).resolve().parents[2]


def test_mypy_strict_with_the_frameworks() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
