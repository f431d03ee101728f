"""Server state the library did not write, crossed with every operation.

An operator, a bug elsewhere or a restore can leave a conversation's keys in any state.
For each kind of damage (seq counter missing, non-canonical, negative, behind or ahead of
the stream; entries deleted, foreign, with missing or out-of-range fields; keys of the
wrong type) and each operation (every append form, every read, follow, subscribe, every
CLI command), the outcome is either correct, judged against the raw stream, or a
:class:`MessageLogError` naming the problem: never a partial write, a silent gap, a silent
truncation or a traceback.
"""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

import orjson
import pytest
import redis
from click.testing import CliRunner

from redis_msglog import (
    NO_RETRY,
    AsyncMessageLog,
    ConversationKeys,
    CorruptLogError,
    Entry,
    MessageLog,
    MessageLogError,
    StoredMessage,
    WrongTypeError,
)
from redis_msglog._cli import main
from redis_msglog._core.stored.codec import to_document
from redis_msglog.testing import EphemeralServer

from .. import conftest
from ..conftest import Env, SyncView, make_env, new_id

pytestmark = pytest.mark.hostile

PREFIX = "hostile"
SEEDED = 5  # messages appended through the library before the damage
Raw = redis.Redis


@dataclass(frozen=True)
class Damage:
    name: str
    apply: Callable[[Raw, ConversationKeys], object]
    heals: bool = False  # every operation must succeed (the library repairs or ignores it)


def _set_counter(value: str | bytes) -> Callable[[Raw, ConversationKeys], object]:
    return lambda raw, keys: raw.set(keys.seq, value)


def _rewrite(
    seq: int, fields: dict[str, bytes] | None, new_id: str | None = None
) -> Callable[[Raw, ConversationKeys], object]:
    """Rebuild the stream with entry ``seq`` replaced by ``fields`` (under ``new_id``,
    else its own ID ``<seq>-<at>``) or dropped (``fields`` None): stream IDs cannot be
    inserted below the last one."""

    def apply(raw: Raw, keys: ConversationKeys) -> None:
        entries = _raw_entries(raw, keys.stream)
        raw.delete(keys.stream)
        for entry_id_, entry_fields in entries:
            if _seq(entry_id_.decode()) != seq:
                _xadd(raw, keys.stream, entry_fields, entry_id_)
            elif fields is not None:
                _xadd(raw, keys.stream, fields, new_id or entry_id_)

    return apply


def _older_format(through: int) -> Callable[[Raw, ConversationKeys], object]:
    """Rebuild the stream with entries 1..``through`` as earlier versions wrote them: ID
    ``<seq>-0``, the commit time in an ``at`` field before ``msg``."""

    def apply(raw: Raw, keys: ConversationKeys) -> None:
        entries = _raw_entries(raw, keys.stream)
        raw.delete(keys.stream)
        for entry_id_, entry_fields in entries:
            seq, _, at = entry_id_.decode().partition("-")
            if int(seq) <= through:
                _xadd(raw, keys.stream, {b"at": at.encode(), **entry_fields}, f"{seq}-0")
            else:
                _xadd(raw, keys.stream, entry_fields, entry_id_)

    return apply


def _delete(seq: int) -> Callable[[Raw, ConversationKeys], object]:
    return lambda raw, keys: raw.xdel(keys.stream, conftest.entry_id(raw, keys.stream, seq))


def _append_raw(entry_id: str, fields: dict[str, bytes]) -> Callable[[Raw, ConversationKeys], Any]:
    return lambda raw, keys: _xadd(raw, keys.stream, fields, entry_id)


def _xadd(
    raw: Raw, stream: str, fields: dict[str, bytes] | dict[bytes, bytes], entry_id: str | bytes
) -> None:
    # XADD is typed to take a dict[FieldT, EncodableT] (invariant): copy into one.
    raw.xadd(stream, dict(fields.items()), id=entry_id)


