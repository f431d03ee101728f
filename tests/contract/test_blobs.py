"""Large binaries off the row: stored once per conversation in the same atomic append,
put back on every read unless references are asked for, living exactly as long as their
rows, checked by ``msglog verify`` and carried by export and import. On every backend
(a real cluster included: the blobs hash shares the conversation's slot) and both
clients."""

from __future__ import annotations

import hashlib
import os
from datetime import timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis
from click.testing import CliRunner

from redis_msglog import (
    CorruptLogError,
    ImagePart,
    MessageLog,
    MessageTooLargeError,
    StoredMessage,
)
from redis_msglog._cli import main
from redis_msglog.admin import verify_conversation
from redis_msglog.testing import EphemeralServer

from ..conftest import Env, new_id

THRESHOLD = 1024
BIG = os.urandom(5000)  # over the threshold: stored off the row
SMALL = os.urandom(100)  # under it: inline
DIGEST = hashlib.sha256(BIG).hexdigest()


def image_message(data: bytes, text: str = "look") -> dict[str, Any]:
    return {
        "role": "user",
        "content": [
            {"type": "text", "text": text},
            {"type": "image", "data": data, "media_type": "image/png"},
        ],
    }


def image(row: StoredMessage) -> ImagePart:
    assert not isinstance(row.content, str)
    part = row.content[1]
    assert isinstance(part, ImagePart)
    return part


def stored_document(env: Env, stream: str, seq: int) -> dict[str, Any]:
    entries: Any = env.raw.xrange(stream, str(seq), str(seq))  # "<seq>-0".."<seq>-<max>"
    fields = entries[0][1]
    doc: dict[str, Any] = orjson.loads(fields[b"msg"])
    return doc


def test_a_large_binary_is_stored_once_off_the_row_and_read_back(env: Env) -> None:
    log = env.log(blob_threshold=THRESHOLD)
    assert log.append(image_message(BIG, "first")) == 1
    assert log.append_many([image_message(BIG, "again"), image_message(SMALL)]) == 3
    # One field per distinct content, in the conversation's own hash.
    # The bytes, and the last seq of an entry using them (for trim(): docs/lifecycle.md)
    # and the first seq of the call that stored them (for redact()).
    assert set(env.raw.hkeys(log.keys.blobs)) == {
        DIGEST.encode(),
        b"^" + DIGEST.encode(),
        b"_" + DIGEST.encode(),
    }
    assert env.raw.hget(log.keys.blobs, DIGEST) == BIG
    first = stored_document(env, log.keys.stream, 1)["content"][1]
    assert first == {"type": "image", "media_type": "image/png", "blob": DIGEST}
    assert "data" in stored_document(env, log.keys.stream, 3)["content"][1]  # small: inline
    rows = log.all()
    assert [image(r).data for r in rows] == [BIG, BIG, SMALL]
    assert all(image(r).blob is None for r in rows)
    assert image(log.last()).data == SMALL and image(log.last(2)[0]).data == BIG
    assert image(log.read(after=1, limit=1)[0]).data == BIG
    refs = log.all(blobs="refs")
    assert [(image(r).data, image(r).blob) for r in refs[:2]] == [(None, DIGEST)] * 2
    with pytest.raises(ValueError, match="blobs must be"):
        log.all(blobs="inline")


def test_max_message_bytes_applies_to_the_row_after_offload(env: Env) -> None:
    offloading = env.log(blob_threshold=THRESHOLD, max_message_bytes=2000)
    assert offloading.append(image_message(BIG)) == 1
    inline = env.log(blob_threshold=None, max_message_bytes=2000)
    with pytest.raises(MessageTooLargeError):
        inline.append(image_message(BIG))
    assert env.raw.exists(inline.keys.stream, inline.keys.blobs) == 0


def test_hooks_and_followers_get_the_bytes(env: Env) -> None:
    seen: list[StoredMessage] = []
    log = env.log(blob_threshold=THRESHOLD, on_append=seen.extend)
    log.append(image_message(BIG))
    assert image(seen[0]).data == BIG
    if env.flavor == "sync":  # the asyncio follower is covered by the read path it shares
        follower = log.follow()
        assert image(next(follower)).data == BIG


