"""A history of what a test's clients did to one conversation, and a check of the final
log against it: the one oracle of the fault tests.

Record every operation as the client sees it::

    history = History(conversation)
    with history.append("writer-1", ["hello"]) as op:  # re-raises whatever the call raises
        op.committed(log.add("user", "hello"))
    with history.read("reader", after=0) as op:
        op.returned(log.read(after=0))
    history.check(raw_client)  # reads the stream with XRANGE, not through the library

An append's outcome comes from how its call ended: a seq (``ok``; also a
``NotDurableError``, which committed), ``AppendInDoubtError``, a cancellation or an
unexpected exception (``in doubt``: it may have committed), or any other
``MessageLogError`` (``failed``: the library says nothing was written). A read records
the rows it returned.

Contents identify messages: give every distinct append its own content. The same
contents appended again (a re-send with the same idempotency key) are the same message,
so they must end up in the log once.

Records are plain picklable dataclasses: a worker process keeps its own ``History`` and
sends ``history.records`` back through a multiprocessing queue; ``extend`` merges them.
Threads may share one ``History``.
"""

from __future__ import annotations

import asyncio
import threading
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal

import orjson
import redis
import redis.cluster

from redis_msglog import (
    AppendInDoubtError,
    ConversationKeys,
    MessageLogError,
    NotDurableError,
    StoredMessage,
)

Outcome = Literal["ok", "failed", "in doubt"]
MAX_SHOWN = 20  # problems listed in one assertion message


@dataclass(frozen=True)
class Append:
    """One append call: its batch of contents and how it ended."""

    client: str
    contents: tuple[str, ...]
    outcome: Outcome
    last_seq: int | None = None  # for "ok": the seq of the batch's last message
    error: str = ""

    def seqs(self) -> list[int]:
        assert self.last_seq is not None
        first = self.last_seq - len(self.contents) + 1
        return list(range(first, self.last_seq + 1))


@dataclass(frozen=True)
class Read:
    """One read call: the (seq, content) rows it returned, after ``after`` (``None``: a
    segment that may start anywhere, such as ``last(n)``)."""

    client: str
    after: int | None
    rows: tuple[tuple[int, str], ...]
    outcome: Literal["ok", "failed"] = "ok"


Record = Append | Read


class PendingAppend:
    def __init__(self) -> None:
        self.last_seq: int | None = None

    def committed(self, last_seq: int) -> int:
        """The seq the append returned (returned again, for convenience)."""
        self.last_seq = last_seq
        return last_seq


class PendingRead:
    def __init__(self) -> None:
        self.rows: tuple[tuple[int, str], ...] | None = None

    def returned(self, rows: Iterable[StoredMessage]) -> list[StoredMessage]:
        """The rows the read returned (returned again, as a list)."""
        kept = list(rows)
        self.rows = tuple((row.seq, row.text) for row in kept)
        return kept


@dataclass(frozen=True)
class Summary:
    """What a successful check saw, for the tests' own assertions and for printing."""

    length: int
    acked: int
    in_doubt: int
    in_doubt_written: int
    failed: int
    reads: int

    def __str__(self) -> str:
        return (
            f"{self.length} messages; {self.acked} appends acknowledged, {self.in_doubt} in "
            f"doubt ({self.in_doubt_written} written), {self.failed} failed; {self.reads} reads"
        )