def _garble_producers(raw: Raw, keys: ConversationKeys) -> None:
    """Every producer's record (the log's own among them) replaced with garbage."""
    fields = raw.hkeys(keys.producers) or [b"0123456789ab"]
    raw.hset(keys.producers, mapping={field: "12 garbage" for field in fields})


def _raw_entries(raw: Raw, stream: str) -> list[tuple[bytes, dict[bytes, bytes]]]:
    """XRANGE of the whole stream, as the raw client (no decode_responses) returns it."""
    entries = []
    for entry_id, fields in raw.xrange(stream) or []:
        assert fields is not None, f"entry {entry_id!r} has no fields"
        entries.append(
            (_raw_bytes(entry_id), {_raw_bytes(k): _raw_bytes(v) for k, v in fields.items()})
        )
    return entries


def _raw_bytes(value: bytes | str | None) -> bytes:
    assert isinstance(value, bytes), f"the raw client decoded {value!r}"
    return value


GOOD_MSG = b'{"role":"user","content":"planted"}'
AT = b"1700000000000000"
MAX_ID_PART = 2**64 - 1  # the greatest second part of a stream ID

BAD_COUNTERS: list[tuple[str, str | bytes]] = [
    ("decimal", "5.0"),
    ("exponent", "5e0"),
    ("hex", "0x5"),
    ("leading-space", " 5"),
    ("trailing-space", "5 "),
    ("plus", "+5"),
    ("leading-zero", "05"),
    ("minus-zero", "-0"),
    ("negative", "-1"),
    ("garbage", "abc"),
    ("empty", ""),
    ("beyond-int64", "99999999999999999999"),
    ("not-utf8", b"\xff\xfe"),
]

DAMAGES = [
    Damage("none", lambda raw, keys: None, heals=True),
    Damage("older-format", _older_format(SEEDED), heals=True),
    Damage("mixed-format", _older_format(3), heals=True),
    Damage("counter-missing", lambda raw, keys: raw.delete(keys.seq), heals=True),
    *[Damage(f"counter-{label}", _set_counter(value)) for label, value in BAD_COUNTERS],
    Damage("counter-behind", _set_counter("3")),
    Damage("counter-ahead", _set_counter("9")),
    Damage("counter-wrong-type", lambda raw, keys: (raw.delete(keys.seq), raw.rpush(keys.seq, 1))),
    Damage("stream-missing", lambda raw, keys: raw.delete(keys.stream)),
    Damage(
        "stream-wrong-type",
        lambda raw, keys: (raw.delete(keys.stream), raw.hset(keys.stream, "a", "b")),
    ),
    Damage(
        "producers-wrong-type",
        lambda raw, keys: (raw.delete(keys.producers), raw.set(keys.producers, "x")),
    ),
    Damage("producers-garbage", lambda raw, keys: _garble_producers(raw, keys)),
    Damage("entry-deleted-first", _delete(1)),
    Damage("entry-deleted-middle", _delete(3)),
    Damage("entry-deleted-last", _delete(SEEDED)),
    # An "at" field under an ID other than <seq>-0, after the entry of that seq.
    Damage(
        "entry-foreign-id-at-end",
        _append_raw(f"{SEEDED}-{MAX_ID_PART}", {"at": AT, "msg": GOOD_MSG}),
    ),
    Damage("entry-seq-twice", _append_raw(f"{SEEDED}-{MAX_ID_PART}", {"msg": GOOD_MSG})),
    Damage("entry-xadd-star-at-end", _append_raw("*", {"msg": GOOD_MSG})),  # <ms>-0, no at
    Damage("entry-beyond-counter", _append_raw(f"{SEEDED + 1}-0", {"at": AT, "msg": GOOD_MSG})),
    Damage("entry-beyond-counter-new", _append_raw(f"{SEEDED + 1}-1", {"msg": GOOD_MSG})),
    Damage("entry-foreign-id-middle", _rewrite(3, {"at": AT, "msg": GOOD_MSG}, "3-7")),
    Damage("entry-missing-msg", _rewrite(3, {"at": AT}, "3-0")),
    Damage("entry-missing-msg-new", _rewrite(3, {"x": b"1"})),
    # The commit time nowhere: an ID <seq>-0 without an "at" field.
    Damage("entry-missing-at", _rewrite(3, {"msg": GOOD_MSG}, "3-0")),
    Damage("entry-other-fields", _rewrite(3, {"x": b"1"}, "3-0")),
    Damage("entry-id-time-out-of-range", _rewrite(3, {"msg": GOOD_MSG}, f"3-{MAX_ID_PART}")),
    Damage(
        "entry-at-out-of-range",
        _rewrite(3, {"at": b"99999999999999999999", "msg": GOOD_MSG}, "3-0"),
    ),
    Damage(
        "entry-at-negative", _rewrite(3, {"at": b"-99999999999999999999", "msg": GOOD_MSG}, "3-0")
    ),
    Damage("entry-at-not-a-number", _rewrite(3, {"at": b"yesterday", "msg": GOOD_MSG}, "3-0")),
    Damage("entry-msg-not-json", _rewrite(3, {"msg": b"{not json"})),
    Damage("entry-msg-not-json-older", _rewrite(3, {"at": AT, "msg": b"{not json"}, "3-0")),
    Damage("entry-msg-not-object", _rewrite(3, {"msg": b"[1, 2]"})),
    Damage("entry-msg-bad-role", _rewrite(3, {"msg": b'{"role":"x","content":"y"}'})),
    Damage("entry-msg-bad-content", _rewrite(3, {"msg": b'{"role":"user","content":5}'})),
    Damage("entry-msg-not-utf8", _rewrite(3, {"msg": b'{"role":"user","content":"\xff"}'})),
]
SOUND = {"none", "older-format", "mixed-format"}  # damages after which verify finds nothing
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def _micros(when: datetime) -> int:
    return (when - _EPOCH) // timedelta(microseconds=1)


