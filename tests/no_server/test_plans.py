"""The I/O-free core, driven with scripted replies and failures: no server, milliseconds.

Each test plays the server: it answers every step a plan yields (or fails it with the
outcome a shell would throw) and checks what the plan asks for and what it returns or
raises. Paging, NOSCRIPT fallback, lost replies, cluster refusals, rewind detection, the
counter checks and every error mapping are covered here; the contract suite checks the
same behaviour against real servers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import timedelta
from types import MappingProxyType
from typing import Any

import pytest
import redis.exceptions as redis_errors

from redis_msglog import (
    NO_RETRY,
    AppendInDoubtError,
    AuthenticationError,
    CorruptEntryError,
    CorruptLogError,
    Durability,
    IdempotencyConflictError,
    LogRewoundError,
    MessageLogError,
    OutOfMemoryError,
    PermissionDeniedError,
    RetryPolicy,
    SeqConflictError,
    ServerUnavailableError,
    StorageError,
    WrongTypeError,
)
from redis_msglog._core.facade import Batch, Commit, LogCore
from redis_msglog._core.lifecycle.erase import record_pattern
from redis_msglog._core.read.follow import FollowCursor
from redis_msglog._core.steps import NotSent, Pause, Plan, Read, Refused, ReplyLost, Step, Write
from redis_msglog._core.write import producer as _producer
from redis_msglog._io.failures import step_failure
from redis_msglog._lua.contract import AppendCall
from redis_msglog.models import AgentMessage

AT = b"1700000000000000"


class Clock:
    """A monotonic clock that moves only when a plan pauses."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def core(clock: Clock | None = None, **options: Any) -> LogCore:
    settings: dict[str, Any] = {"prefix": "msglog", "max_message_bytes": 1 << 20}
    settings.setdefault("page_size", 2)
    settings.setdefault("producer", _producer.Producer())  # numbered from 1 in each test
    settings.update(options)
    return LogCore("conv", clock=clock or Clock(), **settings)


def append_plan(
    log: LogCore, batch: Batch, key: str | None = None, *, check_eviction: bool = False
) -> Plan[Commit]:
    """An append as the shells carry it (``AsyncLogCarrier._send_append``): the preflight
    when still needed, the first try, then the commit or, after a failure, the retry
    plan (the first try is a step here, sent by the shell itself there)."""
    prepared = log.prepare(batch, key, None, check_eviction)
    started = log.clock()
    if prepared.preflight is not None:
        yield from prepared.preflight
    try:
        reply = yield prepared.first_try
    except (NotSent, ReplyLost, Refused) as failure:
        return (yield from log.retry_plan(prepared, failure, started))
    return log.commit_of(prepared, reply)


def entry(
    seq: int, content: str = "m", *, entry_id: bytes | None = None, older: bool = False
) -> list[Any]:
    """A stream entry as the append script writes it: ID ``<seq>-<at>``, field ``msg``;
    ``older``: as earlier versions did, ID ``<seq>-0``, fields ``at`` and ``msg``."""
    body = b'{"role":"user","content":"' + content.encode() + b'"}'
    if older:
        return [entry_id or f"{seq}-0".encode(), [b"at", AT, b"msg", body]]
    return [entry_id or f"{seq}-".encode() + AT, [b"msg", body]]


Server = Callable[[Step], Any]


def replying(reply: Any) -> Server:
    """A server that answers every step with ``reply``."""
    return lambda step: reply


def drive(plan: Plan[Any], server: Server, clock: Clock | None = None) -> tuple[Any, list[Step]]:
    """Run ``plan`` against the scripted ``server``: its return value and every step.
    ``server`` returns a reply or raises the outcome to throw into the plan.

    A view read asks first whether the log has edits (``HGET <view> version`` in front
    of its first round trip), and reads the log's first seq and redacted rows (``HMGET
    <view> first redacted``): answered here "no" and "never trimmed", and left out of
    the steps ``server`` sees and that are returned, so these tests script an edit-free,
    untrimmed log (test_views.py and test_trim.py cover the rest)."""
    steps: list[Step] = []
    reply: Any = None
    failure: BaseException | None = None
    while True:
        try:
            step = plan.send(reply) if failure is None else plan.throw(failure)
        except StopIteration as done:
            return done.value, steps
        # The log's first seq (HGET <view> first, after a trim: docs/lifecycle.md), and
        # the edits question: answered "never trimmed" and "no edits", and left out.
        held: list[int] = []
        if isinstance(step, Read):
            held = [
                i
                for i, c in enumerate(step.commands)
                if (c[0] == "HMGET" and c[-2:] == ("first", "redacted"))
                or (c[0] == "HGET" and (c[-1] == "first" or (i == 0 and c[-1] == "version")))
            ]
            step = Read(tuple(c for i, c in enumerate(step.commands) if i not in held))
        steps.append(step)
        reply, failure = None, None
        if isinstance(step, Pause):
            if clock is not None:
                clock.now += step.seconds
            continue
        try:
            reply = server(step)
            for i in held:  # in order: each goes back where it was
                reply = [*reply[:i], None, *reply[i:]]
        except (NotSent, ReplyLost, Refused) as outcome:
            failure = outcome


def script_reply(step: Step, *, last: int = 1, replayed: int = 0, writer: str | None = None) -> Any:
    """The append script's reply to ``step``, written by this call unless ``writer``."""
    assert isinstance(step, Write)
    call = str(argument(step.command, "call"))
    return [last, AT, replayed, (call if writer is None else writer).encode()]


argument = AppendCall.argument  # a sent append's argument, by name
sent_keys = AppendCall.sent_keys  # its keys, by name


