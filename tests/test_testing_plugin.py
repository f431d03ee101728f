"""redis_msglog.testing as a user's pytest plugin: a user's own test suite, with its own
conftest, run in a subprocess against the fixtures' real throwaway server."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

USER_CONFTEST = 'pytest_plugins = ["redis_msglog.testing"]\n'
USER_TESTS = """
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


def test_users_can_test_their_workers_against_a_real_server(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(USER_CONFTEST)
    (tmp_path / "test_worker.py").write_text(USER_TESTS)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 passed" in result.stdout