def _ours(entry_id: str, fields: dict[bytes, bytes]) -> bool:
    """Whether an entry has a layout the library writes: ID ``<seq>-<at>`` and ``msg``, or
    an earlier version's ID ``<seq>-0`` with ``at`` and ``msg`` (edits: ``edit``)."""
    body = b"msg" in fields or b"edit" in fields
    return body and (b"at" in fields) == entry_id.endswith("-0")


# -- the truth: what the raw stream holds ---------------------------------------------------


@dataclass(frozen=True)
class Truth:
    """The conversation as the server holds it, read with raw commands."""

    entries: list[tuple[str, dict[bytes, bytes]]]  # (entry id, fields), in ID order
    counter: bytes | None
    dump: dict[bytes, bytes | None]  # DUMP of every key of the conversation

    @property
    def ids(self) -> list[str]:
        return [entry_id for entry_id, _ in self.entries]

    def row_id(self, row: Entry) -> str:
        """The ID of the entry ``row`` was read from: ``<seq>-<at>``, or (an entry of an
        earlier version) ``<seq>-0``, whose ``at`` field must be the row's time."""
        new = f"{row.seq}-{_micros(row.at)}"
        by_id = dict(self.entries)
        if new in by_id and b"at" not in by_id[new]:
            return new
        old = by_id.get(f"{row.seq}-0", {})
        assert b"at" not in old or int(old[b"at"]) == _micros(row.at), f"seq {row.seq}: time"
        return f"{row.seq}-0"

    def expect_rows(self, rows: Sequence[Entry], ids: list[str], what: str) -> None:
        """``rows`` must be exactly the entries ``ids``, each decoded faithfully."""
        assert [self.row_id(row) for row in rows] == ids, (
            f"{what} returned seqs {[r.seq for r in rows]} but the stream holds {self.ids}: "
            "a silent gap or truncation"
        )
        by_id = dict(self.entries)
        for row in rows:
            stored = orjson.loads(by_id[self.row_id(row)][b"msg"])
            assert isinstance(row, StoredMessage), f"{what}: seq {row.seq} is not a message"
            assert to_document(row) == stored, f"{what}: seq {row.seq} decoded differently"

    def sound_prefix(self) -> list[str]:
        """The ids of the stream's leading run of seqs 1, 2, ..., each entry of a layout
        the library writes (what a follower may deliver before it must stop with an
        error)."""
        run = []
        for i, (entry_id, fields) in enumerate(self.entries, start=1):
            if _seq(entry_id) != i or not _ours(entry_id, fields):
                break
            run.append(entry_id)
        return run


