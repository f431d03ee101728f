"""``msglog redact CONV SEQ`` and ``msglog trim CONV THROUGH_SEQ``: each asks for a
confirmation unless ``--yes``, refuses (exit status 1, nothing written) without one, and
deletes exactly like ``log.redact()`` / ``log.trim()``; ``show``, ``cat`` and ``export``
show the redacted row marked."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
import pytest
import redis
from click.testing import CliRunner

from redis_msglog import MessageLog
from redis_msglog._cli import _lifecycle, main
from redis_msglog.testing import EphemeralServer

from ..conftest import new_id
from .test_cli_tools import msglog

SECRET = "my card is 4111 1111 1111 1111"


@pytest.fixture
def url(shared_server: Callable[[str], EphemeralServer]) -> str:
    return shared_server("valkey").url


def kept(url: str) -> MessageLog:
    log = MessageLog(redis.Redis.from_url(url), new_id())
    log.append_many([{"role": "user", "content": "hi"}, {"role": "user", "content": SECRET}])
    log.add("assistant", "ok")
    return log


def test_redact_with_yes_redacts(url: str) -> None:
    log = kept(url)
    done = msglog(url, "redact", log.conversation, "2", "--reason", "a card", "--yes")
    assert done.returncode == 0, done.stderr
    assert b"redacted seq 2" in done.stdout
    assert [(r.content, r.redacted) for r in log.all()] == [
        ("hi", False), ("[redacted]", True), ("ok", False)
    ]  # fmt: skip
    shown = msglog(url, "show", log.conversation)
    assert shown.returncode == 0 and b"(redacted)" in shown.stdout and b"4111" not in shown.stdout
    exported = msglog(url, "export", log.conversation)
    lines = [orjson.loads(line) for line in exported.stdout.splitlines()]
    assert lines[1]["redacted"] is True and "redacted" not in lines[0]


def test_redact_and_trim_without_yes_and_without_a_terminal_write_nothing(url: str) -> None:
    log = kept(url)
    for args in (("redact", log.conversation, "2"), ("trim", log.conversation, "1")):
        done = msglog(url, *args, input=b"y\n")
        assert done.returncode == 1
        assert b"needs --yes" in done.stderr
    assert log.count() == 3 and not any(r.redacted for r in log.all())


def test_bad_seqs_are_an_error_line(url: str) -> None:
    log = kept(url)
    for args in (("redact", log.conversation, "9"), ("trim", log.conversation, "9")):
        done = msglog(url, *args, "--yes")
        assert done.returncode == 1 and b"not in the log" in done.stderr
    assert log.count() == 3


@pytest.mark.parametrize("answer", ["y\n", "n\n"])
def test_trim_asks_at_a_terminal(url: str, answer: str, monkeypatch: pytest.MonkeyPatch) -> None:
    log = kept(url)
    monkeypatch.setattr(_lifecycle, "at_terminal", lambda: True)
    done = CliRunner().invoke(main, ["--url", url, "trim", log.conversation, "2"], input=answer)
    if answer == "y\n":
        assert done.exit_code == 0, done.output
        assert [r.seq for r in log.all()] == [3]
    else:
        assert done.exit_code == 1
        assert log.count() == 3 and [r.seq for r in log.all()] == [1, 2, 3]


def test_an_export_of_a_redacted_log_imports_as_its_source(url: str, tmp_path: Any) -> None:
    log = kept(url)
    log.redact(2, {"role": "user", "content": "card [removed]"}, reason="pci")
    log.add("user", "after")
    path = tmp_path / "export.jsonl"
    assert msglog(url, "export", log.conversation, "-o", str(path)).returncode == 0
    target = new_id()
    done = msglog(url, "import", str(path), target)
    assert done.returncode == 0, done.stderr
    copy = MessageLog(redis.Redis.from_url(url), target)

    def shown(rows: list[Any]) -> list[tuple[Any, ...]]:
        return [(r.seq, getattr(r, "content", r), getattr(r, "redacted", None)) for r in rows]

    assert [r.content for r in copy.all()] == ["hi", "card [removed]", "ok", "after"]
    assert shown(copy.all()) == shown(log.all())
    edits = [r for r in copy.all(view="physical") if not hasattr(r, "content")]
    assert [(e.op, e.seqs, e.reason) for e in edits] == [("redact", (2,), "pci")]
    assert SECRET.encode() not in path.read_bytes()
