"""The lifecycle writes bounded by bytes (docs/lifecycle.md, "Bounds"): a redaction or a
trim rewrites the stream only from the node holding the first entry it changes (counted
with INFO commandstats on a private server, not timed), leaves none of the removed text
in an uncompressed DUMP of any key, and is refused over ``max_rewrite_bytes`` writing
nothing (every backend); one append call is refused over ``max_batch_bytes`` before
anything is sent; an import splits its batches to stay under it."""

from __future__ import annotations

import io
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import orjson
import pytest
import redis

from redis_msglog import (
    BatchTooLargeError,
    MessageLog,
    RewriteTooLargeError,
    admin,
)
from redis_msglog.testing import EphemeralServer

from .. import conftest
from ..conftest import ACL_USER, Env, new_id


@pytest.fixture(autouse=True)
def _deletions_granted(request: pytest.FixtureRequest) -> None:
    """The ACL backend's user as ``acl_rules(deletions=True)`` makes it."""
    if "env" in request.fixturenames:
        env: Env = request.getfixturevalue("env")
        if env.backend == "acl":
            env.raw.execute_command("ACL", "SETUSER", ACL_USER, "+xtrim", "+xdel", "+xsetid")


@pytest.fixture(scope="module")
def plain_server() -> Iterator[EphemeralServer]:
    """A server of this module's own: DUMP as it is stored (no compression), commandstats
    that count only this module's calls."""
    args = [*conftest.SERVER_ARGS, "--rdbcompression", "no"]
    server = EphemeralServer(conftest.require_binary("redis"), args).start()
    yield server
    server.stop()


@pytest.fixture
def client(plain_server: EphemeralServer) -> redis.Redis:
    r = redis.Redis.from_url(plain_server.url)
    r.flushall()
    return r


def user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


def xadds(client: redis.Redis) -> int:
    stats = client.info("commandstats")
    return int(stats.get("cmdstat_xadd", {}).get("calls", 0))


def every_dump(client: redis.Redis) -> bytes:
    return b"".join(client.dump(key) or b"" for key in client.scan_iter(count=1000))


def keys_of(log: Any) -> list[str]:
    keys = log.keys
    return [keys.seq, keys.stream, keys.view, keys.hidden, keys.blobs, keys.producers]


def test_a_redaction_rewrites_only_the_tail_from_its_node(client: redis.Redis) -> None:
    """400 messages; redacting seq 350 re-adds one node's capacity (99 entries) before it
    and the 50 after it (with its own edit entry), not the stream: 151 XADDs, not 400.
    The redacted text is in no key's DUMP; verify accepts the log."""
    log = MessageLog(client, new_id())
    log.append_many([user(f"row-{seq:04d}-" + "x" * 1000) for seq in range(1, 401)])
    client.config_resetstat()
    assert log.redact(350, reason="test") == 401
    assert xadds(client) == 1 + 99 + 50 + 1  # its entry, then 99 before, 50 after and it
    assert b"row-0350-" not in every_dump(client)
    assert b"row-0349-" in every_dump(client)
    assert [row.seq for row in log.all()] == list(range(1, 401))
    assert log.all()[349].redacted
    assert admin.verify_conversation(client, "msglog", log.conversation).problems == []
    client.config_resetstat()  # one near the end: a node's capacity and what follows
    log.redact(399)
    assert xadds(client) == 1 + 99 + 1 + 1 + 1  # 300..398, 400, 401, its own 402