def _truth(raw: Raw, keys: ConversationKeys) -> Truth:
    entries: list[tuple[str, dict[bytes, bytes]]] = []
    if raw.type(keys.stream) == b"stream":
        entries = [(i.decode(), f) for i, f in _raw_entries(raw, keys.stream)]
    counter = _raw_bytes(raw.get(keys.seq)) if raw.type(keys.seq) == b"string" else None
    names = sorted(raw.scan_iter(match=f"{PREFIX}:*", count=1000))  # an emptied server
    mine = keys.seq.removesuffix(":seq").encode()
    # Every key of the conversation: counter, stream, blobs, producers, idempotency records.
    dump = {name: raw.dump(name) for name in names if name.startswith(mine)}
    return Truth(entries, counter, dump)


# -- fixtures ---------------------------------------------------------------------------------


# One client style per backend: the sync client is generated from the asyncio one, byte for
# byte (scripts/unasync.py --check, in tests/no_server/test_static.py), so running every
# damage through both on both backends ran one code path twice. Follow and subscribe,
# whose I/O is written twice by hand (a thread and a task), still run both, on redis.
STYLES = [("redis", "sync"), ("fakeredis", "async")]
FOLLOW_STYLES = [("redis", "sync"), ("redis", "async")]


@pytest.fixture(scope="module")
def hostile_server() -> Iterator[EphemeralServer]:
    """A server of this module's own, emptied before each example: what an example reads
    back (every key, with SCAN) is its own few keys, never a shared keyspace that grows
    with the suite."""
    server = EphemeralServer(conftest.require_binary("redis"), conftest.SERVER_ARGS).start()
    yield server
    server.stop()


@pytest.fixture
def empty_server(hostile_server: EphemeralServer) -> EphemeralServer:
    redis.Redis.from_url(hostile_server.url).flushall()
    return hostile_server


@pytest.fixture(params=STYLES, ids=lambda style: "-".join(style))
def hostile_style(request: pytest.FixtureRequest) -> tuple[str, str]:
    backend, flavor = request.param
    return backend, flavor


@pytest.fixture
def hostile_env(hostile_style: tuple[str, str], hostile_server: EphemeralServer) -> Iterator[Env]:
    backend, flavor = hostile_style
    server = None
    if backend == "redis":
        server = hostile_server
        redis.Redis.from_url(server.url).flushall()
    environment = make_env(backend, flavor, server)
    yield environment
    environment.close()


def _damaged(env: Env, damage: Damage, **options: Any) -> tuple[Any, ConversationKeys, Truth]:
    log = env.log(new_id(), prefix=PREFIX, **options)
    log.append_many([{"role": "user", "content": f"m{i}"} for i in range(1, SEEDED + 1)])
    damage.apply(env.raw, log.keys)
    return log, log.keys, _truth(env.raw, log.keys)


# -- appends ------------------------------------------------------------------------------------

APPENDS: dict[str, Callable[[Any], int]] = {
    "append": lambda log: log.append({"role": "user", "content": "new"}),
    "add-with-key": lambda log: log.add("user", "new", idempotency_key="k-1"),
    "append-expected": lambda log: log.append(
        {"role": "user", "content": "new"}, expected_seq=SEEDED
    ),
    "append-many": lambda log: log.append_many(
        [{"role": "user", "content": "new"}, {"role": "assistant", "content": "new 2"}]
    ),
}