def arguments(command: tuple[Any, ...], *names: str) -> tuple[Any, ...]:
    """The arguments ``names`` of a sent append, in that order."""
    return tuple(argument(command, name) for name in names)


def commands(steps: list[Step]) -> list[tuple[Any, ...]]:
    """The first word of every command sent, in order."""
    out: list[tuple[Any, ...]] = []
    for step in steps:
        if isinstance(step, Read):
            out.append(tuple(c[0] for c in step.commands))
        elif isinstance(step, Write):
            out.append((step.command[0],))
        else:
            out.append(("pause",))
    return out


BATCH_MSG = [{"role": "user", "content": "hi"}]


# -- reads ---------------------------------------------------------------------------------


def test_all_pages_up_to_the_counter_read_in_the_first_round_trip() -> None:
    log = core(page_size=2)
    pages = {1: [entry(1), entry(2)], 3: [entry(3), entry(4)], 5: [entry(5)]}

    def server(step: Step) -> Any:
        assert isinstance(step, Read)
        replies: list[Any] = []
        for command in step.commands:
            if command[0] == "XRANGE":
                replies.append(pages[int(str(command[2]).split("-")[0])])
            else:
                replies.append(b"5" if command[0] == "GET" else 5)
        return replies

    rows, steps = drive(log.read_plan(0, None), server)
    assert [r.seq for r in rows] == [1, 2, 3, 4, 5]
    assert commands(steps) == [("XLEN", "GET", "XLEN", "XRANGE"), ("XRANGE",), ("XRANGE",)]


def test_a_read_stops_at_the_counter_even_while_others_append() -> None:
    log = core(page_size=2)
    # The counter said 2; by the time of the XRANGE two more were appended.
    rows, steps = drive(log.read_plan(0, None), lambda step: [2, b"2", 3, [entry(1), entry(2)]])
    assert [r.seq for r in rows] == [1, 2] and len(steps) == 1


def test_a_limited_read_is_one_xrange() -> None:
    rows, steps = drive(core(page_size=10).read_plan(3, 2), lambda step: [[entry(4), entry(5)]])
    assert [r.seq for r in rows] == [4, 5]
    assert commands(steps) == [("XRANGE",)]


@pytest.mark.parametrize(
    "replies, message",
    [
        ([5, b"3", 5, [entry(1), entry(2)]], "behind"),  # counter behind the stream
        ([3, b"5", 3, [entry(1), entry(2)]], "deleted"),  # counter ahead / entries deleted
        ([5, b"05", 5, []], "not a seq"),  # non-canonical counter
        ([5, b"5.0", 5, []], "not a seq"),
    ],
)
def test_a_counter_that_disagrees_with_the_stream_is_corrupt(
    replies: list[Any], message: str
) -> None:
    with pytest.raises(CorruptLogError, match=message):
        drive(core().read_plan(0, None), lambda step: replies)
    with pytest.raises(CorruptLogError, match=message):
        drive(core().count_plan(), lambda step: replies[:3])


def test_a_gap_in_a_page_is_corrupt_not_skipped() -> None:
    def server(page: list[Any]) -> Server:
        # A gap is first looked up among the redacted rows (HMGET <view> r:<seq>...):
        # none there, so it is a gap.
        def answer(step: Step) -> Any:
            command = step.commands[0]  # type: ignore[union-attr]
            return [[None] * (len(command) - 2)] if command[0] == "HMGET" else [page]

        return answer

    with pytest.raises(CorruptLogError, match="missing seq 2"):
        drive(core(page_size=10).read_plan(0, 5), server([entry(1), entry(3)]))
    with pytest.raises(CorruptLogError, match=r"missing seqs 3\.\.4"):
        drive(core(page_size=10).last_plan(3), server([entry(5), entry(2)]))


def test_a_stream_that_ends_before_its_counter_is_corrupt() -> None:
    with pytest.raises(CorruptLogError, match="ends at seq 2 but its seq counter says 3"):
        drive(
            core(page_size=10).read_plan(0, None), lambda step: [3, b"3", 3, [entry(1), entry(2)]]
        )


def test_count_of_a_missing_counter_is_the_streams_end() -> None:
    answers = iter([[4, None, 4], [[entry(4)]]])
    count, steps = drive(core().count_plan(), lambda step: next(answers))
    assert count == 4 and commands(steps) == [("XLEN", "GET", "XLEN"), ("XREVRANGE",)]
    assert drive(core().count_plan(), lambda step: [0, None, 0])[0] == 0


def test_an_entry_that_does_not_decode_names_its_seq() -> None:
    foreign = [entry(1), [b"2-0", [b"x", b"1"]]]
    with pytest.raises(CorruptEntryError) as caught:
        drive(core(page_size=10).read_plan(0, 2), lambda step: [foreign])
    assert caught.value.seq == 2
    bad_time = [[b"1-0", [b"at", b"99999999999999999999", b"msg", b"{}"]]]
    with pytest.raises(CorruptEntryError, match="entry 1"):
        drive(core(page_size=10).read_plan(0, 1), lambda step: [bad_time])
    body = b'{"role":"user","content":"m"}'
    for entry_id, fields in [
        (b"1-18446744073709551615", [b"msg", body]),  # the time in the ID: out of range
        (b"1-0", [b"msg", body]),  # <seq>-0 but no "at" field: the time is nowhere
        (b"1-7", [b"at", AT, b"msg", body]),  # an "at" field under a <seq>-<at> ID
    ]:
        with pytest.raises(CorruptEntryError, match="entry 1") as caught:
            drive(core(page_size=10).read_plan(0, 1), replying([[[entry_id, fields]]]))
        assert caught.value.seq == 1


