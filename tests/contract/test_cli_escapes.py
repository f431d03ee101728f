"""Hostile content and conversation ids in `msglog show`, `tail` and `ls`: no control
character reaches the terminal raw, markup is never interpreted, and the visible text
is exactly the stored text with each control character replaced by its stand-in."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable

import orjson
import pytest
import redis

from redis_msglog import MessageLog
from redis_msglog.testing import EphemeralServer

from ..conftest import new_id
from .test_cli import msglog

pytestmark = pytest.mark.slow  # a real process writing to a terminal

# (stored, as shown): the stand-ins are written out here, not computed by the code under test.
CONTENT = [
    ("clear\x1b[2Jscreen", "clear␛[2Jscreen"),
    ("title\x1b]0;pwned\x07after", "title␛]0;pwned␇after"),
    ("red\x1b[31mRED\x1b[0m", "red␛[31mRED␛[0m"),
    ("c1 csi\x9b31m and nel\x85", "c1 csi⟨U+009B⟩31m and nel⟨U+0085⟩"),
    ("carriage\rreturn", "carriage␍return"),
    ("bell\x07 nul\x00 del\x7f", "bell␇ nul␀ del␡"),
    ("bidi \u202egnp.exe\u202c \u2066iso\u2069",
     "bidi ⟨U+202E⟩gnp.exe⟨U+202C⟩ ⟨U+2066⟩iso⟨U+2069⟩"),
    ("[bold]b[/] [/] [link=https://x]l[/link] :smile:",
     "[bold]b[/] [/] [link=https://x]l[/link] :smile:"),
    ("back\\slash \\[x] \\\\[bold] C:\\dir\\", "back\\slash \\[x] \\\\[bold] C:\\dir\\"),
    ("  indented, trailing  ", "  indented, trailing  "),
]  # fmt: skip
IDS = [
    ("id\x1b[2J", "id␛[2J"),
    ("id\x1b]0;title\x07", "id␛]0;title␇"),
    ("\x9bid\x1b[31m", "⟨U+009B⟩id␛[31m"),
    ("id\rover", "id␍over"),
    ("\u202edi", "⟨U+202E⟩di"),
    ("[bold]id[/]", "[bold]id[/]"),
    ("a\\[b] c\\", "a\\[b] c\\"),
    ("line\nbreak\tand tab", "line␊break␉and tab"),
]
# What may remain in plain output: newlines between lines, nothing else below U+0020.
RAW_CONTROL = re.compile(
    "[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]"
)


@pytest.fixture
def url(real_backend: str, shared_server: Callable[[str], EphemeralServer]) -> str:
    return shared_server(real_backend).url


@pytest.fixture
def prefix() -> str:
    return f"esc-{new_id()}"


def _seed(url: str, prefix: str, conversation: str) -> MessageLog:
    log = MessageLog(redis.Redis.from_url(url), conversation, prefix=prefix)
    log.append_many([{"role": "user", "content": stored} for stored, _ in CONTENT])
    log.append_many(
        [
            {
                "role": "assistant",
                "content": "",
                "toolCalls": [{"id": "c\x1b[1m", "name": "n\x9b", "args": {"k": "\u202e"}}],
            },
            {"role": "tool", "content": "two\nlines\x1b[2J", "toolCallId": "c\x1b[1m"},
        ]
    )
    return log


def _assert_safe(output: str) -> None:
    found = RAW_CONTROL.findall(output)
    assert not found, f"raw control characters reached the output: {found!r}"


def _assert_exact_rows(output: str) -> None:
    _assert_safe(output)
    lines = output.splitlines()
    for shown in (shown for _, shown in CONTENT):
        assert any(line.endswith("user       " + shown) for line in lines), (shown, output)
    call = 'assistant  → n⟨U+009B⟩({"k":"⟨U+202E⟩"}) [c␛[1m]'
    assert any(line.endswith(call) for line in lines), output
    assert any(line.endswith("tool       [c␛[1m] two") for line in lines)
    assert " " * 37 + "lines␛[2J" in lines  # a newline in content: an indented line


def _assert_exact_json(output: str, expected: list[str]) -> None:
    _assert_safe(output)  # C1 and bidi written as \\u escapes, C0 by orjson itself
    assert [orjson.loads(line)["content"] for line in output.splitlines()] == expected


def test_show_and_tail_render_hostile_content_visibly_and_exactly(url: str, prefix: str) -> None:
    log = _seed(url, prefix, new_id())
    every = [stored for stored, _ in CONTENT] + ["", "two\nlines\x1b[2J"]
    for command in (["show"], ["tail", "-n", "100"]):
        result = msglog(url, prefix, *command, log.conversation)
        assert result.exit_code == 0, result.output
        _assert_exact_rows(result.output)
        as_json = msglog(url, prefix, *command, log.conversation, "--json")
        _assert_exact_json(as_json.output, every)


@pytest.mark.parametrize("conversation, shown", IDS, ids=[repr(i) for i, _ in IDS])
def test_hostile_conversation_ids_in_ls_show_and_tail(
    url: str, prefix: str, conversation: str, shown: str
) -> None:
    log = MessageLog(redis.Redis.from_url(url), conversation, prefix=prefix)
    log.add("user", "hello")
    table = msglog(url, prefix, "ls")
    assert table.exit_code == 0, table.output
    _assert_safe(table.output)
    assert f" {shown}  " in table.output
    listed = msglog(url, prefix, "ls", "--json")
    _assert_safe(listed.output)
    assert orjson.loads(listed.output)["conversation"] == conversation
    for command in (["show"], ["tail"], ["stats"], ["verify"]):
        result = msglog(url, prefix, *command, conversation)
        assert result.exit_code == 0, result.output
        _assert_safe(result.output)
    assert "hello" in msglog(url, prefix, "show", conversation).output
    assert f"ok    {shown}: 1 entry (seq 1)" in msglog(url, prefix, "verify", conversation).output
    missing = msglog(url, prefix, "show", conversation + "\x1b[2J missing")
    assert missing.exit_code == 1 and missing.output.startswith("msglog: ")
    _assert_safe(missing.output)


def _without_colour_settings() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "NO_COLOR", "TERM")}


def _run(url: str, prefix: str, *args: str, **env: str) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "redis_msglog", "--url", url, "--prefix", prefix, *args],
        env={**_without_colour_settings(), **env},
        capture_output=True,
        timeout=60,
        check=True,
    )
    assert result.stderr == b""
    return result.stdout.decode()


def test_a_real_process_writes_no_raw_control_byte(url: str, prefix: str) -> None:
    conversation = "conv\x1b]0;title\x07\x1b[2J\u202e"
    log = _seed(url, prefix, conversation)
    _assert_exact_rows(_run(url, prefix, "show", conversation))
    _assert_exact_rows(_run(url, prefix, "tail", "-n", "100", conversation))
    listed = _run(url, prefix, "ls")
    _assert_safe(listed)
    assert "conv␛]0;title␇␛[2J⟨U+202E⟩" in listed
    as_json = _run(url, prefix, "show", "--json", conversation)
    assert orjson.loads(as_json.splitlines()[0])["content"] == CONTENT[0][0]
    _assert_safe(as_json)
    # On a terminal (forced), the only escape sequences are the renderer's own colours,
    # and stand-ins are in reverse video (SGR 7).
    coloured = _run(url, prefix, "show", conversation, FORCE_COLOR="1", TERM="xterm-256color")
    assert "\x1b[7m␛\x1b[0m" in coloured
    _assert_exact_rows(re.sub("\x1b\\[[0-9;]*m", "", coloured))
    assert log.count() == len(CONTENT) + 2