@pytest.mark.parametrize("damage", DAMAGES, ids=lambda d: d.name)
@pytest.mark.parametrize("operation", list(APPENDS))
@pytest.mark.parametrize("retries", ["default", "no-retry"])
def test_append_is_correct_or_writes_nothing(
    hostile_env: Env, damage: Damage, operation: str, retries: str
) -> None:
    options = {"retry": NO_RETRY} if retries == "no-retry" else {}
    log, keys, before = _damaged(hostile_env, damage, **options)
    try:
        seq = APPENDS[operation](log)
    except MessageLogError as exc:
        assert not damage.heals, f"{damage.name}: append failed: {exc!r}"
        after = _truth(hostile_env.raw, keys)
        assert after.dump == before.dump, f"{damage.name}: a failed append changed the keys"
        return
    after = _truth(hostile_env.raw, keys)
    added = len(after.entries) - len(before.entries)
    assert added >= 1 and after.entries[: len(before.entries)] == before.entries
    end = _seq(before.ids[-1]) if before.entries else 0
    new = after.entries[len(before.entries) :]
    assert [_seq(i) for i, _ in new] == list(range(end + 1, end + added + 1)), (
        f"{damage.name}: the append did not continue right after the stream's last entry"
    )
    assert all(set(fields) == {b"msg"} and not i.endswith("-0") for i, fields in new), new
    assert seq == end + added and after.counter == str(seq).encode()


def test_a_producers_key_of_another_type_refuses_the_append_clearly(hostile_env: Env) -> None:
    (chosen,) = [d for d in DAMAGES if d.name == "producers-wrong-type"]
    log, keys, before = _damaged(hostile_env, chosen)
    with pytest.raises(WrongTypeError, match="producer"):
        log.add("user", "new")
    assert _truth(hostile_env.raw, keys).dump == before.dump  # nothing written
    assert log.add("user", "new", idempotency_key="k") == SEEDED + 1  # a caller's key: fine


def test_a_garbled_producer_record_refuses_a_look_up_and_a_first_try_replaces_it(
    hostile_env: Env,
) -> None:
    """A retry must read its producer's record, and refuses one it cannot read (it could
    not tell whether its call committed); the first try of a sequential call reads
    nothing there and writes its own result over it (lua/producer_lib.lua)."""
    (chosen,) = [d for d in DAMAGES if d.name == "producers-garbage"]
    log, keys, before = _damaged(hostile_env, chosen)
    (producer,) = [_raw_bytes(name).decode() for name in hostile_env.raw.hkeys(keys.producers)]
    message = {"role": "user", "content": "new"}
    short = log._core.batch([message]).fingerprint()[:16]
    with pytest.raises(CorruptLogError, match="producer"):
        log.append(message, idempotency_key=f"msglog-retry:{producer}:1:{short}")
    assert _truth(hostile_env.raw, keys).dump == before.dump  # nothing written
    assert log.append(message) == SEEDED + 1
    held = _raw_bytes(hostile_env.raw.hget(keys.producers, producer))
    assert re.fullmatch(rb"\d+ 1 \d+,0 \d+,%d" % (SEEDED + 1), held), held


# -- reads ----------------------------------------------------------------------------------------


def _check_all(log: Any, truth: Truth) -> None:
    truth.expect_rows(log.all(), truth.ids, "all()")


def _check_read_after(log: Any, truth: Truth) -> None:
    truth.expect_rows(log.read(after=2), [i for i in truth.ids if _seq(i) > 2], "read(after=2)")


def _check_read_limit(log: Any, truth: Truth) -> None:
    want = [i for i in truth.ids if _seq(i) > 1][:2]
    truth.expect_rows(log.read(after=1, limit=2), want, "read(after=1, limit=2)")


def _check_read_page(log: Any, truth: Truth) -> None:
    truth.expect_rows(log.read(after=0, limit=100), truth.ids, "read(limit=100)")


def _check_last(log: Any, truth: Truth) -> None:
    row = log.last()
    truth.expect_rows([row] if row else [], truth.ids[-1:], "last()")


def _check_last_3(log: Any, truth: Truth) -> None:
    truth.expect_rows(log.last(3), truth.ids[-3:], "last(3)")


