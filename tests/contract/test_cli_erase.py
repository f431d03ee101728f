"""``msglog erase CONV``: asks for a confirmation unless ``--yes``, refuses (exit status
1, nothing erased) without one, and erases exactly like ``log.erase()``."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import redis
from click.testing import CliRunner

from redis_msglog import MessageLog
from redis_msglog._cli import _lifecycle, main
from redis_msglog.testing import EphemeralServer

from ..conftest import new_id
from .test_cli_tools import msglog


@pytest.fixture
def url(shared_server: Callable[[str], EphemeralServer]) -> str:
    return shared_server("valkey").url


def kept(url: str) -> MessageLog:
    log = MessageLog(redis.Redis.from_url(url), new_id())
    log.add("user", "my card is 4111 1111 1111 1111")
    return log


def test_erase_with_yes_erases(url: str) -> None:
    log = kept(url)
    done = msglog(url, "erase", log.conversation, "--yes", "--erased-for", "90m")
    assert done.returncode == 0, done.stderr
    assert b"erased conversation" in done.stdout
    client = redis.Redis.from_url(url)
    assert client.get(log.keys.seq) == b"erased"
    assert 80 * 60 * 1000 < client.pttl(log.keys.seq) <= 90 * 60 * 1000
    assert log.count() == 0 and client.exists(log.keys.stream) == 0


def test_erase_without_yes_and_without_a_terminal_erases_nothing(url: str) -> None:
    log = kept(url)
    done = msglog(url, "erase", log.conversation, input=b"y\n")
    assert done.returncode != 0
    assert b"needs --yes" in done.stderr
    assert log.count() == 1


@pytest.mark.parametrize("answer", ["y\n", "n\n", "\n"])
def test_erase_asks_at_a_terminal(url: str, answer: str, monkeypatch: pytest.MonkeyPatch) -> None:
    log = kept(url)
    monkeypatch.setattr(_lifecycle, "at_terminal", lambda: True)
    done = CliRunner().invoke(main, ["--url", url, "erase", log.conversation], input=answer)
    if answer == "y\n":
        assert done.exit_code == 0, done.output
        assert log.count() == 0
    else:
        assert done.exit_code != 0
        assert log.count() == 1


@pytest.mark.parametrize("bad", ["", "24", "h", "1x", "0s", "500ms", "-1h", "1h 2m"])
def test_a_bad_erased_for_erases_nothing(url: str, bad: str) -> None:
    log = kept(url)
    done = CliRunner().invoke(
        main, ["--url", url, "erase", log.conversation, "--yes", "--erased-for", bad]
    )
    assert done.exit_code != 0
    assert log.count() == 1


@pytest.mark.parametrize("short, said", [("0s", "0 seconds"), ("500ms", "0.5 seconds")])
def test_a_too_short_erased_for_is_said_in_seconds(url: str, short: str, said: str) -> None:
    """Issue 35: the error quoted a repr, ``got datetime.timedelta(0)``."""
    log = kept(url)
    done = msglog(url, "erase", log.conversation, "--yes", "--erased-for", short)
    assert done.returncode == 1 and log.count() == 1
    assert done.stderr.decode().strip().endswith(f"at least 1 s, got {said}"), done.stderr
    assert b"datetime" not in done.stderr


def test_durations() -> None:
    from datetime import timedelta

    assert _lifecycle.parse_duration("1h30m") == timedelta(minutes=90)
    assert _lifecycle.parse_duration("7d") == timedelta(days=7)
    assert _lifecycle.parse_duration("1500ms") == timedelta(seconds=1.5)


def test_stats_and_verify_of_an_erased_conversation(url: str) -> None:
    """The tombstone is not a seq: ``stats`` said ``invalid literal for int()`` (found by
    the hostile-content suite's erase path); it reports an empty, erased log."""
    log = kept(url)
    log.erase()
    stats = msglog(url, "stats", log.conversation)
    assert stats.returncode == 0, stats.stderr
    assert b"erased" in stats.stdout and b"tombstone" in stats.stdout
    verify = msglog(url, "verify", log.conversation)
    assert verify.returncode == 0, verify.stderr
    assert verify.stdout.endswith(b": erased (its tombstone stands; no entries)\n")