class History:
    def __init__(self, conversation: str, prefix: str = "msglog") -> None:
        self.conversation = conversation
        self.keys = ConversationKeys.build(prefix, conversation)
        self.records: list[Record] = []
        self._lock = threading.Lock()

    def _add(self, record: Record) -> None:
        with self._lock:
            self.records.append(record)

    def extend(self, records: Iterable[Record]) -> None:
        """Merge records made elsewhere (another process's ``History.records``)."""
        with self._lock:
            self.records.extend(records)

    @contextmanager
    def append(self, client: str, contents: Sequence[str]) -> Iterator[PendingAppend]:
        """Record the append call made in the block; call ``committed(seq)`` with what it
        returned. Exceptions are recorded and re-raised."""
        batch = tuple(contents)
        pending = PendingAppend()
        try:
            yield pending
        except NotDurableError as exc:  # committed; only its durability is unknown
            self._add(Append(client, batch, "ok", exc.last_seq, repr(exc)))
            raise
        except AppendInDoubtError as exc:
            self._add(Append(client, batch, "in doubt", error=repr(exc)))
            raise
        except MessageLogError as exc:
            self._add(Append(client, batch, "failed", error=repr(exc)))
            raise
        except (Exception, asyncio.CancelledError) as exc:  # unknown: it may have run
            self._add(Append(client, batch, "in doubt", error=repr(exc)))
            raise
        if pending.last_seq is None:
            raise AssertionError("history.append block ended without op.committed(seq)")
        self._add(Append(client, batch, "ok", pending.last_seq))

    @contextmanager
    def read(self, client: str, after: int | None = 0) -> Iterator[PendingRead]:
        """Record the read call made in the block; call ``returned(rows)`` with its rows."""
        pending = PendingRead()
        try:
            yield pending
        except (Exception, asyncio.CancelledError):
            self._add(Read(client, after, (), "failed"))
            raise
        if pending.rows is None:
            raise AssertionError("history.read block ended without op.returned(rows)")
        self._add(Read(client, after, pending.rows))

    # -- checking ----------------------------------------------------------------------

    def check(
        self, client: redis.Redis | redis.cluster.RedisCluster, *, counter: bool = True
    ) -> Summary:
        """Read the final log straight from the stream and assert it agrees with every
        recorded operation; ``counter=False`` skips comparing the seq counter."""
        log, raw_counter = read_stream(client, self.keys)
        found = self.problems(log, raw_counter if counter else None)
        if found:
            shown = "\n  - ".join(found[:MAX_SHOWN])
            more = f"\n  ({len(found) - MAX_SHOWN} more)" if len(found) > MAX_SHOWN else ""
            raise AssertionError(
                f"history check of {self.conversation!r} ({len(log)} entries, "
                f"{len(self.records)} operations): {len(found)} problem(s)\n  - {shown}{more}"
                + _near_anomalies(client, self.keys, log, self.records)
            )
        return self.summary(log)

    def summary(self, log: Sequence[tuple[int, str]]) -> Summary:
        appends = [r for r in self.records if isinstance(r, Append)]
        written = {content for _, content in log}
        in_doubt = [a for a in appends if a.outcome == "in doubt"]
        return Summary(
            length=len(log),
            acked=sum(a.outcome == "ok" for a in appends),
            in_doubt=len(in_doubt),
            in_doubt_written=sum(all(c in written for c in a.contents) for a in in_doubt),
            failed=sum(a.outcome == "failed" for a in appends),
            reads=sum(isinstance(r, Read) and r.outcome == "ok" for r in self.records),
        )

    def problems(self, log: Sequence[tuple[int, str]], counter: int | None = None) -> list[str]:
        """Every way ``log`` (the final (seq, content) entries, in stream order)
        disagrees with the history; empty when it is consistent."""
        appends = [r for r in self.records if isinstance(r, Append)]
        reads = [r for r in self.records if isinstance(r, Read) and r.outcome == "ok"]
        at_seq = dict(log)
        where: dict[str, list[int]] = defaultdict(list)
        for seq, content in log:
            where[content].append(seq)
        found = _log_problems(log, counter)
        found += _seqs_seen_with_two_contents(log, appends, reads)
        found += _unexpected_writes(where, appends)
        for a in appends:
            found += _append_problems(a, at_seq, where)
        for r in reads:
            found += _read_problems(r, at_seq)
        return found


def _log_problems(log: Sequence[tuple[int, str]], counter: int | None) -> list[str]:
    """The log itself: seqs 1..N, and the counter at N."""
    found: list[str] = []
    seqs = [seq for seq, _ in log]
    if seqs != list(range(1, len(seqs) + 1)):
        missing = _missing(seqs)
        found.append(f"seqs are not gap-free 1..{len(seqs)}: missing {_few(missing)}")
    if counter is not None and counter != len(log):
        found.append(f"the seq counter says {counter} but the log has {len(log)} entries")
    return found