def test_blobs_live_as_long_as_their_rows(env: Env) -> None:
    log = env.log(blob_threshold=THRESHOLD, ttl=timedelta(seconds=30))
    log.append(image_message(BIG))
    log.add("user", "later")
    ttls = [env.raw.pttl(k) for k in (log.keys.seq, log.keys.stream, log.keys.blobs)]
    assert all(25_000 < ttl <= 30_000 for ttl in ttls), ttls


def test_a_missing_blob_is_an_error_not_a_silent_drop(env: Env) -> None:
    log = env.log(blob_threshold=THRESHOLD)
    log.append(image_message(BIG))
    env.raw.hdel(log.keys.blobs, DIGEST)
    with pytest.raises(CorruptLogError, match=f"blob {DIGEST}.*seq 1"):
        log.all()
    assert image(log.all(blobs="refs")[0]).blob == DIGEST  # references still readable
    if env.backend not in ("cluster", "acl"):
        report = verify_conversation(env.raw, "msglog", log.conversation)
        assert any(DIGEST in problem and "seq 1" in problem for problem in report.problems)


def test_a_retried_append_stores_its_blob_once(env: Env) -> None:
    log = env.log(blob_threshold=THRESHOLD)
    assert log.append(image_message(BIG), idempotency_key="k") == 1
    assert log.append(image_message(BIG), idempotency_key="k") == 1  # a replay
    assert log.count() == 1 and env.raw.hlen(log.keys.blobs) == 3  # bytes, ^ and _ fields


def test_the_event_carries_the_reference_not_the_bytes(
    shared_server: Any,
) -> None:
    server: EphemeralServer = shared_server("redis")
    raw = redis.Redis.from_url(server.url)
    log = MessageLog(raw, new_id(), blob_threshold=THRESHOLD)
    pubsub = raw.pubsub()
    pubsub.subscribe(log.keys.channel)
    assert pubsub.get_message(timeout=1) is not None  # the subscribe confirmation
    log.append(image_message(BIG))
    event = pubsub.get_message(timeout=2)
    assert event is not None and len(event["data"]) < 1000
    assert orjson.loads(event["data"])["messages"][0]["content"][1]["blob"] == DIGEST
    pubsub.close()


def test_export_and_import_carry_blobs(shared_server: Any, tmp_path: Path) -> None:
    server: EphemeralServer = shared_server("redis")
    raw = redis.Redis.from_url(server.url)
    prefix = f"blobs-{new_id()}"
    huge = os.urandom(300 * 1024)  # over the default threshold the command's logs use
    source = MessageLog(raw, new_id(), prefix=prefix)
    source.append_many([image_message(huge), image_message(huge, "twice")])
    assert raw.hlen(source.keys.blobs) == 3  # the bytes, their last user and first call
    exported = tmp_path / "out.jsonl"
    runner = CliRunner()
    result = runner.invoke(main, ["--url", server.url, "--prefix", prefix, "export",
                                  source.conversation, "-o", str(exported)])  # fmt: skip
    assert result.exit_code == 0, result.output
    lines = [orjson.loads(line) for line in exported.read_bytes().splitlines()]
    assert all("data" in line["content"][1] for line in lines)  # the bytes themselves
    target = new_id()
    result = runner.invoke(main, ["--url", server.url, "--prefix", prefix, "import",
                                  str(exported), target])  # fmt: skip
    assert result.exit_code == 0, result.output
    imported = MessageLog(raw, target, prefix=prefix)
    assert [image(r).data for r in imported.all()] == [huge, huge]
    assert raw.hlen(imported.keys.blobs) == 3  # stored off the rows again, once
    assert verify_conversation(raw, prefix, target).ok


def test_exporters_say_when_they_are_given_references(env: Env) -> None:
    from redis_msglog import to_anthropic, to_openai, to_responses

    log = env.log(blob_threshold=THRESHOLD)
    log.append(image_message(BIG))
    refs = log.all(blobs="refs")
    for export in (to_openai, to_anthropic, to_responses):
        with pytest.raises(ValueError, match="blobs='hydrate'"):
            export(refs)
    assert to_anthropic(log.all())  # hydrated: fine