def _check_last_10(log: Any, truth: Truth) -> None:
    truth.expect_rows(log.last(10), truth.ids, "last(10)")


def _check_count(log: Any, truth: Truth) -> None:
    # count() is O(1): it must agree with the number of entries and where the stream ends;
    # the shape in between is for the reads (and verify) to check.
    count = log.count()
    assert count == len(truth.ids) and [_seq(i) for i in truth.ids[-1:]] == [count][:count], (
        f"count() is {count} but the stream holds {truth.ids}"
    )


def _seq(entry_id: str) -> int:
    return int(entry_id.split("-")[0])


READS = {
    "all": _check_all,
    "read-after": _check_read_after,
    "read-limit": _check_read_limit,
    "read-page": _check_read_page,
    "last": _check_last,
    "last-3": _check_last_3,
    "last-10": _check_last_10,
    "count": _check_count,
}


@pytest.mark.parametrize("damage", DAMAGES, ids=lambda d: d.name)
@pytest.mark.parametrize("operation", list(READS))
def test_read_is_correct_or_an_error(hostile_env: Env, damage: Damage, operation: str) -> None:
    log, _, truth = _damaged(hostile_env, damage)
    try:
        READS[operation](log, truth)
    except MessageLogError as exc:
        assert not damage.heals, f"{damage.name}: {operation} failed: {exc!r}"
        assert str(exc)


# -- follow and subscribe -------------------------------------------------------------------

DEADLINE = 10.0  # seconds; a follower that neither delivers nor raises by then hangs
IDLE = 1.0  # seconds to watch a follower of an empty stream: it must wait, or raise


def _follow_sync(log: MessageLog, want: int) -> tuple[list[Entry], BaseException | None]:
    if not want:  # it would wait forever in a thread we cannot stop: watch a subscription
        return _subscribe_sync(log, want)
    rows: list[Entry] = []
    failure: list[BaseException] = []

    def consume() -> None:
        try:
            for row in log.follow(after=0):
                rows.append(row)
                if len(rows) >= want:
                    return
        except BaseException as exc:
            failure.append(exc)

    thread = threading.Thread(target=consume, daemon=True)
    thread.start()
    thread.join(DEADLINE)
    assert not thread.is_alive(), f"follow neither delivered {want} rows nor raised: {rows}"
    return rows, failure[0] if failure else None


async def _follow_async(
    log: AsyncMessageLog, want: int
) -> tuple[list[Entry], BaseException | None]:
    rows: list[Entry] = []

    async def consume() -> None:
        async for row in log.follow(after=0):
            rows.append(row)
            if len(rows) >= want:
                return

    try:
        await asyncio.wait_for(consume(), DEADLINE if want else IDLE)
    except asyncio.TimeoutError:
        if not want:
            return rows, None  # an empty stream: waiting for the first message is right
        pytest.fail(f"follow neither delivered {want} rows nor raised: {rows}")
    except Exception as exc:
        return rows, exc
    return rows, None


def _subscribe_sync(log: MessageLog, want: int) -> tuple[list[Entry], BaseException | None]:
    rows: list[Entry] = []
    done = threading.Event()

    def callback(batch: list[Entry]) -> None:
        rows.extend(batch)
        if len(rows) >= want:
            done.set()

    subscription = log.subscribe(callback, after=0)
    for _ in range(int((DEADLINE if want else IDLE) / 0.05)):
        if done.wait(0.05) or not subscription.running:
            break
    assert done.is_set() or not subscription.running or not want, "neither delivered nor died"
    try:
        subscription.close()
    except Exception as exc:
        return rows, exc
    return rows, None


async def _subscribe_async(
    log: AsyncMessageLog, want: int
) -> tuple[list[Entry], BaseException | None]:
    rows: list[Entry] = []

    async def callback(batch: list[Entry]) -> None:
        rows.extend(batch)

    subscription = await log.subscribe(callback, after=0)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + (DEADLINE if want else IDLE)
    # Polls two conditions (rows delivered, or the task dead of an error).
    while subscription.running and (len(rows) < want or not want) and loop.time() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(0.02)
    assert len(rows) >= want or not subscription.running, "subscription neither delivered nor died"
    try:
        await subscription.close()
    except Exception as exc:
        return rows, exc
    return rows, None