def test_entries_of_earlier_versions_are_read_with_their_at_field() -> None:
    """Earlier versions wrote ID ``<seq>-0`` and an ``at`` field: a page may mix both."""
    page = [entry(1, older=True), entry(2, older=True), entry(3), entry(4)]
    rows, _ = drive(core(page_size=10).read_plan(0, 4), lambda step: [page])
    assert [r.seq for r in rows] == [1, 2, 3, 4]
    assert len({r.at for r in rows}) == 1  # the same time, from the field or the ID
    assert rows[0].at.year == 2023
    edit = [b"5-0", [b"at", AT, b"edit", b'{"op":"retract","seqs":[4]}']]
    newer_edit = [b"6-" + AT, [b"edit", b'{"op":"retract","seqs":[3]}']]
    entries, _ = drive(
        core(page_size=10).physical_read_plan(0, 6), lambda step: [[*page, edit, newer_edit]]
    )
    assert [(e.seq, e.at) for e in entries[4:]] == [(5, rows[0].at), (6, rows[0].at)]


def test_a_seq_written_twice_is_corrupt() -> None:
    """IDs ``<seq>-<at>`` of two times can share a seq (only by hand): an error."""
    twice = [entry(1), entry(2), entry(2, entry_id=b"2-" + AT[:-1] + b"9"), entry(3)]
    with pytest.raises(CorruptLogError, match="two entries of seq 2"):
        drive(core(page_size=10).read_plan(0, 4), lambda step: [twice])
    with pytest.raises(CorruptLogError, match="two entries of seq 2"):
        drive(core(page_size=10).last_plan(4), lambda step: [twice[::-1]])
    cursor = FollowCursor(core(page_size=10), 0, block_ms=100, reconnect_within=None)
    with pytest.raises(CorruptLogError, match="two entries of seq 2"):
        drive(cursor.page_plan(), lambda step: [[[b"s", twice]]])


def test_reads_name_a_seq_with_incomplete_ids() -> None:
    """An entry ID's second part is the commit time: "up to seq S" ends at ``S`` (an
    incomplete ID: ``S-<max>``), and a follower reads after ``S-<max>``."""
    log = core(page_size=2)
    answers = iter([[[entry(9), entry(8)]], [[entry(7), entry(6)]]])
    _, steps = drive(log.last_plan(4), lambda step: next(answers))
    second = steps[1]
    assert isinstance(second, Read) and second.commands[0][2:4] == ("7", "-")
    cursor = FollowCursor(log, 3, block_ms=100, reconnect_within=None)
    assert cursor.command()[2:] == ("3", "3")  # the check of the entry at its position
    cursor.accept([entry(3)])
    assert cursor.command()[-1] == "3-18446744073709551615"  # XREAD: entries after seq 3


def test_a_cursor_past_the_end_is_a_rewind() -> None:
    answers = iter([[[]], [[entry(7)], b"7"]])
    with pytest.raises(LogRewoundError, match="cursor 10 is beyond the end"):
        drive(core(page_size=10).read_plan(10, 5), lambda step: next(answers))
    answers = iter([[[]], [[entry(10)], b"10"]])
    rows, _ = drive(core(page_size=10).read_plan(10, 5), lambda step: next(answers))
    assert rows == []  # the log ends exactly there
    answers = iter([[[]], [[], b"erased"]])  # an erased conversation: empty, not rewound
    rows, _ = drive(core(page_size=10).read_plan(10, 5), lambda step: next(answers))
    assert rows == []


def test_a_follower_of_an_erased_conversation_waits_for_nothing() -> None:
    cursor = FollowCursor(core(), 3, block_ms=100, reconnect_within=None)
    rows, steps = drive(cursor.page_plan(), lambda step: [[], b"erased"])
    assert rows == [] and ("pause",) in commands(steps)  # the check is made again
    # The tombstone expired and the entry at the cursor is gone: the log's first seq is
    # read next (a trim?)...
    assert drive(cursor.page_plan(), lambda step: [[], None])[0] == []
    with pytest.raises(LogRewoundError, match="beyond the end"):  # ...never trimmed
        drive(cursor.page_plan(), lambda step: [None])


def test_a_follower_detects_a_rewound_log() -> None:
    log = core()
    cursor = FollowCursor(log, 3, block_ms=100, reconnect_within=None)
    # The entry at its cursor is gone: the log's first seq is read next (a trim?)...
    assert drive(cursor.page_plan(), lambda step: [[]])[0] == []
    with pytest.raises(LogRewoundError, match="beyond the end"):
        drive(cursor.page_plan(), lambda step: [])  # ...never trimmed: a rewind
    cursor = FollowCursor(log, 0, block_ms=100, reconnect_within=None)
    rows, _ = drive(cursor.page_plan(), lambda step: [[[b"s", [entry(1)]]]])
    assert [r.seq for r in rows] == [1]
    assert drive(cursor.page_plan(), lambda step: [None])[0] == []  # idle: verify next
    other = [b"1-0", [b"at", b"1800000000000000", b"msg", b'{"role":"user","content":"x"}']]
    with pytest.raises(LogRewoundError, match="now holds another message"):
        drive(cursor.page_plan(), lambda step: [[other]])


