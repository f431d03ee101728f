"""The msglog command as an operator uses it, in a real subprocess: input from a pipe, an
export that fails, a reader that leaves early, a cluster node given as a plain URL,
imports run twice, and URLs that hold a password."""

from __future__ import annotations

import io
import os
import shlex
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, cast

import orjson
import pytest
import redis

from redis_msglog import InvalidArgumentError, MessageLog
from redis_msglog.admin import ImportFileError, import_jsonl
from redis_msglog.testing import EphemeralServer

from ..conftest import new_id, tls_server

pytestmark = pytest.mark.slow  # each test runs `msglog` in a real subprocess

LINES = [{"role": "user", "content": f"m{i}"} for i in range(16)]


def msglog(
    url: str, *args: str, input: bytes | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[bytes]:
    """``python -m redis_msglog --url URL ARGS`` in a subprocess (this worktree's code)."""
    return subprocess.run(
        [sys.executable, "-m", "redis_msglog", "--url", url, *args],
        input=input,
        capture_output=True,
        timeout=120,
        env=env or _env(),
        check=False,
    )


def _env(**extra: str) -> dict[str, str]:
    """The environment, with this worktree first on PYTHONPATH and the venv's scripts
    (``msglog``) on PATH."""
    root = str(Path(__file__).resolve().parents[2])
    path = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])
    return {**os.environ, "PYTHONPATH": root, "PATH": path, **extra}


def jsonl(rows: list[dict[str, Any]]) -> bytes:
    return b"".join(orjson.dumps(r) + b"\n" for r in rows)


def url_of(real_backend: str, shared_server: Callable[[str], EphemeralServer]) -> str:
    return shared_server(real_backend).url


# -- item 14: import reads its input once ---------------------------------------------------


def test_import_from_a_pipe_imports_everything(
    real_backend: str, shared_server: Callable[[str], EphemeralServer]
) -> None:
    url = url_of(real_backend, shared_server)
    for name in ("/dev/stdin", "-"):
        conversation = new_id()
        result = msglog(url, "import", name, conversation, "--batch-size", "5", input=jsonl(LINES))
        assert result.returncode == 0, result.stderr
        log = MessageLog(redis.Redis.from_url(url), conversation)
        assert [m.content for m in log.all()] == [r["content"] for r in LINES]
        assert b"16 new, 0 already there" in result.stderr


