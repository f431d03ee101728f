"""What each operation costs the server, counted: the commands a call runs, inside its
scripts and outside them (``INFO commandstats`` around the call, on a server of this
module's own, ``EVALSHA`` itself, ``INFO`` and ``CONFIG`` aside). Counts do not move
with load, so CI checks them where it cannot check times: each operation has a ceiling,
today's count, and a change that adds a command to its path fails here. Lower a ceiling
when a change makes an operation cheaper (docs/benchmarks.md, "Counts"). Its round trips
(the client's sends, counted with its scripts already loaded) are checked exactly: one
for nearly every operation.

The design's floor for a plain append is ``INCRBY``, ``TIME``, ``XADD``, ``PUBLISH``
(4); ``lua/append_plain.lua`` runs 6: the floor, the ``XLEN`` that tells a healthy log
(one entry a seq) and the producer's one ``HSET`` (and ``HRANDFIELD`` once in ten,
pruning the producers hash)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
import redis

from redis_msglog import NO_RETRY, ConversationKeys, MessageLog, SeqConflictError
from redis_msglog._core.write.producer import Producer

from ..conftest import new_id, own_server_client

NOT_COUNTED = ("evalsha", "eval", "info", "config")
PRUNE = "hrandfield"  # the producers hash pruned now and then, on any write


@pytest.fixture(scope="module")
def client() -> Iterator[redis.Redis]:
    with own_server_client() as made:
        yield made


def commands_run(client: redis.Redis, call: Callable[[], Any]) -> Counter[str]:
    """The commands the server ran for ``call``, by name."""
    client.config_resetstat()
    call()
    stats = client.info("commandstats")
    names = {name.removeprefix("cmdstat_"): int(s["calls"]) for name, s in stats.items()}
    # ("config|resetstat": subcommands are counted under their own names)
    return Counter({n: c for n, c in names.items() if n.split("|")[0] not in NOT_COUNTED})


def a_log(client: redis.Redis, messages: int = 10) -> MessageLog:
    """A log of ``messages`` messages, its object warmed (a first write registers its
    producer, a first read learns the log has no edits)."""
    log = MessageLog(client, new_id())
    log.append_many([{"role": "user", "content": f"m{i}"} for i in range(messages)])
    log.all()
    return log


FLOOR = Counter({"incrby": 1, "time": 1, "xadd": 1, "publish": 1})
"""The design's floor for a plain append (docs/benchmarks.md, "Counts")."""


def test_a_plain_append_runs_the_floor_an_xlen_and_the_producers_hset(
    client: redis.Redis, round_trips: list[int]
) -> None:
    log = a_log(client)
    for _ in range(20):
        round_trips[0] = 0
        ran = commands_run(client, lambda: log.add("user", "hi"))
        ran.pop(PRUNE, None)
        assert ran == FLOOR + Counter({"xlen": 1, "hset": 1})
        assert round_trips[0] == 1 + 2  # the append; CONFIG RESETSTAT and INFO around it


def test_a_plain_append_without_retries_runs_the_floor_and_an_xlen(client: redis.Redis) -> None:
    log = MessageLog(client, new_id(), retry=NO_RETRY)
    log.add("user", "first")
    for _ in range(5):
        assert commands_run(client, lambda: log.add("user", "hi")) == FLOOR + Counter({"xlen": 1})


def test_a_scoped_plain_append_adds_the_owner_records_hget(client: redis.Redis) -> None:
    log = MessageLog(client, new_id(), scope=("tenant",))
    log.add("user", "first")  # registers the conversation in its scope
    for _ in range(5):
        ran = commands_run(client, lambda: log.add("user", "hi"))
        ran.pop(PRUNE, None)
        assert ran == FLOOR + Counter({"xlen": 1, "hset": 1, "hget": 1})


def test_an_append_of_a_log_with_a_lifetime_refreshes_seven_keys_and_types_four(
    client: redis.Redis,
) -> None:
    """``lua/append.lua`` for a log with a lifetime: the append, a ``PEXPIRE`` of each of
    its seven keys, and one ``TYPE`` of each key it may have to make (view, hidden ranges,
    blobs, usage totals), which also says whether to make it (no ``EXISTS`` after)."""
    log = MessageLog(client, new_id(), ttl=timedelta(days=1))
    log.append_many([{"role": "user", "content": f"m{i}"} for i in range(10)])
    for _ in range(5):
        ran = commands_run(client, lambda: log.add("user", "hi"))
        ran.pop(PRUNE, None)
        assert ran == Counter(
            {"get": 1, "time": 1, "xlen": 1, "type": 4, "hset": 1, "xadd": 1, "incrby": 1,
             "pexpire": 7, "publish": 1}
        )  # fmt: skip


def test_a_call_with_an_older_one_in_flight_reads_and_writes_the_concurrent_field(
    client: redis.Redis,
) -> None:
    """A producer's call that is not its lowest in flight cannot replace its sequential
    field (producer_lib.lua): it reads and rewrites the concurrent one, one HMGET more."""
    log = a_log(client)
    producer = Producer()
    producer.begin()  # call 1, in flight throughout
    log._core._own_producer = producer
    for _ in range(5):
        ran = commands_run(client, lambda: log.add("user", "hi"))
        ran.pop(PRUNE, None)
        assert ran == FLOOR + Counter({"xlen": 1, "hset": 1, "hmget": 1})
    fields = client.hkeys(ConversationKeys.build("msglog", log.conversation).producers)
    assert f"{producer.id}+".encode() in fields