def test_a_follower_waits_out_failures_then_gives_up_after_reconnect_within() -> None:
    clock = Clock()
    log = core(clock)
    cursor = FollowCursor(log, 0, block_ms=100, reconnect_within=1.0)

    def down(step: Step) -> Any:
        raise NotSent("connection refused")

    with pytest.raises(ServerUnavailableError, match=r"lost the server for over 1\.0 s"):
        drive(cursor.page_plan(), down, clock)
    unblocked = iter([Refused("UNBLOCKED the role changed"), [[[b"s", [entry(1)]]]]])

    def role_change(step: Step) -> Any:
        answer = next(unblocked)
        if isinstance(answer, Refused):
            raise answer
        return answer

    cursor = FollowCursor(log, 0, block_ms=100, reconnect_within=None)
    rows, steps = drive(cursor.page_plan(), role_change, clock)
    assert [r.seq for r in rows] == [1] and ("pause",) in commands(steps)


def test_reads_retry_what_did_not_run_until_the_deadline() -> None:
    clock = Clock()
    log = core(clock, retry=RetryPolicy(deadline=2.0))
    failures = iter([NotSent("TRYAGAIN"), NotSent("connection reset")])

    def flaky(step: Step) -> Any:
        failure = next(failures, None)
        if failure is not None:
            raise failure
        return [1, b"1", 1]

    assert drive(log.count_plan(), flaky, clock)[0] == 1

    def down(step: Step) -> Any:
        raise NotSent("connection refused")

    with pytest.raises(ServerUnavailableError, match="connection refused"):
        drive(log.count_plan(), down, clock)
    assert clock.now >= 100.0 + 2.0  # it waited out the whole deadline
    with pytest.raises(ServerUnavailableError):
        drive(core(retry=NO_RETRY).count_plan(), down)  # once, no pause


# -- appends -------------------------------------------------------------------------------


def test_an_append_is_one_evalsha_and_a_fresh_commit() -> None:
    log = core()
    commit, steps = drive(append_plan(log, log.batch(BATCH_MSG), None), script_reply)
    assert isinstance(commit, Commit) and (commit.last_seq, commit.fresh) == (1, True)
    assert commands(steps) == [("EVALSHA",)]


def test_noscript_falls_back_to_eval_once() -> None:
    log = core()
    answers = iter(["noscript", "ok"])

    def server(step: Step) -> Any:
        if next(answers) == "noscript":
            raise Refused("NOSCRIPT No matching script. Please use EVAL.")
        return script_reply(step)

    commit, steps = drive(append_plan(log, log.batch(BATCH_MSG), None), server)
    assert commit.fresh and commands(steps) == [("EVALSHA",), ("EVAL",)]
    with pytest.raises(StorageError, match="NOSCRIPT"):  # EVAL itself refused: no loop
        drive(
            append_plan(log, log.batch(BATCH_MSG), None),
            lambda step: (_ for _ in ()).throw(Refused("NOSCRIPT gone")),
        )


def test_a_lost_reply_is_re_sent_with_the_same_key_and_recognised_as_ours() -> None:
    clock = Clock()
    log = core(clock)
    sent: list[Write] = []

    def server(step: Step) -> Any:
        assert isinstance(step, Write)
        sent.append(step)
        if len(sent) == 1:
            raise ReplyLost("connection reset after sending")
        return script_reply(step, replayed=1)  # the first try had committed

    commit, steps = drive(append_plan(log, log.batch(BATCH_MSG), None), server, clock)
    assert commit.fresh  # our own commit, seen late: the hook fires once
    assert commands(steps) == [("EVALSHA",), ("pause",), ("EVALSHA",)]
    first, second = (step.command for step in sent)
    keys = sent_keys(first)  # the keys of a plain append (append_plain.lua), no record
    assert list(keys) == ["seq", "stream", "producers"]
    assert keys["producers"] == "msglog:{conv}:producers"
    # The same producer and call number on every try.
    assert (
        argument(first, "producer") == argument(second, "producer") != ""
        and argument(first, "pseq") == argument(second, "pseq") == 1
    )
    assert (argument(first, "look_up"), argument(second, "look_up")) == (
        "0",
        "1",
    )  # looked up on re-sends only


def test_a_try_never_sent_keeps_the_producer() -> None:
    """A try the server never saw has no result a later commit could push out of the
    producer's window: the producer goes on, so an outage's backoff rounds do not add a
    producer field each. A lost reply hands over (the test above)."""
    clock = Clock()
    log = core(clock)
    producer = log.producer()
    outcomes = iter([NotSent("refused"), NotSent("Too many connections")])

    def server(step: Step) -> Any:
        failure = next(outcomes, None)
        if failure is not None:
            raise failure
        return script_reply(step)

    commit, _ = drive(append_plan(log, log.batch(BATCH_MSG), None), server, clock)
    assert commit.fresh and log.producer() is producer


def test_a_call_no_try_of_which_was_sent_is_never_looked_up() -> None:
    """Issue 23, item 7: tries that never reached the server (a busy pool, a refused
    connect, a cluster refusal) leave the call new: its re-send writes it without a
    look-up, which the script would answer MSGLOG_STALE once later calls of the producer
    committed first. The first try that may have reached the server switches it over."""
    clock = Clock()
    log = core(clock)
    outcomes = iter([NotSent("Too many connections"), NotSent("refused"), ReplyLost("reset")])
    sent: list[Write] = []

    def server(step: Step) -> Any:
        assert isinstance(step, Write)
        sent.append(step)
        failure = next(outcomes, None)
        if failure is not None:
            raise failure
        return script_reply(step)

    commit, _ = drive(append_plan(log, log.batch(BATCH_MSG), None), server, clock)
    assert commit.fresh and len(sent) == 4
    assert [argument(step.command, "look_up") for step in sent] == ["0", "0", "0", "1"]
    # The retry plan likewise: a first try not sent leaves the re-send a new call.
    prepared = log.prepare(log.batch(BATCH_MSG), None, None)
    rest = log.retry_plan(prepared, NotSent("Too many connections"), clock.now)
    _, steps = drive(rest, script_reply, clock)
    assert isinstance(steps[-1], Write) and argument(steps[-1].command, "look_up") == "0"


