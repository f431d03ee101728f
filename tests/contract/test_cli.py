"""The msglog command against real servers: every subcommand, and its failure paths as
one readable line with a non-zero exit code."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis
from click.testing import CliRunner, Result

from redis_msglog import MessageLog
from redis_msglog._cli import main
from redis_msglog.testing import EphemeralServer

from ..conftest import entry_id, new_id

TURN: list[dict[str, object]] = [
    {"role": "system", "content": "be brief"},
    {"role": "user", "content": "hi [bold]not markup[/bold]"},
    {
        "role": "assistant",
        "content": "",
        "toolCalls": [{"id": "c1", "name": "search", "args": {"q": "redis"}}],
    },
    {"role": "tool", "content": "3 hits", "toolCallId": "c1"},
    {"role": "assistant", "content": "Found 3.\nSecond line é 🎉"},
]


@pytest.fixture
def url(real_backend: str, shared_server: Callable[[str], EphemeralServer]) -> str:
    return shared_server(real_backend).url


@pytest.fixture
def prefix() -> str:
    return f"cli-{new_id()}"  # a keyspace of the test's own, so `ls` sees only its data


def msglog(url: str, prefix: str, *args: str, input: str | None = None) -> Result:
    runner = CliRunner()
    return runner.invoke(main, ["--url", url, "--prefix", prefix, *args], input=input)


def seeded(url: str, prefix: str, conversation: str | None = None) -> MessageLog:
    log = MessageLog(redis.Redis.from_url(url), conversation or new_id(), prefix=prefix)
    log.append_many(TURN)
    return log


def test_ls_lists_conversations_with_counts(url: str, prefix: str) -> None:
    first, odd = seeded(url, prefix), seeded(url, prefix, "we{ird}%id:seq")
    first.add("user", "one more")
    # An idempotency record whose key ends in ":seq" is not a conversation.
    first.add("user", "x", idempotency_key="tricky}:seq")
    result = msglog(url, prefix, "ls", "--json")
    assert result.exit_code == 0, result.output
    rows = sorted((d["conversation"], d["count"]) for d in map(orjson.loads, result.output.split()))
    assert rows == sorted([(first.conversation, 7), (odd.conversation, 5)])
    table = msglog(url, prefix, "ls")
    assert first.conversation in table.output and "we{ird}%id:seq" in table.output
    assert len(msglog(url, prefix, "ls", "--json", "--limit", "1").output.split()) == 1
    assert "no conversations" in msglog(url, f"{prefix}-empty", "ls").output


def test_ls_pages_through_a_large_keyspace(url: str, prefix: str) -> None:
    client = redis.Redis.from_url(url)
    pipe = client.pipeline(transaction=False)
    for i in range(1200):
        pipe.set(f"{prefix}:{{conv-{i}}}:seq", 1)
    pipe.execute()
    result = msglog(url, prefix, "ls", "--json")
    assert result.exit_code == 0
    assert len(result.output.split()) == 1200


def test_show_table_and_json(url: str, prefix: str) -> None:
    log = seeded(url, prefix)
    table = msglog(url, prefix, "show", log.conversation)
    assert table.exit_code == 0, table.output
    assert "hi [bold]not markup[/bold]" in table.output  # content is never rich markup
    assert 'search({"q":"redis"}) [c1]' in table.output
    lines = msglog(url, prefix, "show", log.conversation, "--json").output.splitlines()
    assert [orjson.loads(line)["seq"] for line in lines] == [1, 2, 3, 4, 5]
    assert orjson.loads(lines[4])["content"] == "Found 3.\nSecond line é 🎉"
    last = msglog(url, prefix, "show", log.conversation, "--last", "2", "--json").output
    assert [orjson.loads(line)["seq"] for line in last.splitlines()] == [4, 5]
    after = msglog(url, prefix, "show", log.conversation, "--after", "3", "--json").output
    assert [orjson.loads(line)["seq"] for line in after.splitlines()] == [4, 5]
    both = msglog(url, prefix, "show", log.conversation, "--last", "1", "--after", "1")
    assert both.exit_code == 2 and "cannot be combined" in both.output


PARTS: list[dict[str, Any]] = [
    {
        "role": "user",
        "content": [
            {"type": "text", "text": "compare these"},
            {"type": "image", "data": b"\x89PNG" * 314_573, "media_type": "image/png"},
            {"type": "image", "url": "https://example.com/cat.png"},
            {"type": "audio", "data": b"R" * 35_328, "media_type": "audio/wav"},
            {
                "type": "file",
                "data": b"%PDF" * 56_320,
                "media_type": "application/pdf",
                "filename": "report.pdf",
            },
            {"type": "file", "file_id": "file-abc", "filename": "notes\x1b[2J.txt"},
        ],
    },
    {
        "role": "assistant",
        "content": [
            {
                "type": "thinking",
                "thinking": "t" * 340,
                "signature": "c2ln",
                "provider": "anthropic",
            },
            {"type": "thinking", "thinking": "short"},
            {"type": "redacted_thinking", "data": "ZW5j"},
            {
                "type": "reasoning",
                "id": "rs_abc",
                "summary": ["one", "two"],
                "encrypted_content": "gAAA",
            },
            {"type": "reasoning", "summary": ["one"], "content": ["a", "b"]},
            {"type": "text", "text": "Both\nare cats."},
        ],
        "toolCalls": [{"id": "c1", "name": "zoom", "args": {"x": 1}}],
    },
    {"role": "assistant", "content": [{"type": "refusal", "refusal": "no\x1b]0;pwned\x07 way"}]},
]


def test_show_and_tail_label_content_parts(url: str, prefix: str) -> None:
    log = MessageLog(redis.Redis.from_url(url), new_id(), prefix=prefix)
    log.append_many(PARTS)
    user = (
        "user       compare these [image 1.2 MiB png] [image url https://example.com/cat.png]"
        " [audio 34.5 KiB wav] [file report.pdf 220.0 KiB pdf]"
        " [file notes␛[2J.txt file_id file-abc]"
    )
    assistant = (
        "assistant  [thinking 340 chars, signed] [thinking 5 chars, unsigned]"
        " [redacted thinking] [reasoning rs_abc: 2 summary parts, encrypted]"
        " [reasoning: 1 summary part, 2 content parts] Both"
    )
    for command in (["show"], ["tail"]):
        result = msglog(url, prefix, *command, log.conversation)
        assert result.exit_code == 0, result.output
        lines = result.output.splitlines()
        assert lines[0].endswith(user), result.output
        assert lines[1].endswith(assistant), result.output
        assert lines[2] == " " * 37 + 'are cats. → zoom({"x":1}) [c1]'
        assert lines[3].endswith("assistant  [refusal: no␛]0;pwned␇ way]")
        assert "\x1b" not in result.output and "\x07" not in result.output
    # --json keeps everything: the bytes, the thinking, the signature.
    rows = msglog(url, prefix, "show", log.conversation, "--json").output.splitlines()
    assert orjson.loads(rows[1])["content"][0] == {
        "type": "thinking",
        "thinking": "t" * 340,
        "signature": "c2ln",
        "provider": "anthropic",
    }


def test_export_jsonl_round_trips_through_import(url: str, prefix: str, tmp_path: Path) -> None:
    log = seeded(url, prefix)
    log.append_many([{"role": "user", "content": f"m{i}"} for i in range(2500)])  # 3 pages
    exported = tmp_path / "out.jsonl"
    result = msglog(url, prefix, "export", log.conversation, "-o", str(exported))
    assert result.exit_code == 0, result.output
    copy = new_id()
    result = msglog(url, prefix, "import", str(exported), copy, "--batch-size", "1000")
    assert result.exit_code == 0, result.output
    assert "imported 2505 messages" in result.output
    again = tmp_path / "again.jsonl"
    msglog(url, prefix, "export", copy, "-o", str(again))

    def without_time(path: Path) -> list[dict[str, object]]:
        return [{**orjson.loads(line), "at": None} for line in path.read_bytes().splitlines()]

    assert without_time(again) == without_time(exported)


def test_import_again_after_an_interruption_does_not_duplicate(
    url: str, prefix: str, tmp_path: Path
) -> None:
    source = tmp_path / "in.jsonl"
    source.write_bytes(
        b"".join(orjson.dumps({"role": "user", "content": f"m{i}"}) + b"\n" for i in range(10))
    )
    conversation = new_id()
    partial = tmp_path / "partial.jsonl"  # the first two batches of 4 got in, then a crash
    partial.write_bytes(b"".join(source.read_bytes().splitlines(keepends=True)[:8]))
    assert (
        msglog(url, prefix, "import", str(partial), conversation, "--batch-size", "4").exit_code
        == 0
    )
    result = msglog(url, prefix, "import", str(source), conversation, "--batch-size", "4")
    assert result.exit_code == 0, result.output
    rows = MessageLog(redis.Redis.from_url(url), conversation, prefix=prefix).all()
    assert [m.content for m in rows] == [f"m{i}" for i in range(10)]


def test_import_of_a_bad_file_writes_nothing(url: str, prefix: str, tmp_path: Path) -> None:
    source = tmp_path / "bad.jsonl"
    source.write_text('{"role": "user", "content": "fine"}\n\n{"role": "robot", "content": "x"}\n')
    conversation = new_id()
    result = msglog(url, prefix, "import", str(source), conversation)
    assert result.exit_code == 1
    assert result.output.startswith("msglog: ") and "line 3" in result.output
    assert "Traceback" not in result.output
    assert MessageLog(redis.Redis.from_url(url), conversation, prefix=prefix).count() == 0
    source.write_text("not json\n")
    assert "line 1: not JSON" in msglog(url, prefix, "import", str(source), conversation).output


def test_import_names_the_line_of_a_message_over_the_size_limit(
    url: str, prefix: str, tmp_path: Path
) -> None:
    source = tmp_path / "big.jsonl"
    big = orjson.dumps({"role": "user", "content": "x" * (8 * 1024 * 1024)})  # over 8 MiB
    source.write_bytes(b'{"role": "user", "content": "fine"}\n\n' + big + b"\n")
    conversation = new_id()
    result = msglog(url, prefix, "import", str(source), conversation)
    assert result.exit_code == 1
    assert f"{source} line 3: message 0 encodes to" in result.output
    assert "max_message_bytes" in result.output and "Traceback" not in result.output
    assert MessageLog(redis.Redis.from_url(url), conversation, prefix=prefix).count() == 0


def test_import_names_the_lines_of_a_batch_the_server_refuses(
    url: str, prefix: str, tmp_path: Path
) -> None:
    source = tmp_path / "in.jsonl"
    lines = [orjson.dumps({"role": "user", "content": f"m{i}"}) + b"\n" for i in range(6)]
    source.write_bytes(b"".join(lines))
    conversation = new_id()
    log = MessageLog(redis.Redis.from_url(url), conversation, prefix=prefix)
    # A valid file, and a key the first batch's append needs holds the wrong type: its
    # idempotency record (named after the batch's position and content).
    digest = hashlib.blake2b(b"".join(lines[:4]), digest_size=16).hexdigest()
    record = log.keys.idempotency_record(f"import:0:{digest}")
    redis.Redis.from_url(url).rpush(record, "not a record")
    result = msglog(url, prefix, "import", str(source), conversation, "--batch-size", "4")
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert f"{source} lines 1..4 (batch 1) were not imported" in result.output
    assert "WRONGTYPE" in result.output or "wrong type" in result.output


@pytest.mark.parametrize("fmt", ["openai", "responses", "anthropic", "langchain"])
def test_export_provider_formats(url: str, prefix: str, fmt: str) -> None:
    from redis_msglog import adapters

    log = seeded(url, prefix)
    result = msglog(url, prefix, "export", log.conversation, "--format", fmt)
    assert result.exit_code == 0, result.output
    assert orjson.loads(result.output) == getattr(adapters, f"to_{fmt}")(log.all())


def test_tail_and_tail_follow(url: str, prefix: str) -> None:
    log = seeded(url, prefix)
    result = msglog(url, prefix, "tail", log.conversation, "-n", "2", "--json")
    assert [orjson.loads(line)["seq"] for line in result.output.splitlines()] == [4, 5]
    # -f runs until interrupted: drive the real command in a subprocess.
    env = {**os.environ, "REDIS_URL": url}
    command = [sys.executable, "-m", "redis_msglog", "--prefix", prefix, "tail", "-f", "-n", "1"]
    with subprocess.Popen(
        [*command, "--json", log.conversation], env=env, stdout=subprocess.PIPE
    ) as tail:
        assert tail.stdout is not None
        assert orjson.loads(tail.stdout.readline())["seq"] == 5
        threading.Timer(
            0.3, log.append_many, args=([{"role": "user", "content": "new"}] * 3,)
        ).start()
        assert [orjson.loads(tail.stdout.readline())["seq"] for _ in range(3)] == [6, 7, 8]
        tail.terminate()


def test_stats_of_one_and_of_all(url: str, prefix: str) -> None:
    log = seeded(url, prefix)
    log.add("user", "keyed", idempotency_key="k")
    one = msglog(url, prefix, "stats", log.conversation)
    assert one.exit_code == 0, one.output
    assert " 6 " in one.output and "first commit" in one.output
    assert "idempotency records  " in one.output
    everything = msglog(url, prefix, "stats")
    assert everything.exit_code == 0 and "conversations" in everything.output


def test_verify_reports_precisely_and_exits_1(url: str, prefix: str) -> None:
    good, bad = seeded(url, prefix), seeded(url, prefix)
    client = redis.Redis.from_url(url)
    client.xdel(bad.keys.stream, entry_id(client, bad.keys.stream, 2))
    client.xadd(bad.keys.stream, {"at": "1", "msg": "{not json"}, id="6-0")
    client.set(bad.keys.seq, 5)
    ok = msglog(url, prefix, "verify", good.conversation)
    assert ok.exit_code == 0 and "ok" in ok.output
    result = msglog(url, prefix, "verify", bad.conversation)
    assert result.exit_code == 1
    assert "missing seq 2" in result.output
    assert "entry 6 does not decode" in result.output
    assert "seq counter says 5 but the stream ends at seq 6" in result.output
    every = msglog(url, prefix, "verify", "--all")
    assert every.exit_code == 1 and "2 conversations checked, 1 with problems" in every.output
    client.delete(good.keys.seq)
    gone = msglog(url, prefix, "verify", good.conversation)
    assert gone.exit_code == 1 and "seq counter" in gone.output and "missing" in gone.output


@pytest.mark.parametrize(
    "args, message",
    [
        (["show", "nope"], "conversation 'nope' not found"),
        (["export", "nope"], "conversation 'nope' not found"),
        (["stats", "nope"], "conversation 'nope' not found"),
        (["verify", "nope"], "conversation 'nope' not found"),
        (["tail", "nope"], "conversation 'nope' not found"),
    ],
)
def test_unknown_conversation(url: str, prefix: str, args: list[str], message: str) -> None:
    result = msglog(url, prefix, *args)
    assert result.exit_code == 1
    assert result.output.startswith(f"msglog: {message}")


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "redis_msglog", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )


def test_unreachable_server_is_one_line() -> None:
    result = _run("--url", "redis://127.0.0.1:1/0", "ls")
    assert result.returncode == 1
    assert result.stderr.startswith("msglog: Redis is unavailable")
    assert len(result.stderr.strip().splitlines()) == 1


def test_authentication_failure_is_one_line(
    real_backend: str, private_server: Callable[..., EphemeralServer]
) -> None:
    server = private_server(real_backend, ["--requirepass", "s3cret"])
    for url in (server.url, server.url.replace("redis://", "redis://:wrong@")):
        result = _run("--url", url, "ls")
        assert result.returncode == 1, result.stderr
        assert result.stderr.startswith("msglog: authentication failed"), result.stderr
        assert "Traceback" not in result.stderr
    good = server.url.replace("redis://", "redis://:s3cret@")
    assert _run("--url", good, "ls").returncode == 0


def test_url_after_the_subcommand_and_from_the_environment(url: str, prefix: str) -> None:
    log = seeded(url, prefix)
    after = _run("--prefix", prefix, "show", log.conversation, "--url", url, "--json")
    assert after.returncode == 0 and len(after.stdout.splitlines()) == 5
    from_env = _run(
        "--prefix", prefix, "show", log.conversation, "--json", env={**os.environ, "REDIS_URL": url}
    )
    assert from_env.returncode == 0 and len(from_env.stdout.splitlines()) == 5


def test_bad_arguments_are_usage_errors() -> None:
    result = _run("show")
    assert result.returncode == 2 and "Missing argument" in result.stderr
    assert _run("--version").stdout.startswith("msglog, version ")


def test_commands_on_a_cluster(shared_cluster: Callable[[], Any], prefix: str) -> None:
    cluster = shared_cluster()
    client = cluster.client()
    logs = [MessageLog(client, new_id(), prefix=prefix) for _ in range(6)]  # spread over slots
    for log in logs:
        log.append_many(TURN)
    url = f"redis://127.0.0.1:{cluster.port}/0"
    listed = msglog(url, prefix, "--cluster", "ls", "--json")
    assert listed.exit_code == 0, listed.output
    found = {orjson.loads(line)["conversation"] for line in listed.output.split()}
    assert found == {log.conversation for log in logs}
    shown = msglog(url, prefix, "--cluster", "show", logs[0].conversation, "--json")
    assert len(shown.output.splitlines()) == 5
    assert msglog(url, prefix, "--cluster", "verify", "--all").exit_code == 0
    stats = msglog(url, prefix, "--cluster", "stats")
    assert stats.exit_code == 0 and "3 primaries" in stats.output


# -- edits (docs/edits.md) --------------------------------------------------------------


def edited(url: str, prefix: str) -> MessageLog:
    """A conversation with every kind of edit: 5 messages, a pop, a compaction, an
    archive watermark, then one more message."""
    log = seeded(url, prefix)
    log.pop()  # 6 retracts 5
    log.compact([{"role": "system", "content": "summary of the start"}], through_seq=2)  # 7, 8
    log.archive(3)  # 9
    log.add("user", "after the edits")  # 10
    return log


def test_show_renders_the_view_and_physical_renders_the_edits(url: str, prefix: str) -> None:
    log = edited(url, prefix)
    shown = msglog(url, prefix, "show", log.conversation)
    assert shown.exit_code == 0, shown.output
    assert "summary of the start" in shown.output and "Found 3." not in shown.output
    assert "retract" not in shown.output
    physical = msglog(url, prefix, "show", "--physical", log.conversation)
    assert physical.exit_code == 0, physical.output
    assert "retract 5" in physical.output and "archive through 3" in physical.output
    assert "compact through 2: the next 1 messages replace it" in physical.output
    tail = msglog(url, prefix, "tail", "-n", "2", log.conversation)
    assert "archive through 3" in tail.output and "after the edits" in tail.output


def test_verify_checks_edits_and_the_view_keys(url: str, prefix: str) -> None:
    log = edited(url, prefix)
    assert msglog(url, prefix, "verify", log.conversation).exit_code == 0
    client = redis.Redis.from_url(url)
    # The view keys no longer match the entries: the run "3-6" (g1, after the summary
    # g0) loses row 3.
    assert client.hget(log.keys.view, "g1") == b"3-6"
    client.hset(log.keys.view, "g1", "4-6")
    result = msglog(url, prefix, "verify", log.conversation)
    assert result.exit_code == 1 and "not the fold of the entries" in result.output


def test_an_edit_that_refers_to_no_row_is_a_verify_problem(url: str, prefix: str) -> None:
    log = seeded(url, prefix)
    client = redis.Redis.from_url(url)
    client.xadd(
        log.keys.stream, {"at": "1700000000000000", "edit": '{"op":"retract","seqs":[9]}'}, id="6-0"
    )
    client.incr(log.keys.seq)
    result = msglog(url, prefix, "verify", log.conversation)
    assert result.exit_code == 1 and "entry 6: retracts seqs [9]" in result.output


def test_export_and_import_carry_the_edits(url: str, prefix: str, tmp_path: Path) -> None:
    log = edited(url, prefix)
    out = tmp_path / "edited.jsonl"
    assert msglog(url, prefix, "export", log.conversation, "-o", str(out)).exit_code == 0
    lines = out.read_bytes().splitlines()
    assert len(lines) == 10 and b'"edit":{"op":"retract","seqs":[5]}' in lines[5]
    copy = new_id()
    for _ in range(2):  # again: an interrupted import run twice writes everything once
        result = msglog(url, prefix, "import", str(out), copy, "--batch-size", "2")
        assert result.exit_code == 0, result.output
    imported = MessageLog(redis.Redis.from_url(url), copy, prefix=prefix)
    assert imported.count() == 10
    assert [m.model_dump(exclude={"at"}) for m in imported.all()] == [
        m.model_dump(exclude={"at"}) for m in log.all()
    ]
    assert [m.seq for m in imported.all(view="active")] == [m.seq for m in log.all(view="active")]
    # A conversation holding the file's first entries: the import goes on after them.
    started = seeded(url, prefix)
    assert msglog(url, prefix, "import", str(out), started.conversation).exit_code == 0
    assert [m.model_dump(exclude={"at"}) for m in started.all(view="physical")] == [
        m.model_dump(exclude={"at"}) for m in log.all(view="physical")
    ]
    other = MessageLog(redis.Redis.from_url(url), new_id(), prefix=prefix)
    other.add("user", "something else")
    refused = msglog(url, prefix, "import", str(out), other.conversation)
    assert refused.exit_code == 1 and "import it into an empty conversation" in refused.output
    assert other.count() == 1


# -- what the numbers are, erased and damaged conversations ---------------------


def test_ls_stats_and_verify_say_what_they_count(url: str, prefix: str) -> None:
    """The seq counts every entry, edits included, and a trim does not lower it: ``ls``,
    ``stats`` and ``verify`` called it "messages", and ``verify`` said "seqs 1..8" of a
    log that starts at seq 4 after a trim."""
    log = MessageLog(redis.Redis.from_url(url), new_id(), prefix=prefix)
    log.append_many([{"role": "user", "content": f"m{i}"} for i in range(1, 7)])
    log.pop()  # 7: an edit entry, one seq more, one message less
    assert "ok    " + log.conversation + ": 7 entries (seqs 1..7)\n" in (
        msglog(url, prefix, "verify", log.conversation).output
    )
    log.trim(3)  # 8: the trim entry; seqs 1..3 gone
    listed = msglog(url, prefix, "ls")
    assert listed.exit_code == 0, listed.output
    assert listed.output.split()[:6] == ["conversation", "last", "seq", "last", "activity", "(UTC)"]
    assert listed.output.split()[6:8] == [log.conversation, "8"]
    one = msglog(url, prefix, "stats", log.conversation)
    assert one.exit_code == 0, one.output
    assert " entries                          5 (seqs 4..8, 1..3 trimmed) " in one.output
    every = msglog(url, prefix, "stats")
    assert " entries appended (edits included)  8 " in every.output
    verified = msglog(url, prefix, "verify", log.conversation)
    assert verified.exit_code == 0, verified.output
    assert verified.output == f"ok    {log.conversation}: 5 entries (seqs 4..8, 1..3 trimmed)\n"
    log.redact(5)  # 9: its entry gone, a marker row in its place
    verified = msglog(url, prefix, "verify", log.conversation)
    expected = f"ok    {log.conversation}: 5 entries (seqs 4..9, 1..3 trimmed, 1 redacted)\n"
    assert verified.output == expected
    stats_line = "5 (seqs 4..9, 1..3 trimmed, 1 redacted)"
    assert stats_line in msglog(url, prefix, "stats", log.conversation).output
    checked = msglog(url, prefix, "verify", "--all").output
    assert checked.endswith("\n1 conversation checked, 0 with problems\n")
    for output in (listed.output, one.output, every.output, verified.output, checked):
        assert "messages" not in output


@pytest.mark.parametrize("command", ["show", "tail", "export"])
def test_reading_an_erased_conversation_says_so(url: str, prefix: str, command: str) -> None:
    """``show`` of an erased conversation printed nothing and exited 0 (its tombstone
    reads as an empty log); now it fails as for an unknown one, saying why."""
    log = seeded(url, prefix)
    log.erase()
    result = msglog(url, prefix, command, log.conversation)
    assert result.exit_code == 1
    assert result.stdout == ""
    said = result.stderr.strip()
    assert said.startswith(f"msglog: conversation {log.conversation!r} was erased"), said
    assert f"its tombstone {log.keys.seq} refuses writes into it for another " in said
    assert said.endswith("seconds (23:59:59)") or said.endswith("seconds (1 day, 0:00:00)")
    unknown = msglog(url, prefix, command, new_id())  # the same, for an unknown one
    assert unknown.exit_code == 1 and unknown.stdout == ""
    assert "not found" in unknown.stderr


@pytest.mark.parametrize("damage", ["garbage", "deleted"])
def test_a_damaged_counter_is_named(url: str, prefix: str, damage: str) -> None:
    """``ls`` and ``stats`` showed a seq counter deleted, or holding what is not a seq,
    beside its stream as "-1 messages" (``stats CONV``: 0 for a deleted one)."""
    log = seeded(url, prefix)
    client = redis.Redis.from_url(url)
    if damage == "garbage":
        client.set(log.keys.seq, "garbage")
    else:
        client.delete(log.keys.seq)
    listed = msglog(url, prefix, "ls")
    assert listed.exit_code == 0, listed.output
    assert f" {log.conversation}  damaged counter  " in listed.output
    one = msglog(url, prefix, "stats", log.conversation)
    assert one.exit_code == 0, one.output
    assert " entries                          damaged counter; 5 in the stream (see verify)" in (
        one.output
    )
    every = msglog(url, prefix, "stats")
    assert " entries appended (edits included)  0 (1 damaged counter not counted) " in (
        every.output
    )
    verified = msglog(url, prefix, "verify", log.conversation)
    assert verified.exit_code == 1
    assert verified.output.startswith(f"FAIL  {log.conversation}: 5 entries, damaged counter\n")
    assert ("not a seq" if damage == "garbage" else "is missing") in verified.output
    for output in (listed.output, one.output, every.output, verified.output):
        assert " -1 " not in output and "None" not in output
    if damage == "garbage":  # an edit's refusal by the script, in words (finding 4)
        refused = msglog(url, prefix, "redact", log.conversation, "1", "--yes")
        assert refused.exit_code == 1
        assert refused.stderr.startswith(
            f'msglog: seq counter {log.keys.seq} holds "garbage", not a seq. Nothing was '
            "written; `msglog verify` lists what is wrong."
        ), refused.stderr