def test_a_conflict_of_a_conditional_append_runs_reads_only(client: redis.Redis) -> None:
    """A compare-and-set's refusal writes nothing, not even a write it undoes: nothing of
    it reaches the replicas, the AOF or a keyspace notification."""
    log = a_log(client)

    def conflict() -> None:
        with pytest.raises(SeqConflictError):
            log.add("user", "stale", expected_seq=3)

    assert commands_run(client, conflict) == Counter({"xlen": 2, "get": 1})


def cold(log: MessageLog) -> MessageLog:
    """Another log object of the same conversation: its reads start cold."""
    return MessageLog(log._redis, log.conversation)


USER = {"role": "user", "content": "x"}
USAGE = {"input_tokens": 10, "output_tokens": 5, "cost": 0.01, "currency": "USD"}


def keyed(log: MessageLog, key: str) -> int:
    return log.append(USER, idempotency_key=key)


Operation = Callable[[MessageLog], Any]
CEILINGS: dict[str, tuple[Operation, int, int]] = {
    # name: (the call on a warmed log of 10 messages, the commands it may run: today's,
    # and its round trips: every operation is one, but for those named)
    # lua/append_keyed.lua: the record's GET, SET, ZADD and ZRANGEBYSCORE besides the
    # plain path (the producer's HSET aside); the condition rides on the INCRBY.
    "keyed append": (lambda log: keyed(log, "k"), 9, 1),
    "keyed replay": (lambda log: (keyed(log, "r"), keyed(log, "r")), 9 + 2, 2),  # two calls
    "conditional append": (lambda log: log.add("user", "x", expected_seq=10), 6, 1),
    "append_many(100)": (lambda log: log.append_many([USER] * 100), 6 + 99, 1),
    "all() cold": (lambda log: cold(log).all(), 6, 1),
    "last(50) cold": (lambda log: cold(log).last(50), 3, 1),
    "count()": (lambda log: log.count(), 4, 1),
    "retract": (lambda log: log.retract([3]), 21, 1),
    "pop": (lambda log: log.pop(), 22, 1),
    "set_attrs": (lambda log: log.set_attrs({"a": "b"}), 17, 1),
    "compact": (
        lambda log: log.compact([{"role": "system", "content": "s"}], through_seq=5), 25, 1
    ),
    # The 10 entries re-added, and the XRANGE that finds a draft's deltas to forget with it;
    # the entry read first (its blobs, the replacement's size), then the script.
    "redact": (lambda log: log.redact(10), 38 + 1, 2),
    "trim": (lambda log: log.trim(through_seq=2), 41, 1),  # the tail re-added
    # The keys past the first four: one UNLINK; HKEYS names the drafts' delta streams, in
    # a round trip of its own before the script.
    "erase": (lambda log: log.erase(), 10 + 1, 2),
    "append with usage": (lambda log: log.append(USER | {"usage": USAGE}), 7 + 2, 1),
}  # fmt: skip


@pytest.fixture
def round_trips(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The sync client's sends counted (one packed send, a pipeline's included, is one
    round trip): what the client asks of the network, observed, the server untouched."""
    sent = [0]
    send: Callable[..., Any] = redis.connection.AbstractConnection.send_packed_command

    def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        sent[0] += 1
        return send(self, *args, **kwargs)

    monkeypatch.setattr(redis.connection.AbstractConnection, "send_packed_command", counted)
    return sent


@pytest.mark.parametrize("name", sorted(CEILINGS))
def test_each_operation_runs_no_more_commands_and_round_trips_than_today(
    client: redis.Redis, round_trips: list[int], name: str
) -> None:
    call, ceiling, trips = CEILINGS[name]
    call(a_log(client))  # its scripts loaded (a first EVALSHA is refused: NOSCRIPT)
    log = a_log(client)

    def counted() -> None:
        round_trips[0] = 0
        call(log)
        assert round_trips[0] == trips, f"{name}: {round_trips[0]} round trips, not {trips}"

    ran = commands_run(client, counted)
    ran.pop(PRUNE, None)
    assert sum(ran.values()) <= ceiling, dict(ran)


DRAFT_DELTA = Counter({"time": 1, "xadd": 1, "hset": 1, "hget": 1, "pexpire": 1})
"""A draft's flush (lua/draft_write.lua), the per-token path of a streamed answer: the
clock, the delta, the draft's state, its owner check and the delta stream's lifetime."""


def test_a_drafts_flush_runs_five_commands_and_its_ends_stay_under_their_ceilings(
    client: redis.Redis, round_trips: list[int]
) -> None:
    """A streamed answer: opening the draft, each flush (exactly, every token pays it),
    and the commit (the draft ended and its message appended, a keyed append)."""
    with a_log(client).draft() as warming:  # the draft scripts loaded (NOSCRIPT first)
        warming.write("w")
        warming.flush()
    log = a_log(client)
    draft = log.draft()

    def trips(call: Callable[[], Any]) -> Callable[[], Any]:
        def counted() -> None:
            round_trips[0] = 0
            call()
            sent.append(round_trips[0])

        return counted

    sent: list[int] = []
    opened = commands_run(client, trips(draft.__enter__))
    assert sum(opened.values()) <= 6, dict(opened)
    for i in range(5):
        draft.write(f" token {i}")
        assert commands_run(client, trips(draft.flush)) == DRAFT_DELTA
    draft.write(" last")
    committed = commands_run(client, trips(lambda: draft.__exit__(None, None, None)))
    committed.pop(PRUNE, None)
    # The pending text's flush (5), then the draft ended and its message appended (17).
    assert sum(committed.values()) <= 5 + 17, dict(committed)
    # One round trip to open, one a flush; the commit: the flush, the end, the append,
    # and the draft's cleanup.
    assert sent == [1] + [1] * 5 + [4], sent
    assert committed["xadd"] == 3  # the last delta, the draft's end, the message
    assert [m.content for m in log.all()][-1] == "".join(f" token {i}" for i in range(5)) + " last"