def test_a_batch_is_validated_as_each_of_its_messages_would_be() -> None:
    """A batch of dicts is validated in one pydantic-core call; the messages are those of
    one call each, given messages are kept as they are, and other mappings and
    iterables take the message-by-message path."""
    log = core()
    # metadata: not the plain lane (role and text only, encoded without models), which
    # carries no messages; test_plain_lane.py checks it stores the same bytes
    given = AgentMessage(role="assistant", content="b", metadata={"k": 1})
    msgs: list[Any] = [
        {"role": "user", "content": "a", "metadata": {"k": 1}},
        given,
        {"role": "tool", "content": "c", "toolCallId": "t", "metadata": {"k": 1}},
    ]
    one_by_one = tuple(log.batch([m]).messages[0] for m in msgs)
    assert log.batch(msgs).messages == one_by_one
    assert log.batch(msgs).messages[1] is given
    assert log.batch(iter(msgs)).messages == one_by_one
    assert log.batch([MappingProxyType(msgs[0]), msgs[2]]).messages == one_by_one[::2]
    assert log.batch(msgs).encoded == tuple(log.batch([m]).encoded[0] for m in msgs)


def test_an_answered_first_try_is_the_commit_and_settles_the_call() -> None:
    """The shell sends the first try itself: its reply is the commit, the call settled;
    a caller's key and a durability wait go the same way (the wait behind the script)."""
    log = core()
    prepared = log.prepare(log.batch(BATCH_MSG), None, None)
    assert prepared.preflight is None and prepared.first_try.command[0] == "EVALSHA"
    commit = log.commit_of(prepared, [1, AT, 0, b""])
    assert (commit.last_seq, commit.fresh) == (1, True) and not log.producer().in_flight()
    keyed = log.prepare(log.batch(BATCH_MSG), "key", None)
    assert keyed.preflight is None and keyed.first_try.then is None
    durable = core(durability=Durability(replicas=1))
    waited = durable.prepare(durable.batch(BATCH_MSG), None, None)
    assert waited.first_try.then is not None and waited.first_try.then[0] == "WAIT"


def test_a_first_try_whose_reply_is_lost_goes_on_in_the_retry_plan() -> None:
    """A lost reply: the rest is the retry plan's, from the second try: a pause, then the
    same call looked up (never written twice)."""
    clock = Clock()
    log = core(clock)
    prepared = log.prepare(log.batch(BATCH_MSG), None, None)
    first = prepared.first_try.command
    rest = log.retry_plan(prepared, ReplyLost("reset after sending"), clock.now)
    commit, steps = drive(rest, lambda step: script_reply(step, replayed=1), clock)
    assert commit.fresh and commands(steps) == [("pause",), ("EVALSHA",)]
    resent = steps[1]
    assert isinstance(resent, Write)
    # The same call number, looked up on the re-send.
    assert (argument(first, "pseq"), argument(resent.command, "pseq")) == (1, 1)
    assert (argument(first, "look_up"), argument(resent.command, "look_up")) == ("0", "1")
    assert not log.producer().in_flight()


def test_a_first_try_refused_is_the_error_or_its_eval() -> None:
    clock = Clock()
    log = core(clock, retry=NO_RETRY)
    # Not cached: sent again at once (EVALSHA, then EVAL), whatever the retry policy.
    answers = iter(["noscript", "ok"])

    def server(step: Step) -> Any:
        if next(answers) == "noscript":
            raise Refused("NOSCRIPT No matching script. Please use EVAL.")
        return script_reply(step)

    commit, steps = drive(append_plan(log, log.batch(BATCH_MSG)), server, clock)
    assert commit.fresh and commands(steps) == [("EVALSHA",), ("EVAL",)]
    # Any other refusal is the error the plan raises, and the call is settled.
    prepared = log.prepare(log.batch(BATCH_MSG), None, None)
    with pytest.raises(WrongTypeError):
        drive(log.retry_plan(prepared, Refused("WRONGTYPE no"), clock.now), script_reply)
    assert not log.producer().in_flight()
    # Not sent (no connection): with retries off, unavailable and nothing written.
    prepared = log.prepare(log.batch(BATCH_MSG), None, None)
    with pytest.raises(ServerUnavailableError, match="Nothing was written"):
        drive(log.retry_plan(prepared, NotSent("refused"), clock.now), script_reply)