def _seqs_seen_with_two_contents(
    log: Sequence[tuple[int, str]], appends: Sequence[Append], reads: Sequence[Read]
) -> list[str]:
    """No seq was ever seen with two contents, by an ack, a read or the final log."""
    seen: dict[int, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for seq, content in log:
        seen[seq][content].append("the final log")
    for a in appends:
        if a.outcome == "ok":
            for seq, content in zip(a.seqs(), a.contents, strict=True):
                seen[seq][content].append(f"acknowledged to {a.client}")
    for r in reads:
        for seq, content in r.rows:
            seen[seq][content].append(f"read by {r.client}")
    found: list[str] = []
    for seq in sorted(seen):
        if len(seen[seq]) > 1:
            views = "; ".join(
                f"{content!r} ({', '.join(sorted(set(sources)))})"
                for content, sources in seen[seq].items()
            )
            found.append(f"seq {seq} was seen with {len(seen[seq])} contents: {views}")
    return found


def _unexpected_writes(where: dict[str, list[int]], appends: Sequence[Append]) -> list[str]:
    """Every message in the log was written once, by a recorded append that may have run."""
    found: list[str] = []
    may_write = {c for a in appends if a.outcome != "failed" for c in a.contents}
    for content, at in where.items():
        if len(at) > 1:
            found.append(f"{content!r} was written {len(at)} times, at seqs {_few(at)}")
        if content not in may_write:
            who = "failed appends only" if content in _all(appends) else "no recorded append"
            found.append(f"seq {at[0]} holds {content!r}, written by {who}")
    return found


def _append_problems(a: Append, at_seq: dict[int, str], where: dict[str, list[int]]) -> list[str]:
    """One append against the final log, by its outcome; a batch stays contiguous."""
    if a.outcome == "ok":
        found = _acknowledged_problems(a, at_seq, where)
    elif a.outcome == "in doubt":
        found = _in_doubt_problems(a, where)
    else:
        found = []
    return found + _batch_problems(a, where)


def _acknowledged_problems(
    a: Append, at_seq: dict[int, str], where: dict[str, list[int]]
) -> list[str]:
    """An acknowledged append is in the log, at the seqs it was acknowledged at."""
    found: list[str] = []
    for seq, content in zip(a.seqs(), a.contents, strict=True):
        if content not in where:
            found.append(
                f"lost: {content!r} was acknowledged to {a.client} at seq {seq} "
                "and is not in the log"
            )
        elif at_seq.get(seq) != content:
            found.append(
                f"{content!r} was acknowledged to {a.client} at seq {seq}, but the "
                f"log has it at seqs {_few(where[content])}"
            )
    return found


def _in_doubt_problems(a: Append, where: dict[str, list[int]]) -> list[str]:
    """An append in doubt is written whole or not at all."""
    present = [c for c in a.contents if c in where]
    if present and len(present) < len(a.contents):
        return [
            f"the in-doubt batch {a.contents!r} of {a.client} is half written: only {present!r}"
        ]
    return []


def _batch_problems(a: Append, where: dict[str, list[int]]) -> list[str]:
    """A batch that is in the log is contiguous and in order."""
    if len(a.contents) > 1 and all(c in where for c in a.contents):
        first = where[a.contents[0]][0]
        placed = [where[c][0] for c in a.contents]
        if placed != list(range(first, first + len(a.contents))):
            return [
                f"the batch {a.contents!r} of {a.client} is not contiguous and in "
                f"order: at seqs {placed}"
            ]
    return []


def _read_problems(r: Read, at_seq: dict[int, str]) -> list[str]:
    """A read returned a gap-free segment of the final log."""
    found: list[str] = []
    got = [seq for seq, _ in r.rows]
    start = r.after + 1 if r.after is not None else (got[0] if got else 1)
    if got != list(range(start, start + len(got))):
        found.append(
            f"a read by {r.client} after {r.after} returned seqs {_few(got)}: not a "
            f"gap-free segment from {start}"
        )
    for seq, content in r.rows:
        if seq not in at_seq:
            found.append(f"{r.client} read seq {seq} ({content!r}), which the final log lacks")
    return found


def _all(appends: Iterable[Append]) -> set[str]:
    return {c for a in appends for c in a.contents}


def _few(values: Sequence[int]) -> str:
    shown = ", ".join(map(str, values[:10]))
    return f"[{shown}{', ...' if len(values) > 10 else ''}]"


def _missing(seqs: Sequence[int]) -> list[int]:
    """The seqs from 1 to the highest of ``seqs`` that are not among them, in order."""
    return sorted(set(range(1, max(seqs, default=0) + 1)) - set(seqs))


def _near_anomalies(
    client: Any, keys: ConversationKeys, log: Sequence[tuple[int, str]], records: list[Record]
) -> str:
    """For a failed check: the stream's raw entries (IDs carry the commit time, µs) around
    the first seqs stored twice or missing, and every record of a content stored twice
    (its outcome and error), so that a rare failure says when each copy was written and
    what its writer was told. (A kill -9 test stored one call twice at one seq, once.)"""
    seqs = [seq for seq, _ in log]
    twice = sorted(seq for seq, times in Counter(seqs).items() if times > 1)[:3]
    lines = []
    for seq in [*twice, *_missing(seqs)[:3]]:
        near = client.xrange(keys.stream, min=str(max(seq - 2, 1)), max=str(seq + 2))
        ids = ", ".join(_text(entry_id) for entry_id, _ in near)
        lines.append(f"entries near seq {seq}: {ids}")
    if log and client.get(keys.seq) != str(len(log)).encode():  # the counter disagrees
        tail = client.xrevrange(keys.stream, count=3)
        ids = ", ".join(_text(entry_id) for entry_id, _ in tail)
        lines.append(f"counter now {client.get(keys.seq)!r}; the last entries: {ids}")
        lines.extend(f"record in doubt: {r}" for r in records[-30:] if _in_doubt(r))
    contents = {content for seq, content in log if seq in twice}
    for record in records:
        if isinstance(record, Append) and contents.intersection(record.contents):
            lines.append(f"record of {record.contents}: {record}")
    return "".join(f"\n  * {line}" for line in lines)


def _in_doubt(record: Record) -> bool:
    return isinstance(record, Append) and record.outcome != "ok"


def read_stream(client: Any, keys: ConversationKeys) -> tuple[list[tuple[int, str]], int | None]:
    """The (seq, content) entries of a conversation's stream, in stream order, and its
    seq counter, read with XRANGE and GET (the checker does not trust the reader under
    test), as one snapshot: the counter is read before and after the stream, and all
    is read again if it moved. A write can land after the writers have stopped: a
    command a timed-out connection left in the server's buffer runs when the server
    reads it (a kill -9 test once saw the counter one past the stream it had just read)."""
    for _ in range(5):
        before = client.get(keys.seq)
        log, raw = _read_once(client, keys)
        if raw == before:
            break
    return log, None if raw is None else int(raw)


def _read_once(client: Any, keys: ConversationKeys) -> tuple[list[tuple[int, str]], Any]:
    """The stream's (seq, content) entries, then the counter as stored (see above)."""
    log: list[tuple[int, str]] = []
    start = "-"
    while entries := client.xrange(keys.stream, min=start, count=1000):
        for entry_id, fields in entries:
            seq, _, tail = _text(entry_id).partition("-")
            # ID <seq>-<at> (the commit time) and "msg"; an earlier version's: <seq>-0,
            # "at" and "msg".
            older = b"at" in fields or "at" in fields
            assert tail.isdigit() and (tail == "0") == older, (
                f"stream entry {_text(entry_id)} is not of the form <seq>-<at>"
            )
            doc = orjson.loads(fields[b"msg"] if b"msg" in fields else fields["msg"])
            log.append((int(seq), doc["content"]))
        start = "(" + _text(entries[-1][0])
    return log, client.get(keys.seq)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