@pytest.mark.parametrize("damage", DAMAGES, ids=lambda d: d.name)
@pytest.mark.parametrize("operation", ["follow", "subscribe"])
# A real server only: fakeredis emulates a blocking XREAD with tasks that leak when
# cancelled, and answers XREAD on a hash with AttributeError instead of WRONGTYPE.
@pytest.mark.parametrize("hostile_style", FOLLOW_STYLES, ids=lambda style: "-".join(style))
def test_follow_and_subscribe_deliver_a_sound_prefix_or_raise(
    hostile_env: Env, damage: Damage, operation: str
) -> None:
    log, _, truth = _damaged(hostile_env, damage, page_size=2)
    want = len(truth.entries)
    if isinstance(log, SyncView):
        inner: AsyncMessageLog = log.inner
        run = _follow_async if operation == "follow" else _subscribe_async
        rows, failure = hostile_env.loop.run_until_complete(run(inner, want))
    else:
        rows, failure = (_follow_sync if operation == "follow" else _subscribe_sync)(log, want)
    prefix = truth.sound_prefix()
    truth.expect_rows(rows, prefix[: len(rows)], operation)
    if failure is None:
        assert len(rows) == want and truth.ids == prefix, (
            f"{damage.name}: {operation} delivered {[r.seq for r in rows]} of {truth.ids} "
            "without an error"
        )
    else:
        assert isinstance(failure, MessageLogError), f"{operation} raised {failure!r}"
        assert not damage.heals, f"{damage.name}: {operation} failed: {failure!r}"


# -- the msglog command ---------------------------------------------------------------------

CLI_COMMANDS = {
    "show": ["show", "{conv}"],
    "show-last": ["show", "{conv}", "--last", "3"],
    "show-json": ["show", "{conv}", "--json"],
    "tail": ["tail", "{conv}", "-n", "3"],
    "ls": ["ls"],
    "ls-json": ["ls", "--json"],
    "export": ["export", "{conv}"],
    "export-openai": ["export", "{conv}", "--format", "openai"],
    "stats": ["stats", "{conv}"],
    "verify": ["verify", "{conv}"],
    "verify-all": ["verify", "--all"],
}


@pytest.mark.parametrize("damage", DAMAGES, ids=lambda d: d.name)
@pytest.mark.parametrize("command", list(CLI_COMMANDS))
def test_cli_reports_damage_without_a_traceback(
    empty_server: EphemeralServer, damage: Damage, command: str
) -> None:
    server = empty_server
    raw = redis.Redis.from_url(server.url)
    prefix = f"{PREFIX}-{new_id()}"  # ls and verify --all see this conversation alone
    conversation = new_id()
    log = MessageLog(raw, conversation, prefix=prefix)
    log.append_many([{"role": "user", "content": f"m{i}"} for i in range(1, SEEDED + 1)])
    damage.apply(raw, log.keys)
    args = [a.replace("{conv}", conversation) for a in CLI_COMMANDS[command]]
    result = CliRunner().invoke(main, ["--url", server.url, "--prefix", prefix, *args])
    output = result.output
    assert result.exit_code in (0, 1), f"exit {result.exit_code}: {output}\n{result.exception}"
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        f"{command} raised {result.exception!r}: {output}"
    )
    assert "Traceback" not in output
    if command.startswith("verify"):
        assert (result.exit_code == 0) == (damage.name in SOUND), output
    if command in ("show-json", "export") and result.exit_code == 0:
        seqs = [orjson.loads(line)["seq"] for line in result.stdout_bytes.splitlines()]
        truth = _truth(raw, log.keys)
        assert seqs == [_seq(i) for i in truth.ids], f"{command} cut or gapped the history"
