"""redis_msglog.testing as a user's pytest plugin: a user's own test suite run in a
subprocess against the fixtures' real throwaway server, with and without a
``pytest_plugins`` line (the ``pytest11`` entry point registers it), and the plugin's
import cost (it loads in every pytest run of a project that installs the package)."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # a user's pytest run in a subprocess

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = "redis_msglog.testing"
USER_CONFTEST = 'pytest_plugins = ["redis_msglog.testing"]\n'
USER_TESTS = """
import pytest
import redis
from redis_msglog import MessageLog


def test_a_worker_appends(msglog_redis: redis.Redis) -> None:
    log = MessageLog(msglog_redis, "conv")
    assert log.add("user", "hello") == 1
    assert [m.content for m in log.all()] == ["hello"]


def test_each_test_starts_empty(msglog_url: str) -> None:
    client = redis.Redis.from_url(msglog_url)
    assert client.dbsize() == 0  # the first test's keys were removed
    assert MessageLog(client, "conv").add("user", "again") == 1
"""


def entry_point_installed() -> bool:
    """Whether this environment's installed metadata has the plugin's entry point (an
    editable install made before the entry point was added has not: reinstall)."""
    found = importlib.metadata.entry_points(group="pytest11")
    return any(ep.name == PLUGIN and ep.value == PLUGIN for ep in found)


def run_user_suite(path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:randomly",
            *extra,
        ],
        cwd=path,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_users_can_test_their_workers_against_a_real_server(tmp_path: Path) -> None:
    """An existing ``pytest_plugins`` line keeps working, next to the entry point (named
    after the module, so pytest sees the plugin registered and does not load it twice)."""
    (tmp_path / "conftest.py").write_text(USER_CONFTEST)
    (tmp_path / "test_worker.py").write_text(USER_TESTS)
    result = run_user_suite(tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 passed" in result.stdout


def test_the_fixtures_need_no_pytest_plugins_line(tmp_path: Path) -> None:
    """No conftest at all. Where the installed metadata predates the entry point (an old
    editable install), ``-p redis_msglog.testing`` does what the entry point does."""
    (tmp_path / "test_worker.py").write_text(USER_TESTS)
    extra = () if entry_point_installed() else ("-p", PLUGIN)
    result = run_user_suite(tmp_path, *extra)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 passed" in result.stdout


def test_the_entry_point_is_declared() -> None:
    """(Read as text: tomllib is Python 3.11+.)"""
    declared = (ROOT / "pyproject.toml").read_text().split("[project.entry-points.pytest11]\n")
    assert len(declared) == 2
    assert declared[1].splitlines()[0] == f'"{PLUGIN}" = "{PLUGIN}"'


def test_the_project_does_not_register_the_plugin_itself() -> None:
    """The entry point registers it; a ``pytest_plugins`` line here too would be a second
    registration under another name (pytest refuses it)."""
    for conftest in (ROOT / "tests").rglob("conftest.py"):
        assert "pytest_plugins" not in conftest.read_text(), conftest


def test_the_plugin_is_cheap_to_import() -> None:
    """Importing the plugin after pytest loads the standard library and three small
    modules of the package: not redis-py, pydantic or the clients (~250 ms)."""
    code = (
        "import sys, pytest\n"
        "before = set(sys.modules)\n"
        "import redis_msglog.testing\n"
        "print(' '.join(sorted(set(sys.modules) - before)))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    loaded = set(result.stdout.split())
    ours = {name for name in loaded if name.split(".")[0] == "redis_msglog"}
    # redis_msglog._core: the folder's __init__, a docstring only
    core = {"redis_msglog._core", "redis_msglog._core.args"}
    assert ours == {"redis_msglog", *core, "redis_msglog.errors", PLUGIN}
    third_party = {name.split(".")[0] for name in loaded} - set(sys.stdlib_module_names)
    assert third_party == {"redis_msglog"}, sorted(third_party)