def test_a_producer_numbers_its_calls_and_is_shared_by_the_process_s_logs() -> None:
    log, other = core(), core()
    sent: list[tuple[Any, ...]] = []

    def server(step: Step) -> Any:
        assert isinstance(step, Write)
        sent.append(step.command)
        return script_reply(step)

    for each in (log, log, log, other):
        drive(append_plan(each, each.batch(BATCH_MSG), None), server)
    assert [argument(c, "pseq") for c in sent] == [1, 2, 3, 1]
    assert [argument(c, "floor") for c in sent] == [1, 2, 3, 1]  # the floor: one call at a time
    assert (
        argument(sent[0], "producer")
        == argument(sent[1], "producer")
        == argument(sent[2], "producer")
        != argument(sent[3], "producer")
    )
    assert len(str(argument(sent[0], "producer"))) == 12
    # Without one of its own, a log object numbers its calls with the process's producer,
    # which every log object, client, thread and event loop of the process shares.
    shared = [LogCore("conv", prefix="msglog", max_message_bytes=64, page_size=2, clock=Clock())]
    shared.append(LogCore("other", prefix="p", max_message_bytes=64, page_size=2, clock=Clock()))
    assert shared[0].producer() is shared[1].producer() is _producer.current()
    before = len(sent)
    for each in shared:
        drive(append_plan(each, each.batch(BATCH_MSG), None), server)
    first, second = sent[before:]
    assert (
        argument(first, "producer") == argument(second, "producer") == _producer.current().id
        and argument(second, "pseq") == argument(first, "pseq") + 1
    )
    # No per-append key, and the blobs hash only when the script touches it (slot moves).
    assert sent_keys(sent[0]) == {
        "seq": "msglog:{conv}:seq", "stream": "msglog:{conv}:stream",
        "producers": "msglog:{conv}:producers",
    }  # fmt: skip
    drive(append_plan(core(ttl=timedelta(hours=1)), log.batch(BATCH_MSG), None), server)
    assert sent_keys(sent[-1])["blobs"] == "msglog:{conv}:blobs"
    drive(append_plan(core(retry=NO_RETRY), log.batch(BATCH_MSG), None), server)
    assert arguments(sent[-1], "producer", "pseq", "floor") == (
        "",
        "",
        "",
    )  # retries off: no producer


def test_each_try_carries_the_producer_s_lowest_call_in_flight() -> None:
    """The floor lets the server drop the results no try will ask for again, and makes
    it keep those of every call still in flight, however many later calls commit."""
    clock = Clock()
    log = core(clock)
    batch = log.batch(BATCH_MSG)
    first, second = append_plan(log, batch, None), append_plan(log, batch, None)
    step_1, step_2 = next(first), next(second)  # both sent, neither answered yet
    assert isinstance(step_1, Write) and isinstance(step_2, Write)
    assert (
        arguments(step_1.command, "pseq", "floor"),
        arguments(step_2.command, "pseq", "floor"),
    ) == ((1, 1), (2, 1))
    pause = first.throw(ReplyLost("reset"))  # call 1's reply is lost: it will re-send
    assert isinstance(pause, Pause)
    with pytest.raises(StopIteration):
        second.send(script_reply(step_2, last=2))  # call 2 answered: settled
    clock.now += pause.seconds
    resent = first.send(None)
    assert isinstance(resent, Write) and arguments(resent.command, "pseq", "floor") == (1, 1)
    # Call 1 being re-sent, new calls go to a new producer: however many of them commit,
    # they cannot push call 1's result out of the old producer's window.
    third = append_plan(log, batch, None)
    step_3 = next(third)
    assert isinstance(step_3, Write) and arguments(step_3.command, "pseq", "floor") == (1, 1)
    assert (
        argument(step_3.command, "producer")
        != argument(step_1.command, "producer")
        == argument(resent.command, "producer")
    )
    with pytest.raises(StopIteration):
        first.send(script_reply(resent, last=1, replayed=1, writer=""))
    fourth_plan = append_plan(log, batch, None)
    fourth = next(fourth_plan)
    assert isinstance(fourth, Write) and arguments(fourth.command, "pseq", "floor") == (
        2,
        1,
    )  # 1 (new) in flight
    with pytest.raises(StopIteration):
        third.send(script_reply(step_3, last=3))
    fifth = next(append_plan(log, batch, None))
    assert isinstance(fifth, Write) and arguments(fifth.command, "pseq", "floor") == (3, 2)


def test_a_call_refused_before_it_is_sent_leaves_no_call_in_flight() -> None:
    log = core(durability=Durability(aof=True))
    with pytest.raises(MessageLogError):  # no WAITAOF: refused before the script is sent
        drive(append_plan(log, log.batch(BATCH_MSG), None), lambda step: [[None]])
    assert not log.producer().in_flight()  # else every later try would carry a stale floor


def test_the_key_of_an_in_doubt_append_is_a_try_of_the_same_call() -> None:
    clock = Clock()
    log = core(clock, retry=RetryPolicy(attempts=1, backoff=0.1, max_backoff=0.1))
    sent: list[tuple[Any, ...]] = []

    def lost(step: Step) -> Any:
        assert isinstance(step, Write)
        sent.append(step.command)
        raise ReplyLost("reset")

    with pytest.raises(AppendInDoubtError, match="msglog-retry:") as caught:
        drive(append_plan(log, log.batch(BATCH_MSG), None), lost, clock)
    key = caught.value.idempotency_key
    assert key is not None and key.startswith("msglog-retry:")

    # The log goes on as a new producer: its later appends leave the old one's window as
    # it was, so the key stays answerable.
    def answer(step: Step) -> Any:
        assert isinstance(step, Write)
        sent.append(step.command)
        return script_reply(step)

    drive(append_plan(log, log.batch(BATCH_MSG), None), answer)
    assert argument(sent[-1], "producer") != argument(
        sent[0], "producer"
    ) and log.producer().id == argument(sent[-1], "producer")
    # The process's producer is retired the same way (a log without a producer of its own).
    shared = LogCore("conv", prefix="msglog", max_message_bytes=64, page_size=2, clock=clock,
                     retry=RetryPolicy(attempts=1, backoff=0.1, max_backoff=0.1))  # fmt: skip
    retired = _producer.current()
    with pytest.raises(AppendInDoubtError):
        drive(append_plan(shared, shared.batch(BATCH_MSG), None), lost, clock)
    assert _producer.current() is not retired and shared.producer() is _producer.current()
    assert len(retired.in_flight()) == 1  # in doubt: in flight for good, its floor kept
    elsewhere = core()  # another process, say
    commit, steps = drive(
        append_plan(elsewhere, elsewhere.batch(BATCH_MSG), key),
        lambda step: script_reply(step, replayed=1, writer=""),  # the first call's result
    )
    assert not commit.fresh  # its hook is not this call's to fire
    (again,) = [step.command for step in steps if isinstance(step, Write)]
    assert arguments(again, "producer", "pseq") == arguments(
        sent[0], "producer", "pseq"
    )  # the original producer and call number
    assert (
        argument(again, "floor") == ""
    )  # its floor: the other log cannot know the producer's calls
    assert (
        argument(again, "look_up") == "1" and argument(again, "call") != ""
    )  # looked up, with this call's own token
    assert len(again) == len(sent[0])  # no idempotency record key: not a caller's key
    with pytest.raises(IdempotencyConflictError, match="different batch"):
        drive(
            append_plan(elsewhere, elsewhere.batch([{"role": "user", "content": "x"}]), key), lost
        )


