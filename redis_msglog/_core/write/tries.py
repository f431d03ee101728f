"""What follows an append's failed first try (the shell sends the first itself; this
plan runs only after a failure, the shape of aiokafka's sender): re-sends under the
retry policy while a re-send is safe (the idempotency record surely still there), a
look-up once a try may have committed, the hand-over to a new producer, and the error
when it gives up: in doubt (it may have committed) or unavailable (nothing written)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ... import errors
from ..._lua import contract as script
from ..._lua.run import ScriptRunner, script_not_run
from ..args import duration
from ..retry import RetryPolicy
from ..steps import Command, NotSent, Pause, Plan, Refused, ReplyLost, StepFailure, Write
from ..stored.keys import ConversationKeys
from .append import Commit, PreparedAppend
from .producer import Producer, ProducerSlot


@dataclass(frozen=True, slots=True)
class ScopeGuard:
    """A scoped log's answers to a write its conversation's owner record refused:
    ``register`` (the registration plan, refused while the scope's tombstone stands) and
    ``erased`` (whether a tombstone of the scope, or of a prefix of it, stands)."""

    register: Callable[[], Plan[object]]
    erased: Callable[[], Plan[bool]]


class Tries:
    """The tries of one log's appends after the first (see the module)."""

    def __init__(
        self,
        keys: ConversationKeys,
        *,
        retry: RetryPolicy,
        clock: Callable[[], float],
        producers: ProducerSlot,
        runner: ScriptRunner,
        commit_of: Callable[[PreparedAppend, Any], Commit],
        guard: ScopeGuard | None = None,
    ) -> None:
        self.keys = keys
        self.guard = guard
        self.retry = retry
        self.clock = clock
        self.producers = producers
        self.runner = runner
        self.commit_of = commit_of

    def retry_plan(
        self, prepared: PreparedAppend, failure: StepFailure, first_sent: float
    ) -> Plan[Commit]:
        """The rest of an append whose first try (``prepared.first_try``, sent at
        ``first_sent``, or the preflight before it) failed with ``failure``: re-sent,
        looked up or refused. A script the server did not run (not cached, or a shebang
        it cannot parse) goes on to the ``EVAL`` fallback within the same try."""
        if isinstance(failure, Refused) and not script_not_run(failure):
            if self.guard is not None:
                return (yield from self._guarded(prepared, failure, first_sent, self.guard))
            prepared.settle()
            raise script.error_for(failure, self.keys) from failure.origin
        in_doubt = False
        try:
            return (yield from self._send_tries(prepared, failure, first_sent))
        except errors.AppendInDoubtError as error:
            in_doubt = error.idempotency_key is not None
            raise
        finally:
            # Settled: no try of it will be sent again. One in doubt stays in flight for
            # good (its producer retired), so that the server keeps its result for a retry.
            if not in_doubt:
                prepared.settle()

    def _guarded(
        self, prepared: PreparedAppend, failure: Refused, first_sent: float, guard: ScopeGuard
    ) -> Plan[Commit]:
        """A scoped log's refused try. Its owner record gone (MSGLOG_UNOWNED: the
        conversation was erased and its tombstone expired): register it again (refused
        while the scope's tombstone stands) and re-send the same call once, its identity
        kept. Refused by an erasure's tombstone: a ScopeErasedError if the scope's stands."""
        if "MSGLOG_UNOWNED" in failure.text and not prepared.registered_again:
            prepared.registered_again = True
            try:
                yield from guard.register()
            except BaseException:
                prepared.settle()
                raise
            call, then = prepared.call, prepared.first_try.then
            try:
                reply = yield from self.eval_append(call, then)
            except StepFailure as again:
                return (yield from self.retry_plan(prepared, again, first_sent))
            return self.commit_of(prepared, reply)
        prepared.settle()
        error = script.error_for(failure, self.keys)
        if "MSGLOG_ERASED" in failure.text:
            try:
                scope_erased = yield from guard.erased()
            except errors.MessageLogError:
                scope_erased = False  # the refusal stands as it is
            if scope_erased:
                error = errors.ScopeErasedError(
                    f"{error} Its scope was erased too: its tombstone still stands, so the "
                    "conversation cannot be created again in it until it expires."
                )
        raise error from failure.origin

    def _send_tries(
        self, prepared: PreparedAppend, failure: StepFailure, first_sent: float
    ) -> Plan[Commit]:
        call, then = prepared.call, prepared.first_try.then
        tries = 1
        maybe_committed = isinstance(failure, ReplyLost)
        while True:
            try:
                if isinstance(failure, Refused):  # the first try's script did not run
                    cached = failure.code != "NOSCRIPT"  # else the shebang: see run_script
                    reply = yield from self._fallback(call, then, cached)
                else:
                    if not (yield from self._pause(prepared, tries, first_sent, maybe_committed)):
                        break
                    # Once a try may have reached the server, look the call up. Not before:
                    # a call no try of which was sent (a busy pool, a refused connect) never
                    # ran, and a look-up could only call it in doubt (MSGLOG_STALE, when
                    # later calls of the producer committed first and moved its window
                    # past it).
                    if prepared.first_try_new and maybe_committed:
                        call = _replace_look_up(call, prepared.producer)
                    tries += 1
                    reply = yield from self.eval_append(call, then)
            except ReplyLost as lost:
                maybe_committed, failure = True, lost
            except NotSent as not_sent:
                failure = not_sent  # nothing ran: no connection, or the cluster refused it
            except Refused as refused:
                if self.guard is not None:
                    return (yield from self._guarded(prepared, refused, first_sent, self.guard))
                raise script.error_for(refused, self.keys) from refused.origin
            else:
                return self.commit_of(prepared, reply)
        raise self._gave_up(prepared, failure, tries, maybe_committed, first_sent)

    def _pause(
        self, prepared: PreparedAppend, tries: int, first_sent: float, maybe_committed: bool
    ) -> Plan[bool]:
        """The pause before the next try, or ``False`` when no try may follow."""
        delay = self.retry.pause_before(tries, self.clock() - first_sent)
        if delay is None:
            return False  # out of attempts, or past the deadline
        if maybe_committed:  # (a try never sent has no record or result to keep)
            if not self._record_outlives(first_sent, delay, prepared):
                return False  # the record may be gone by then: a re-send could write twice
            self._hand_over(prepared)
        yield Pause(delay)
        return True

    def _hand_over(self, prepared: PreparedAppend) -> None:
        """Before a call that may have committed is re-sent, new calls go to a new producer:
        the old one's window then holds only the calls already in flight, so later commits
        cannot push this call's result out of it (MSGLOG_STALE) however long it is retried.
        A try never sent has no result to protect: retiring the process's producer for it
        would add a producer field per backoff round of an outage."""
        if prepared.producer is not None:
            self.producers.retire(prepared.producer)

    def _record_outlives(self, first_sent: float, delay: float, prepared: PreparedAppend) -> bool:
        """Whether an idempotency record written by the first try is surely still there
        after ``delay`` more seconds (with a margin for clock-rate differences)."""
        age = self.clock() + delay - first_sent
        return age < 0.9 * prepared.window.total_seconds()

    def _gave_up(
        self,
        prepared: PreparedAppend,
        failure: StepFailure,
        tries: int,
        maybe_committed: bool,
        first_sent: float,
    ) -> errors.MessageLogError:
        tried = f"{tries} {'try' if tries == 1 else 'tries'}"
        key, cause = prepared.retry_key(), failure.origin or failure
        if maybe_committed and prepared.producer is not None:
            # Go on as a new producer, so later appends (of any log object of the process)
            # do not push the call's result out of the old producer's window before the
            # caller retries it.
            self.producers.retire(prepared.producer)
        if maybe_committed:
            advice = (
                f"Retrying with idempotency_key={key!r} within {duration(prepared.window)} of "
                "the first try is safe."
                if key is not None
                else "It was not re-sent (retries are off and no idempotency_key was given)."
            )
            error: errors.MessageLogError = errors.AppendInDoubtError(
                f"connection lost after the append was sent to {self.keys.stream} "
                f"({tried}; last: {cause}); it may have committed. {advice}",
                idempotency_key=key,
            )
        else:
            elapsed = self.clock() - first_sent
            error = errors.ServerUnavailableError(
                f"Redis is unavailable ({tried} in {elapsed:.1f} s): {cause}. Nothing was written."
            )
        error.__cause__ = cause
        return error

    def eval_append(self, call: script.AppendCall, then: Command | None) -> Plan[Any]:
        """Run ``call``'s append script once (a write): ``EVALSHA`` first; a refusal to run
        it goes to the fallback, ``EVAL`` (see :meth:`ScriptRunner.run_script`)."""
        try:
            name, keys_and_args = call.script_and_args()
            sent = (*self.runner.evalsha(name), *keys_and_args)
            reply = yield Write(sent, then)
        except Refused as refused:
            if not script_not_run(refused):
                raise
            cached = refused.code != "NOSCRIPT"  # else the shebang: run_script sees to it
            reply = yield from self._fallback(call, then, cached)
        return reply

    def _fallback(self, call: script.AppendCall, then: Command | None, cached: bool) -> Plan[Any]:
        def write(command: Command) -> Plan[Any]:
            reply = yield Write(command, then)
            return reply

        return (yield from self.runner.run_script(*call.script_and_args(), write, cached=cached))


def _replace_look_up(call: script.AppendCall, producer: Producer | None) -> script.AppendCall:
    floor = call.floor if producer is None else producer.floor()
    return dataclasses.replace(call, look_up=True, floor=floor)