def test_import_from_process_substitution(
    real_backend: str, shared_server: Callable[[str], EphemeralServer], tmp_path: Path
) -> None:
    url = url_of(real_backend, shared_server)
    source = tmp_path / "in.jsonl"
    source.write_bytes(jsonl(LINES))
    conversation = new_id()
    command = (
        f"{shlex.quote(sys.executable)} -m redis_msglog --url {shlex.quote(url)} "
        f"import <(cat {shlex.quote(str(source))}) {shlex.quote(conversation)}"
    )
    result = subprocess.run(
        ["bash", "-c", command], capture_output=True, env=_env(), timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    assert MessageLog(redis.Redis.from_url(url), conversation).count() == 16


def test_a_bad_line_from_a_pipe_writes_nothing(
    real_backend: str, shared_server: Callable[[str], EphemeralServer]
) -> None:
    url = url_of(real_backend, shared_server)
    conversation = new_id()
    bad = jsonl(LINES[:3]) + b'{"role": "nobody"}\n'
    result = msglog(url, "import", "-", conversation, input=bad)
    assert result.returncode == 1
    assert b"line 4" in result.stderr and len(result.stderr.splitlines()) == 1
    assert MessageLog(redis.Redis.from_url(url), conversation).count() == 0


# -- item 17: a second import says nothing was new ------------------------------------------


class _FailingReader(io.RawIOBase):
    """A binary file whose read fails after the first chunk (a disk error, a dropped pipe)."""

    def __init__(self) -> None:
        self.chunks = [b'{"role": "user", "content": "first"}\n']

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        if self.chunks:
            return self.chunks.pop()
        raise OSError(5, "Input/output error")


def test_import_from_a_text_or_failing_file_is_typed_and_writes_nothing(
    real_backend: str, shared_server: Callable[[str], EphemeralServer]
) -> None:
    """A file object opened in text mode is a bad argument; a read that fails is an
    ImportFileError, as for a path: both before anything is written."""
    client = redis.Redis.from_url(url_of(real_backend, shared_server))
    log = MessageLog(client, new_id())
    with pytest.raises(InvalidArgumentError, match="binary"):
        import_jsonl(log, cast(IO[bytes], io.StringIO('{"role": "user", "content": "hi"}\n')))
    with pytest.raises(ImportFileError, match="Input/output error"):
        import_jsonl(log, cast(IO[bytes], _FailingReader()))
    assert log.count() == 0 and not client.exists(log.keys.seq)


def test_a_second_import_says_how_many_were_new(
    real_backend: str, shared_server: Callable[[str], EphemeralServer], tmp_path: Path
) -> None:
    url = url_of(real_backend, shared_server)
    source = tmp_path / "in.jsonl"
    source.write_bytes(jsonl(LINES))
    partial = tmp_path / "partial.jsonl"
    partial.write_bytes(jsonl(LINES[:10]))
    conversation = new_id()
    first = msglog(url, "import", str(partial), conversation, "--batch-size", "5")
    assert b"imported 10 messages" in first.stderr and b"10 new, 0 already there" in first.stderr
    rest = msglog(url, "import", str(source), conversation, "--batch-size", "5")
    assert rest.returncode == 0, rest.stderr
    assert b"imported 16 messages" in rest.stderr and b"6 new, 10 already there" in rest.stderr
    again = msglog(url, "import", str(source), conversation, "--batch-size", "5")
    assert b"0 new, 16 already there" in again.stderr, again.stderr
    assert MessageLog(redis.Redis.from_url(url), conversation).count() == 16


# -- item 15: a failed export leaves the existing file --------------------------------------


def test_a_failed_export_keeps_the_existing_file(
    real_backend: str, shared_server: Callable[[str], EphemeralServer], tmp_path: Path
) -> None:
    url = url_of(real_backend, shared_server)
    raw = redis.Redis.from_url(url)
    log = MessageLog(raw, new_id())
    log.append_many([{"role": "user", "content": f"m{i}"} for i in range(1500)])  # 2 pages
    target = tmp_path / "out.jsonl"
    target.write_bytes(b"yesterday's export\n")
    target.chmod(0o640)
    good = msglog(url, "export", log.conversation, "-o", str(target))
    assert good.returncode == 0, good.stderr
    assert len(target.read_bytes().splitlines()) == 1500
    assert stat.S_IMODE(target.stat().st_mode) == 0o640  # the file's permissions kept
    before = target.read_bytes()
    # An entry on the second page that does not decode: the export fails midway.
    raw.xadd(log.keys.stream, {"msg": b"not json"}, id="1501-1")
    raw.set(log.keys.seq, 1501)
    failed = msglog(url, "export", log.conversation, "-o", str(target))
    assert failed.returncode == 1 and b"1501" in failed.stderr, failed.stderr
    assert target.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.jsonl"]  # no temporary left
    # A new file gets what open() would give it.
    fresh = tmp_path / "fresh.jsonl"
    assert msglog(url, "export", log.conversation, "-o", str(fresh)).returncode == 1
    assert not fresh.exists()


# -- item 17: a reader that leaves, a cluster node, the stats label -------------------------


def test_show_into_head_exits_quietly(
    real_backend: str, shared_server: Callable[[str], EphemeralServer], tmp_path: Path
) -> None:
    url = url_of(real_backend, shared_server)
    log = MessageLog(redis.Redis.from_url(url), new_id())
    log.append_many([{"role": "user", "content": f"line {i}"} for i in range(3000)])
    errors = tmp_path / "stderr"
    for args in ("show", "show --json", "export", "tail -n 3000"):
        command = (
            f"{shlex.quote(sys.executable)} -m redis_msglog --url {shlex.quote(url)} "
            f"{args.split()[0]} {log.conversation} {' '.join(args.split()[1:])} "
            f"2>{shlex.quote(str(errors))} | head -n 1 >/dev/null; echo ${{PIPESTATUS[0]}}"
        )
        result = subprocess.run(
            ["bash", "-c", command], capture_output=True, text=True, env=_env(), check=False
        )
        assert errors.read_text() == "", (args, errors.read_text())
        assert result.stdout.strip() == "141", args  # 128 + SIGPIPE, as Unix tools


def test_a_cluster_node_without_cluster_is_used_as_one(
    shared_cluster: Callable[[], Any],
) -> None:
    cluster = shared_cluster()
    client = cluster.client()
    logs = [MessageLog(client, new_id()) for _ in range(6)]  # spread over the 3 primaries
    for log in logs:
        log.add("user", "hello")
    url = f"redis://127.0.0.1:{cluster.port}/0"
    for log in logs:
        shown = msglog(url, "show", log.conversation, "--json")
        assert shown.returncode == 0, shown.stderr
        assert orjson.loads(shown.stdout)["content"] == "hello"
    stats = msglog(url, "stats")
    assert stats.returncode == 0 and b"3 primaries" in stats.stdout, stats.stderr


def test_a_moved_reply_is_named(shared_cluster: Callable[[], Any]) -> None:
    """Where the cluster cannot be detected (a user without INFO), a MOVED reply says
    what it is, in one line."""
    cluster = shared_cluster()
    node = redis.Redis(port=cluster.port)
    node.execute_command("ACL", "SETUSER", "noinfo", "on", ">pw", "~*", "&*", "+@all", "-info")
    elsewhere = next(c for c in (new_id() for _ in range(100)) if not _served_by(cluster, node, c))
    MessageLog(cluster.client(), elsewhere).add("user", "hi")
    url = f"redis://noinfo:pw@127.0.0.1:{cluster.port}/0"
    for args in (["show", elsewhere], ["import", "-", elsewhere]):
        result = msglog(url, *args, input=jsonl(LINES[:1]))
        line = result.stderr.decode()
        assert result.returncode == 1
        assert "a node of a Redis Cluster" in line and "--cluster" in line, line
        assert len(line.splitlines()) == 1 and "pw@" not in line


def _served_by(cluster: Any, node: redis.Redis, conversation: str) -> bool:
    slot = node.execute_command("CLUSTER", "KEYSLOT", f"msglog:{{{conversation}}}:seq")
    return bool(cluster.owner(int(slot)).port == cluster.port)


def test_stats_labels_what_it_counts(
    real_backend: str, shared_server: Callable[[str], EphemeralServer]
) -> None:
    url = url_of(real_backend, shared_server)
    log = MessageLog(redis.Redis.from_url(url), new_id())
    log.add("user", "hi")
    result = msglog(url, "stats", log.conversation)
    assert result.returncode == 0, result.stderr
    assert b"memory (counter, stream, blobs)" in result.stdout
    assert b"counter + stream" not in result.stdout


# -- item 12: no command prints a credential -------------------------------------------------


PASSWORD = "pw-s3cret-&-'quoted'"


def secured(real_backend: str, private_server: Callable[..., EphemeralServer]) -> str:
    """A server whose default user needs PASSWORD; its URL with the password in it."""
    server = private_server(real_backend)
    redis.Redis(port=server.port).config_set("requirepass", PASSWORD)
    from urllib.parse import quote

    return f"redis://:{quote(PASSWORD, safe='')}@127.0.0.1:{server.port}/0"


def test_no_command_prints_the_password(
    real_backend: str, private_server: Callable[..., EphemeralServer], tmp_path: Path
) -> None:
    url = secured(real_backend, private_server)
    log = MessageLog(redis.Redis.from_url(url), new_id())
    log.add("user", "hi")
    for args in (
        ["stats"],
        ["stats", log.conversation],
        ["ls"],
        ["show", log.conversation],
        ["verify", "--all"],
        ["show", "missing"],
        ["export", log.conversation, "-o", str(tmp_path / "x.jsonl")],
    ):
        result = msglog(url, *args)
        text = (result.stdout + result.stderr).decode()
        assert "s3cret" not in text and "%27" not in text, (args, text)
    stats = msglog(url, "stats").stdout.decode()
    assert f"redis://:***@127.0.0.1:{url.rsplit(':', 1)[1]}" in stats


def test_the_demo_hint_hides_the_password_and_works(
    real_backend: str, private_server: Callable[..., EphemeralServer]
) -> None:
    url = secured(real_backend, private_server)
    demo = msglog(url, "demo", "--workers", "2", "--turns", "1", "--prefix", "demo x")
    text = demo.stdout.decode()
    assert demo.returncode == 0, text + demo.stderr.decode()
    assert "s3cret" not in text and "%27" not in text
    hint = text[text.index("inspect it:") :].splitlines()[1:3]
    show, xrange = (line.strip() for line in hint)
    assert show.startswith("msglog --url \"$REDIS_URL\" --prefix 'demo x' show demo-")
    env = _env(REDIS_URL=url, REDISCLI_AUTH=PASSWORD)
    shown = subprocess.run(["bash", "-c", show], capture_output=True, env=env, check=False)
    assert shown.returncode == 0 and shown.stdout.count(b"\n") == 8, shown.stderr
    entries = subprocess.run(["bash", "-c", xrange], capture_output=True, env=env, check=False)
    assert entries.returncode == 0 and entries.stdout.splitlines().count(b"msg") == 4, entries


def test_the_demo_hint_works_over_tls(
    private_server: Callable[..., EphemeralServer], tmp_path: Path
) -> None:
    _, tls_port, ca_pem = tls_server(private_server, tmp_path)
    url = f"rediss://127.0.0.1:{tls_port}/0?ssl_ca_certs={ca_pem}"
    demo = msglog(url, "demo", "--workers", "2", "--turns", "1")
    text = demo.stdout.decode()
    assert demo.returncode == 0, text + demo.stderr.decode()
    hint = text[text.index("inspect it:") :].splitlines()[1:3]
    show, xrange = (
        subprocess.run(["bash", "-c", line.strip()], capture_output=True, env=_env(), check=False)
        for line in hint
    )
    assert show.returncode == 0 and len(show.stdout.splitlines()) == 8, show
    assert xrange.returncode == 0 and xrange.stdout.splitlines().count(b"msg") == 4, xrange


def test_the_hint_quotes_every_word() -> None:
    from redis_msglog._tools.demo import inspect_hint

    lines = inspect_hint("redis://h:1/0", "c'; rm -rf ~", "p:{c}:stream", "p $x", given=True)
    assert lines[1] == "  msglog --url redis://h:1/0 --prefix 'p $x' show 'c'\"'\"'; rm -rf ~'"
    assert shlex.split(lines[2])[4] == "p:{c}:stream"
    from_env = inspect_hint("redis://:pw@h:1/0", "c", "s", "msglog", given=False)
    assert from_env[1] == "  msglog show c" and "pw" not in "".join(from_env)
    assert from_env[2].startswith("  redis-cli -u redis://h:1/0 XRANGE")
    named = inspect_hint("rediss://me:pw@h:1/0?ssl_cert_reqs=none", "c", "s", "m", given=True)
    assert named[1] == '  msglog --url "$REDIS_URL" --prefix m show c'
    assert (
        named[2] == "  redis-cli -u rediss://h:1/0 --user me --tls --insecure XRANGE s - + COUNT 4"
    )