def test_a_replay_of_another_calls_commit_is_not_fresh() -> None:
    log = core()
    commit, _ = drive(
        append_plan(log, log.batch(BATCH_MSG), "k"),
        lambda step: script_reply(step, replayed=1, writer="0123456789abcdef"),
    )
    assert not commit.fresh


def test_appends_give_up_in_doubt_or_unavailable_and_say_which() -> None:
    clock = Clock()
    log = core(clock, retry=RetryPolicy(attempts=2, backoff=0.1, max_backoff=0.1))

    def lost(step: Step) -> Any:
        raise ReplyLost("reset")

    with pytest.raises(AppendInDoubtError, match="3 tries") as caught:
        drive(append_plan(log, log.batch(BATCH_MSG), None), lost, clock)
    assert caught.value.idempotency_key is not None

    def refused(step: Step) -> Any:
        raise NotSent("connection refused")

    with pytest.raises(ServerUnavailableError, match="Nothing was written") as unavailable:
        drive(append_plan(log, log.batch(BATCH_MSG), None), refused, clock)
    assert not isinstance(unavailable.value, AppendInDoubtError)
    with pytest.raises(AppendInDoubtError, match="retries are off") as no_key:
        drive(append_plan(core(retry=NO_RETRY), log.batch(BATCH_MSG), None), lost)
    assert no_key.value.idempotency_key is None


def test_no_re_send_once_the_record_may_have_expired() -> None:
    clock = Clock()
    log = core(
        clock,
        retry=RetryPolicy(attempts=5, backoff=0.5, max_backoff=0.5),
        idempotency_window=timedelta(milliseconds=200),  # gone before any re-send
    )

    def lost(step: Step) -> Any:
        raise ReplyLost("reset")

    with pytest.raises(AppendInDoubtError, match="1 try;"):
        drive(append_plan(log, log.batch(BATCH_MSG), "caller-key"), lost, clock)


def test_cluster_refusals_are_re_sent_safely() -> None:
    clock = Clock()
    log = core(clock)
    answers = iter([NotSent("TRYAGAIN"), NotSent("CLUSTERDOWN"), None])

    def server(step: Step) -> Any:
        failure = next(answers)
        if failure is not None:
            raise failure
        return script_reply(step)

    commit, steps = drive(append_plan(log, log.batch(BATCH_MSG), None), server, clock)
    assert commit.fresh and commands(steps).count(("EVALSHA",)) == 3


ERRORS: list[tuple[str, type[MessageLogError]]] = [
    ("WRONGTYPE Operation against a key holding the wrong kind of value", WrongTypeError),
    ("OOM command not allowed when used memory > 'maxmemory'", OutOfMemoryError),
    ("MSGLOG_BADSEQ seq counter k holds '5.0', not a seq", CorruptLogError),
    ("MSGLOG_BEHIND seq counter k (3) is behind", CorruptLogError),
    ("MSGLOG_AHEAD seq counter k (9) is ahead", CorruptLogError),
    ("MSGLOG_FOREIGN stream k ends with entry 5-1", CorruptLogError),
    ("MSGLOG_BADRECORD idempotency record k holds x", CorruptLogError),
    ("MSGLOG_KEYREUSED idempotency key k was used for a different batch", IdempotencyConflictError),
    ("NOPERM this user has no permissions to run the 'evalsha' command", PermissionDeniedError),
    ("WRONGPASS invalid username-password pair or user is disabled.", AuthenticationError),
    ("NOAUTH Authentication required.", AuthenticationError),
    ("ERR Error running script: @user_script:1: MSGLOG_AHEAD seq counter", CorruptLogError),
    ("MSGLOG_CONFLICT 5 is the last seq of k, not 3", SeqConflictError),
    ("MSGLOG_STALE producer p of k no longer holds the result of call 3", AppendInDoubtError),
]


@pytest.mark.parametrize("reply, error", ERRORS, ids=[e[0].split()[0] for e in ERRORS])
def test_every_error_reply_maps_to_one_error(reply: str, error: type[MessageLogError]) -> None:
    def refuse(step: Step) -> Any:
        raise Refused(reply)

    log = core()
    with pytest.raises(error) as caught:
        drive(append_plan(log, log.batch(BATCH_MSG), None), refuse)
    assert type(caught.value) is error  # exactly, not a broader class
    with pytest.raises(error):  # a read refused the same way maps the same way
        drive(log.count_plan(), refuse)


def test_durability_is_sent_behind_the_append_and_its_shortfall_reported() -> None:
    log = core(durability=Durability(replicas=1))

    def server(step: Step) -> Any:
        assert isinstance(step, Write) and step.then is not None
        return script_reply(step), 0  # WAIT: no replica acknowledged

    batch = log.batch(BATCH_MSG)
    commit, steps = drive(append_plan(log, batch, None), server)
    assert commit.not_durable is not None and "0 of 1 replicas" in commit.not_durable
    assert isinstance(steps[0], Write) and steps[0].then is not None
    assert steps[0].then[0] == "WAIT"


