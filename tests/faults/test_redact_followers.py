"""redact() under followers, across processes:
writer processes append while another process redacts messages, follower processes
fold everything they receive into a LogView and a reader process reads every way.
Afterwards every follower's view equals a fresh read (the redacted rows in place,
marked, markers and replacements alike), no follower or reader failed (a read never met
a gap: a redaction committed in its middle is read again), and the text of no redacted
message is left anywhere in the conversation's keys."""

from __future__ import annotations

import multiprocessing
import random
import time
from typing import Any

import pytest
import redis
import redis.cluster

from redis_msglog import EditEntry, InvalidEditError, LogView, MessageLog, StoredMessage

from ..conftest import new_id

pytestmark = pytest.mark.slow  # followers in threads while messages are redacted

WRITERS, FOLLOWERS, PER_WRITER = 3, 3, 40
END = "END"


def _client(where: tuple[str, Any]) -> Any:
    kind, address = where
    if kind == "cluster":
        return redis.cluster.RedisCluster(host="127.0.0.1", port=address)
    return redis.Redis.from_url(address)


def _write(where: tuple[str, Any], conversation: str, worker: int) -> None:
    log = MessageLog(_client(where), conversation)
    for i in range(PER_WRITER):
        batch = [{"role": "user", "content": f"secret-{worker}-{i}-{k}"} for k in range(1 + i % 2)]
        log.append_many(batch)
        time.sleep(random.random() / 200)


def _redact(where: tuple[str, Any], conversation: str, stop: Any, out: Any) -> None:
    """Redact random messages (not yet redacted) until told to stop; report their text."""
    log = MessageLog(_client(where), conversation)
    gone: list[str] = []
    try:
        while not stop.is_set():
            rows = [r for r in log.all() if not r.redacted]
            if rows:
                row = random.choice(rows)
                try:
                    replacement = {"role": "user", "content": f"new-{row.seq}"}
                    log.redact(row.seq, replacement if row.seq % 2 else None, reason="test")
                    gone.append(str(row.content))
                except InvalidEditError:  # retracted meanwhile? (nobody does): report it
                    raise
            time.sleep(0.005)
    except Exception as exc:  # reported to the test
        out.put(("redactor", f"{type(exc).__name__}: {exc}"))
        return
    out.put(("redactor", gone))


def _read(where: tuple[str, Any], conversation: str, stop: Any, out: Any) -> None:
    """Read every way, over and over, until told to stop; report the reads or the error."""
    log = MessageLog(_client(where), conversation, page_size=5)
    reads = 0
    try:
        while not stop.is_set():
            for rows in (
                log.all(),
                # after=1: seq 1 is written before the reader starts; a later cursor may
                # be beyond the end while the writers have not reached it (LogRewoundError)
                log.read(after=1),
                log.last(7),
                log.all(view="physical"),
                log.last(9, view="physical"),
            ):
                seqs = [r.seq for r in rows]
                if seqs != sorted(set(seqs)):
                    raise AssertionError(f"seqs out of order or repeated: {seqs}")
            reads += 1
    except Exception as exc:  # reported to the test
        out.put(("reader", f"{type(exc).__name__}: {exc}"))
        return
    out.put(("reader", reads))


def _follow(where: tuple[str, Any], conversation: str, out: Any) -> None:
    """Fold every entry of a follow until the END message; report the fold's rows."""
    log = MessageLog(_client(where), conversation)
    view = LogView()
    edits = 0
    try:
        out.put(("ready", None))
        for entry in log.follow():
            view.apply(entry)
            edits += isinstance(entry, EditEntry) and entry.op == "redact"
            if isinstance(entry, StoredMessage) and entry.content == END:
                break
    except Exception as exc:  # reported to the test
        out.put(("follower", f"{type(exc).__name__}: {exc}"))
        return
    out.put(("follower", ([(r.seq, r.content, r.redacted) for r in view.rows], edits)))


def _everything(raw: Any, conversation: str) -> bytes:
    """Every value of every key of the conversation (a SCAN of its hash tag), read and as
    an uncompressed ``DUMP`` (what an RDB snapshot would hold)."""
    if isinstance(raw, redis.cluster.RedisCluster):
        raw.config_set("rdbcompression", "no", target_nodes=redis.cluster.RedisCluster.ALL_NODES)
    else:
        raw.config_set("rdbcompression", "no")
    out = []
    for key in raw.scan_iter(match=f"*{{{conversation}}}*"):
        out.append(repr(raw.dump(key)))
        kind = raw.type(key)
        if kind == b"stream":
            out.append(repr(raw.xrange(key)))
        elif kind == b"hash":
            out.append(repr(raw.hgetall(key)))
        elif kind == b"zset":
            out.append(repr(raw.zrange(key, 0, -1)))
        elif kind == b"string":
            out.append(repr(raw.get(key)))
    return "".join(out).encode()


@pytest.mark.parametrize("kind", ["redis", "cluster"])
def test_followers_agree_with_a_fresh_read_while_messages_are_redacted(
    kind: str, shared_server: Any, shared_cluster: Any
) -> None:
    where: tuple[str, Any] = (
        ("cluster", shared_cluster().port)
        if kind == "cluster"
        else ("plain", shared_server(kind).url)
    )
    conversation = new_id()
    raw = _client(where)
    log = MessageLog(raw, conversation)
    log.add("system", "start")
    context = multiprocessing.get_context("spawn")
    stop, out = context.Event(), context.Queue()
    followers = [
        context.Process(target=_follow, args=(where, conversation, out)) for _ in range(FOLLOWERS)
    ]
    for follower in followers:
        follower.start()
    assert [out.get(timeout=60)[0] for _ in followers] == ["ready"] * FOLLOWERS
    writers = [
        context.Process(target=_write, args=(where, conversation, w)) for w in range(WRITERS)
    ]
    redactor = context.Process(target=_redact, args=(where, conversation, stop, out))
    reader = context.Process(target=_read, args=(where, conversation, stop, out))
    for process in (*writers, redactor, reader):
        process.start()
    for writer in writers:
        writer.join(timeout=120)
    stop.set()
    redactor.join(timeout=60)
    reader.join(timeout=60)
    log.add("user", END)
    results = [out.get(timeout=120) for _ in range(FOLLOWERS + 2)]
    for follower in followers:
        follower.join(timeout=30)
    (gone,) = [r for kind, r in results if kind == "redactor"]
    (reads,) = [r for kind, r in results if kind == "reader"]
    assert isinstance(reads, int) and reads > 0, reads
    assert isinstance(gone, list) and len(gone) >= 5, gone
    fresh = [(r.seq, r.content, r.redacted) for r in log.all()]
    assert sum(redacted for _, _, redacted in fresh) == len(gone)
    folds = [r for kind, r in results if kind == "follower"]
    assert len(folds) == FOLLOWERS and all(isinstance(f, tuple) for f in folds), folds
    for rows, edits in folds:
        assert rows == fresh
        assert edits == len(gone)
    everything = _everything(raw, conversation)
    assert b"[redacted]" in everything and END.encode() in everything  # the scan saw it all
    for text in gone:
        assert text.encode() not in everything, text
