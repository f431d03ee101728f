# Generated from _async/_carrier.py by scripts/unasync.py: edit that file, then run it.
"""MessageLog's carrier: plan steps taken to the server and their replies (or
failures) handed back to the core, and a batch committed with its hook run.

Every call of the client ends here; nothing above this layer talks to a connection.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

from redis import exceptions as redis_errors

from .._core.facade import Batch, Commit, PreparedAppend
from .._core.steps import Command, Pause, Plan, Read, ReplyLost, StepFailure, Write
from .._io import io_sync as io
from .._io.failures import CLIENT_FAILURES, REFUSALS, step_failure
from .._io.routing import Router, asking_before_each, pack, without_asking
from .._io.shell import ShellBase
from .._io.subscription import OnAppend
from ..telemetry import note_retry

T = TypeVar("T")


class LogCarrier(ShellBase):
    """Carries plans to the server for the rest of :class:`MessageLog`."""

    _router: Router
    _on_append: OnAppend | None

    def _commit(
        self, batch: Batch, idempotency_key: str | None, expected_seq: int | None = None
    ) -> int:
        return (self._commit_batch(batch, idempotency_key, expected_seq)).last_seq

    def _commit_batch(
        self, batch: Batch, idempotency_key: str | None, expected_seq: int | None
    ) -> Commit:
        commit = self._send_append(self._prepare_append(batch, idempotency_key, expected_seq))
        self._warn(commit)
        if commit.fresh and batch.encoded and self._on_append is not None:
            io.call_hook(self._on_append, self._core.committed_rows(batch, commit))
        self._core.raise_if_not_durable(batch, commit)
        return commit

    def _run(self, plan: Plan[T], started: float | None = None) -> T:
        """Carry the plan's steps to the server; a failed step goes back into the plan as
        the core's outcome (never as redis-py's exception). Each step's connect (or wait
        for a busy pool) gets what is left of the deadline of the call, begun at
        ``started`` (default: now)."""
        started = self._core.clock() if started is None else started
        reply: Any = None
        failure: StepFailure | None = None
        while True:
            try:
                step = plan.send(reply) if failure is None else plan.throw(failure)
            except StopIteration as done:
                result: T = done.value
                return result
            reply, failure = None, None
            try:
                if isinstance(step, Read):
                    within = self._within(started)
                    reply = io.honouring_cancel(self._read(step.commands, within, step.route))
                elif isinstance(step, Pause):
                    note_retry()  # a wait before trying again: the operation's span counts it
                    io.sleep(step.seconds)
                else:
                    reply = io.honouring_cancel(self._write_once(step, self._within(started)))
            except (*CLIENT_FAILURES, ReplyLost) as exc:
                failure = step_failure(exc)

    def _send_append(self, prepared: PreparedAppend) -> Commit:
        """An append (see ``LogCore.prepare``): its preflight when still needed, then its
        first try sent from here, and only a failure handed to a plan (the deadline
        counts the preflight). A plan costs a few generators and steps per call: ~10% of
        an append on a local server, so the first try is sent without one."""
        started = self._core.clock()
        try:
            if prepared.preflight is not None:
                self._run(prepared.preflight, started)
            write = self._write_once(prepared.first_try, self._within(started))
            reply = io.honouring_cancel(write)
        except (*CLIENT_FAILURES, ReplyLost) as exc:
            plan = self._core.retry_plan(prepared, step_failure(exc), started)
            return self._run(plan, started)
        except BaseException:
            prepared.settle()  # refused, cancelled or interrupted: as a plan's end would
            raise
        return self._core.commit_of(prepared, reply)

    def _read(
        self, commands: tuple[Command, ...], within: float, route: str | None = None
    ) -> list[Any]:
        # Raw replies (redis-py's response callbacks would reshape every stream entry).
        # No redis-py retry: re-sends are the core's, under the log's RetryPolicy.
        replies: dict[int, Any] = {}
        router = self._router if route is None else Router(self._redis, route)
        router.run(lambda conn, asking: _pipeline(conn, commands, asking, replies), within)
        return [replies[i] for i in range(len(commands))]

    def _write_once(self, step: Write, within: float) -> Any:
        # Never through redis-py's retry policy: a blind re-send of an append writes twice.
        then, split = step.then, step.split
        commands = (step.command,) if then is None else (step.command, then)
        replies = self._router.run(
            lambda conn, asking: _pipeline(conn, commands, asking, None, split), within
        )
        return replies[0] if then is None else (replies[0], replies[1])


def _pipeline(
    conn: Any,
    commands: Sequence[Command],
    asking: bool,
    kept: dict[int, Any] | None = None,
    split: int = 0,
) -> list[Any]:
    """Send ``commands`` in one write (each after ``ASKING`` on the target of an ``ASK``)
    and read every reply, an error reply as its exception, before raising anything: the
    connection is left with nothing unread.

    A write (no ``kept``) is sent once: a failure after sending is :class:`ReplyLost`
    (the server may have run it) and the connection is disconnected. Its first command's
    error reply is raised; those behind it come back in the list (a refused
    ``WAIT``/``WAITAOF`` is a durability shortfall, not a failure).

    A read fills ``kept`` (replies by index) and raises the first error reply. A reply
    kept from an earlier try is not asked for again after a redirection: during a slot
    migration it came from the node that still held its key, and the importing node,
    which has not received that key yet, would answer as if it did not exist.

    ``split``: a write's one command has its first ``split`` arguments packed from a
    cache (``Write.split``), where :func:`pack` packs with hiredis."""
    sent, todo = _missing(commands, kept)
    asked = asking_before_each(sent, asking)
    try:
        # A cancel honoured mid-exchange leaves replies unread: the router discards conn.
        sending = pack(conn, asked, split)  # split: an append's first try, its head cached
        if not io.write_now(conn, sending):  # most writes: no coroutine, no await
            io.send(conn, sending)
        if len(asked) == 1:  # most writes: one reply (an error reply raises here)
            raw = [io.read_reply(conn)]
        else:
            raw = []
            for _ in asked:
                try:
                    raw.append(io.read_reply(conn))
                except redis_errors.ResponseError as exc:
                    raw.append(exc)
    except REFUSALS:
        raise  # the server answered, refusing it: nothing ran
    except (redis_errors.ConnectionError, redis_errors.TimeoutError, OSError) as exc:
        if kept is not None:
            raise  # a read: the router discards conn, the plan reads again
        conn.disconnect()
        raise ReplyLost(str(exc) or type(exc).__name__, exc) from exc
    replies = without_asking(raw, asking) if asking else raw
    if kept is None:
        if isinstance(replies[0], redis_errors.ResponseError):
            raise replies[0]
        return replies
    _keep(kept, range(len(commands)) if todo is None else todo, replies)
    return replies


def _missing(
    commands: Sequence[Command], kept: dict[int, Any] | None
) -> tuple[Sequence[Command], list[int] | None]:
    """The commands to send, and their indexes (``None``: all of them): after a
    redirection, a read sends only the commands whose replies it has not kept."""
    if not kept:
        return commands, None
    todo = [i for i in range(len(commands)) if i not in kept]
    return [commands[i] for i in todo], todo


def _keep(kept: dict[int, Any], todo: Sequence[int], replies: list[Any]) -> None:
    """Keep a read's replies by index (``todo``: the commands sent); then raise the
    first error reply, whose command a redirected try sends again."""
    failures = []
    for index, reply in zip(todo, replies, strict=True):
        if isinstance(reply, redis_errors.ResponseError):
            failures.append(reply)
        else:
            kept[index] = reply
    if failures:
        raise failures[0]