def test_eviction_risk_is_reported_not_warned() -> None:
    log = core()
    answers: Iterator[Any] = iter(
        [[b"# Memory\r\nmaxmemory:0\r\nmaxmemory_policy:allkeys-lru\r\n"]]
    )

    def server(step: Step) -> Any:
        return next(answers) if isinstance(step, Read) else script_reply(step)

    commit, _ = drive(append_plan(log, log.batch(BATCH_MSG), None, check_eviction=True), server)
    assert commit.eviction_risk is not None and "allkeys-lru" in commit.eviction_risk


# -- the shell's translation of redis-py's failures ----------------------------------------


@pytest.mark.parametrize(
    "exc, outcome, code",
    [
        (redis_errors.NoScriptError("No matching script."), Refused, "NOSCRIPT"),
        (redis_errors.OutOfMemoryError("command not allowed"), Refused, "OOM"),
        (redis_errors.ResponseError("WRONGTYPE Operation"), Refused, "WRONGTYPE"),
        (redis_errors.ResponseError("unknown command"), Refused, "ERR"),
        (redis_errors.TryAgainError("Multiple keys"), NotSent, None),
        (redis_errors.ClusterDownError("The cluster is down"), NotSent, None),
        (redis_errors.ConnectionError("refused"), NotSent, None),
        (redis_errors.TimeoutError("timed out"), NotSent, None),
        (redis_errors.RedisClusterException("no nodes"), NotSent, None),
        (ConnectionResetError("reset"), NotSent, None),
    ],
)
def test_redis_py_failures_become_step_outcomes(
    exc: BaseException, outcome: type, code: str | None
) -> None:
    failure = step_failure(exc)
    assert type(failure) is outcome and failure.origin is exc
    if code is not None:
        assert isinstance(failure, Refused) and failure.code == code


def test_an_erasure_finds_the_records_runs_one_script_and_deletes_the_stragglers() -> None:
    """The erase plan: the records named by the conversation's records set, one erase.lua
    call naming every key of the conversation and the records, then UNLINK of the records
    the script found named but not passed (an append committed just before it). No SCAN
    (docs/lifecycle.md)."""
    log = core()

    def server(step: Step) -> Any:
        command = step.commands[0] if isinstance(step, Read) else None
        assert command is not None and command[0] != "SCAN"
        if command[0] == "ZRANGE":
            assert command[1] == log.keys.records
            assert isinstance(step, Read) and step.commands[1] == ("HKEYS", log.keys.drafts)
            # A draft's id names its stream; a field that is not an id names nothing.
            return [[b"msglog:{conv}:idem:b", b"msglog:{conv}:idem:a"], [b"ab" * 16, b"x:*"]]
        if command[0] == "EVALSHA":
            return [[5, [b"scope", b"acme"], b"erased", [b"msglog:{conv}:idem:c"]]]
        assert command[0] == "UNLINK"
        return [1]

    erasure, steps = drive(log.erase_plan(timedelta(seconds=5)), server)
    assert erasure.owner == {"scope": "acme"} and erasure.deleted == 6
    assert erasure.outcome == "erased"
    script = next(
        s.commands[0] for s in steps if isinstance(s, Read) and s.commands[0][0] == "EVALSHA"
    )
    numkeys = int(script[2])
    keys = script[3 : 3 + numkeys]
    assert keys[:4] == (log.keys.seq, log.keys.owner, log.keys.stream, log.keys.records)
    assert set(keys) == {
        log.keys.seq, log.keys.stream, log.keys.blobs, log.keys.view, log.keys.hidden,
        log.keys.producers, log.keys.owner, log.keys.records, log.keys.values, log.keys.usage,
        log.keys.drafts, log.keys.draft_feed, log.keys.draft("ab" * 16),
        "msglog:{conv}:idem:a", "msglog:{conv}:idem:b",
    }  # fmt: skip
    assert script[3 + numkeys :] == (5000, "")  # no scope: erased by name, unchecked
    sent = [c for s in steps if isinstance(s, Read) for c in s.commands]
    assert sent[-1] == ("UNLINK", "msglog:{conv}:idem:c")


def test_a_scope_erasure_of_a_conversation_outside_it_unlinks_nothing() -> None:
    """On behalf of a scope, the script's "outside" (its owner record names another
    scope) ends the plan: no straggler, no record of the conversation is unlinked."""
    log = core()

    def server(step: Step) -> Any:
        command = step.commands[0] if isinstance(step, Read) else None
        assert command is not None and command[0] in ("ZRANGE", "EVALSHA")
        if command[0] == "ZRANGE":
            return [[b"msglog:{conv}:idem:a"] * 1001, []]
        return [[0, [b"scope", b"acme2"], b"outside", []]]

    erasure, steps = drive(log.erase_plan(timedelta(seconds=5), ("acme",)), server)
    assert (erasure.outcome, erasure.deleted, erasure.owner) == ("outside", 0, {"scope": "acme2"})
    script = next(
        s.commands[0] for s in steps if isinstance(s, Read) and s.commands[0][0] != "ZRANGE"
    )
    assert script[-2:] == (5000, "acme")


def test_a_conversation_id_with_glob_characters_scans_only_its_own_records() -> None:
    log = LogCore("a*b[c]?", prefix="msglog", max_message_bytes=1, page_size=1, clock=Clock())
    assert record_pattern(log.keys) == r"msglog:{a\*b\[c\]\?}:idem:*"