@pytest.mark.parametrize("size", [100, 40_000])  # many entries a node, one entry a node
def test_a_trim_leaves_none_of_the_trimmed_text_in_any_dump(client: redis.Redis, size: int) -> None:
    """XTRIM only marks the trimmed entries of the last node deleted: the kept entries are
    rewritten, so no key's uncompressed DUMP holds a trimmed message (before: the
    last node's did)."""
    log = MessageLog(client, new_id())
    log.append_many([user(f"gone-{seq:03d}" + "x" * size) for seq in range(1, 51)])
    log.append_many([user(f"kept-{seq:03d}" + "x" * size) for seq in range(51, 131)])
    log.trim(50)
    dumped = every_dump(client)
    assert b"gone-" not in dumped
    assert dumped.count(b"kept-") == 80
    assert [row.seq for row in log.all()] == list(range(51, 131))
    assert admin.verify_conversation(client, "msglog", log.conversation).problems == []


def test_max_age_leaves_none_of_the_trimmed_text_in_any_dump(client: redis.Redis) -> None:
    log = MessageLog(client, new_id(), max_age=timedelta(seconds=1))
    log.append_many([user(f"aged-{seq:03d}") for seq in range(1, 31)])
    time.sleep(1.1)
    log.append_many([user(f"new-{seq:03d}") for seq in range(31, 41)])
    assert [row.seq for row in log.all()] == list(range(32, 42))  # the trim entry at 31
    assert b"aged-" not in every_dump(client)
    assert admin.verify_conversation(client, "msglog", log.conversation).problems == []


def test_max_age_over_the_cap_trims_without_the_rewrite(client: redis.Redis) -> None:
    """An append is not refused for its retention: over max_rewrite_bytes, max_age trims
    as before (the trimmed entries of the last node stay until it goes)."""
    log = MessageLog(client, new_id(), max_age=timedelta(seconds=1), max_rewrite_bytes=500)
    log.append_many([user(f"aged-{seq:03d}") for seq in range(1, 31)])
    time.sleep(1.1)
    log.append_many([user("x" * 100) for _ in range(10)])
    assert log.all()[0].seq == 32


def test_a_rewrite_over_the_cap_is_refused_writing_nothing(env: Env) -> None:
    log = env.log(max_rewrite_bytes=2000)
    log.append_many([user(f"m{seq}" + "x" * 100) for seq in range(1, 41)])
    before = {key: env.raw.dump(key) for key in keys_of(log)}
    for op, seq in (("redact", 1), ("redact", 40), ("trim", 1)):
        with pytest.raises(RewriteTooLargeError, match="max_rewrite_bytes") as caught:
            getattr(log, op)(seq)
        assert caught.value.cap == 2000
        assert "2000 bytes" in str(caught.value)
        assert {key: env.raw.dump(key) for key in keys_of(log)} == before
    assert log.trim(39) == 41  # a tail within the cap
    assert log.redact(40) == 42


def test_one_call_over_max_batch_bytes_is_refused_writing_nothing(env: Env) -> None:
    log = env.log(max_batch_bytes=10_000)
    with pytest.raises(BatchTooLargeError, match="max_batch_bytes") as caught:
        log.append_many([user("x" * 1000) for _ in range(20)])  # the plain lane
    assert caught.value.cap == 10_000
    with pytest.raises(BatchTooLargeError):  # the model route
        log.append_many([{**user("x" * 1000), "metadata": {"k": 1}} for _ in range(20)])
    with pytest.raises(BatchTooLargeError):
        log.replace([user("x" * 1000) for _ in range(20)])
    assert log.count() == 0
    assert log.append_many([user("x" * 1000) for _ in range(9)]) == 9


def test_an_import_splits_its_batches_to_stay_under_the_cap(client: redis.Redis) -> None:
    """100 lines of 1 KB into a log whose calls may send 20,000 bytes: imported, in
    batches each under it (before: one batch of 100 KB, refused)."""
    messages = [user(f"m{seq}" + "x" * 1000) for seq in range(1, 101)]
    lines = b"".join(orjson.dumps(message) + b"\n" for message in messages)
    target = MessageLog(client, new_id(), max_batch_bytes=20_000)
    result = admin.import_jsonl(target, io.BytesIO(lines))
    assert result.new == 100
    assert [row.content for row in target.all()] == [m["content"] for m in messages]
