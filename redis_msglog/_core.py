"""The I/O-free core shared by the sync and asyncio clients.

Every operation is a *plan* (see :mod:`redis_msglog._steps`): a generator that yields the
Redis commands it needs, receives their replies (or the outcome of a failed step), and
returns the result. The shells only carry steps to the server, so paging, script loading,
validation, retries and error mapping are written once, here, and tested without a
server (``tests/test_plans.py``). Nothing here reads a clock (it is injected), warns,
keeps process-wide state or touches a client library's exceptions.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from operator import itemgetter, methodcaller
from typing import Any, TypeVar

from pydantic import TypeAdapter, ValidationError

from . import _append_script as script
from . import _producer, errors
from ._args import check_int, check_seq, check_text, check_type, shown
from ._blobs import (
    DEFAULT_BLOB_THRESHOLD,
    BlobMode,
    blob_references,
    check_blob_mode,
    hydrate,
    offload,
    references,
)
from ._codec import decode_edit, decode_entry, decode_page, encode_message
from ._depth import MAX_JSON_DEPTH, too_deep_field
from ._durability import Durability
from ._keys import ConversationKeys
from ._producer import Producer
from ._retry import DEFAULT_RETRY, RetryPolicy
from ._scripts import LuaScript, load_script
from ._steps import Command, NotSent, Pause, Plan, Read, Refused, ReplyLost, StepFailure, Write
from ._views import AttrChanges, Edit, ViewReads, window_start
from .edits import VIEWS, Attributes, EditEntry, Entry, View
from .errors import InvalidArgumentError
from .models import AgentMessage, StoredMessage, describe_errors

DEFAULT_MAX_MESSAGE_BYTES = 8 * 1024 * 1024
DEFAULT_PAGE_SIZE = 1000
DEFAULT_IDEMPOTENCY_WINDOW = timedelta(hours=24)
MAX_IDEMPOTENCY_KEY_LENGTH = 256
MAX_PAGE_SIZE = 1_000_000  # entries per round trip: more is one huge reply, not a page
RETRY_KEY_PREFIX = "msglog-retry:"
"""How the key of an :class:`~redis_msglog.AppendInDoubtError` for an append made without
one begins: ``msglog-retry:<producer>:<pseq>:<fingerprint>``. Passed back as an
``idempotency_key``, it makes the call a try of the original one."""
_RETRY_KEY = re.compile(
    re.escape(RETRY_KEY_PREFIX) + r"([0-9a-f]{12}):([1-9][0-9]{0,14}):([0-9a-f]{16})"
)
Clock = Callable[[], float]
"""Seconds from a monotonic clock (the shells pass ``time.monotonic``)."""


# Not frozen (on every append's path: a frozen dataclass's __init__ costs ~0.15 µs a
# field); never changed after construction: dataclasses.replace() makes changed copies.
@dataclass(slots=True)
class Batch:
    """Validated, encoded messages ready to append."""

    messages: tuple[AgentMessage, ...]
    encoded: tuple[bytes, ...]  # as stored: large binaries replaced by references
    blobs: tuple[tuple[str, bytes], ...] = ()  # (SHA-256 hex, bytes) to store off the rows
    edit: Edit | None = None  # the edit written before the messages (docs/edits.md)
    attrs: AttrChanges | None = None  # attribute changes made with it
    blob_refs: str = ""  # "<message>.<part>:<sha256> ...": references to bytes it lacks

    def fingerprint(self) -> str:
        """A digest of the batch, stored with an idempotency record so that a key reused
        for a different batch is refused instead of answered with the wrong seqs."""
        digest = hashlib.blake2b(digest_size=16)
        if self.edit is not None:
            digest.update(repr((self.edit, self.attrs)).encode())
        for data in self.encoded:
            digest.update(len(data).to_bytes(8, "big"))
            digest.update(data)
        return digest.hexdigest()


# Not frozen (on every append's path: a frozen dataclass's __init__ costs ~0.15 µs a
# field); never changed after construction: dataclasses.replace() makes changed copies.
@dataclass(slots=True)
class Commit:
    """The result of an append: ``fresh`` is False when the server answered with an
    earlier call's result for the same idempotency key (nothing was written)."""

    last_seq: int
    at_micros: int
    fresh: bool
    not_durable: str | None = None  # what the log's durability found missing
    eviction_risk: str | None = None  # why the server may evict the log's keys (to warn)
    popped: Any = None  # a pop's entry, raw ([id, fields]), when the reply carries it
    replayed: bool = False  # answered from an idempotency record


# Not frozen (on every append's path: a frozen dataclass's __init__ costs ~0.15 µs a
# field); never changed after construction: dataclasses.replace() makes changed copies.
@dataclass(slots=True)
class PreparedAppend:
    """An append's script call, and what its tries share."""

    call: script.AppendCall
    batch: Batch
    idempotency_key: str | None  # the caller's key (or a retry key), if any
    window: timedelta  # how long the server remembers the call's result
    first_try_new: bool  # a producer's own call: its first try cannot have committed
    producer: Producer | None = None  # a producer's own call: the producer numbering it

    def settle(self) -> None:
        """No try of this call will be sent again: it leaves its producer's calls in flight."""
        if self.producer is not None:
            self.producer.settle(self.call.pseq)

    def retry_key(self) -> str | None:
        """The key that makes a later call a try of this one (``None``: there is none,
        retries being off and no key given)."""
        if self.idempotency_key is not None or not self.call.producer:
            return self.idempotency_key
        call = self.call
        return f"{RETRY_KEY_PREFIX}{call.producer}:{call.pseq}:{_short(self.batch)}"


class LogCore:
    """Everything a message log does, minus the I/O."""

    def __init__(
        self,
        conversation: str,
        *,
        prefix: str,
        max_message_bytes: int,
        page_size: int,
        retry: RetryPolicy = DEFAULT_RETRY,
        idempotency_window: timedelta = DEFAULT_IDEMPOTENCY_WINDOW,
        sharded_events: bool = False,
        ttl: timedelta | None = None,
        durability: Durability | None = None,
        blob_threshold: int | None = DEFAULT_BLOB_THRESHOLD,
        clock: Clock,
        producer: Producer | None = None,
    ) -> None:
        _require_positive("max_message_bytes", max_message_bytes)
        if blob_threshold is not None:
            _require_positive("blob_threshold", blob_threshold)
        if durability is not None:
            check_type("durability", durability, Durability, "a Durability or None")
        if ttl is not None and not _at_least(ttl, timedelta(seconds=1)):
            raise InvalidArgumentError(
                f"ttl must be None or a timedelta of at least 1 s, got {shown(ttl)}"
            )
        check_int("page_size", page_size, lowest=1, highest=MAX_PAGE_SIZE)
        check_type("retry", retry, RetryPolicy, "a RetryPolicy")
        if not _at_least(idempotency_window, timedelta(milliseconds=1)):
            raise InvalidArgumentError(
                "idempotency_window must be a timedelta of at least 1 ms, "
                f"got {shown(idempotency_window)}"
            )
        self.conversation = conversation
        self.keys = ConversationKeys.build(prefix, conversation)
        self.max_message_bytes = max_message_bytes
        self.page_size = page_size
        self.retry = retry
        self.idempotency_window = idempotency_window
        self.ttl = ttl
        self.durability = durability
        self.clock = clock
        self.blob_threshold = blob_threshold
        self._durability_checked = durability is None or not durability.aof
        # The idempotent producer numbering this log's calls: the process's (None), shared
        # by every log object of it, so that their records do not grow with the objects.
        self._own_producer = producer
        self._scripts: dict[str, LuaScript] = {
            name: load_script(name) for name in ("append.lua", "view.lua")
        }
        self.edited = False  # seen to have edits: view reads go to the view script
        self.views = ViewReads(self)
        # Sharded pub/sub on a cluster: the event goes to the conversation's own shard.
        self._publish = "SPUBLISH" if sharded_events else "PUBLISH"

    # -- writing -------------------------------------------------------------------

    def batch(
        self,
        msgs: Iterable[AgentMessage | Mapping[str, Any]],
        edit: Edit | None = None,
        attrs: Mapping[str, str | None] | None = None,
    ) -> Batch:
        """Validate and encode ``msgs`` (written after ``edit``, if any, which also
        changes ``attrs``); raise before anything is sent if any is bad."""
        changes = None if attrs is None else AttrChanges.of(attrs)
        if changes is not None and edit is None:
            edit = changes.entry()
        if type(msgs) is not tuple and (
            isinstance(msgs, (str, bytes, Mapping, AgentMessage)) or not isinstance(msgs, Iterable)
        ):
            raise errors.InvalidMessageError(
                f"expected a sequence of messages, got {type(msgs).__name__}"
            )
        messages = _coerce_all(msgs)
        encoded = []
        blobs: dict[str, bytes] = {}
        refs: list[tuple[int, int, str]] = []
        for index, msg in enumerate(messages):
            _check_depth(msg, index)
            stored, offloaded = offload(msg, self.blob_threshold)
            blobs.update(offloaded)
            if not isinstance(stored.content, str):
                refs += blob_references(index, stored.content)
            try:
                data = encode_message(stored)
            except errors.CodecError as exc:
                raise errors.CodecError(f"message {index}: {exc}") from exc
            if len(data) > self.max_message_bytes:
                raise errors.MessageTooLargeError(
                    f"message {index} encodes to {len(data)} bytes, over the limit of "
                    f"{self.max_message_bytes} (max_message_bytes, after moving binaries "
                    f"over {self.blob_threshold} bytes off the row)"
                )
            encoded.append(data)
        # The references whose bytes this call does not bring: the script checks that the
        # conversation holds them (only the server can tell, atomically with the write).
        held = " ".join(f"{i}.{p}:{d}" for i, p, d in refs if d not in blobs) if refs else ""
        return Batch(messages, tuple(encoded), tuple(blobs.items()), edit, changes, held)

    def append_plan(
        self,
        batch: Batch,
        idempotency_key: str | None,
        *,
        expected_seq: int | None = None,
        check_eviction: bool = False,
    ) -> Plan[Commit]:
        """Append a non-empty batch in one script call, re-sent under the retry policy.

        Every try carries the same identity (the caller's idempotency key, or, when
        retries are enabled, the process's producer id and the call's number), so a re-send
        after a lost reply returns the committed result instead of writing the batch twice.
        """
        prepared = self._prepare(batch, idempotency_key, expected_seq)
        started = self.clock()  # the deadline counts the checks below too
        try:
            risk = (yield from self._eviction_risk()) if check_eviction else None
            if not self._durability_checked:
                yield from self._check_durability_support()
        except BaseException:
            prepared.settle()  # never sent
            raise
        commit = yield from self._send_until_answered(prepared, None, started)
        return commit if risk is None else dataclasses.replace(commit, eviction_risk=risk)

    # The quick lane: most appends (a producer's call, or one with retries off, once the
    # client's eviction policy and the log's durability support have been checked) need
    # no plan for their first try. The shell sends :meth:`quick_command` itself and hands
    # the reply to :meth:`quick_commit`, or the failure to :meth:`quick_failed`, which
    # goes on exactly as :meth:`append_plan` would have. A plan costs a few generators and
    # steps per call: ~10% of an append on a local server.

    def quick_append(
        self, batch: Batch, idempotency_key: str | None, expected_seq: int | None
    ) -> PreparedAppend | None:
        """The first try of an append the shell may send without a plan, or ``None``
        (a caller's idempotency key, or a durability wait: see :meth:`append_plan`)."""
        if idempotency_key is not None or self.durability is not None:
            return None
        return self._prepare(batch, None, expected_seq)

    def quick_command(self, prepared: PreparedAppend) -> Command:
        """The command of a quick append's first try."""
        return ("EVALSHA", self._scripts["append.lua"].sha, *prepared.call.keys_and_args())

    def quick_commit(self, prepared: PreparedAppend, reply: Any) -> Commit:
        """The result of a quick append the server answered."""
        prepared.settle()
        return self._commit_of(reply, None, prepared.call.call)

    def quick_failed(
        self, prepared: PreparedAppend, failure: StepFailure, first_sent: float
    ) -> Plan[Commit]:
        """The rest of a quick append whose first try (sent at ``first_sent``) failed:
        re-sent, looked up or refused as :meth:`append_plan` does after a failed try (a
        script not cached goes round once more, to the ``EVAL`` fallback)."""
        if isinstance(failure, Refused):
            if not _script_not_run(failure):
                prepared.settle()
                raise script.error_for(failure, self.keys) from failure.origin
            return (yield from self._send_until_answered(prepared))  # as if never sent
        return (yield from self._send_until_answered(prepared, failure, first_sent))

    def _prepare(
        self, batch: Batch, idempotency_key: str | None, expected_seq: int | None
    ) -> PreparedAppend:
        """The script call for ``batch``, with the identity its tries share (if any)."""
        if expected_seq is not None:
            require_seq("expected_seq", expected_seq)
        window = self.idempotency_window
        record, producer, pseq, first_try_new = None, "", 0, False
        numbered_by: Producer | None = None
        floor: int | None = None
        # A call with a key gets a token, kept with its result: a replay then tells "my own
        # lost try committed" from "another call committed". A producer's own calls need
        # none (the pair is the call's: their replays carry ""), nor do unrecorded ones.
        token = ""
        if idempotency_key is not None:
            _check_idempotency_key(idempotency_key)
            token = os.urandom(8).hex()
            resumed = _RETRY_KEY.fullmatch(idempotency_key)
            if resumed is None:
                record = self.keys.idempotency_record(idempotency_key)
            else:  # the key of an AppendInDoubtError: a try of that producer's call
                producer, pseq_text, short = resumed.groups()
                if short != _short(batch):
                    raise errors.IdempotencyConflictError(
                        f"idempotency key {idempotency_key!r} was made for a different batch "
                        "of messages. Nothing was written."
                    )
                pseq, window = int(pseq_text), self.retry.generated_key_ttl
        elif self.retry.retries:
            numbered_by = self.producer()
            pseq, floor = numbered_by.begin()
            producer, window, first_try_new = numbered_by.id, self.retry.generated_key_ttl, True
        if self.ttl is not None:
            window = min(window, self.ttl)  # a record never outlives its conversation
        call = script.AppendCall(
            keys=self.keys,
            messages=batch.encoded,
            blobs=batch.blobs,
            call=token,
            publish=self._publish,
            record=record,
            record_ttl_ms=_millis(window),
            fingerprint=batch.fingerprint() if record is not None else "",
            look_up=not first_try_new,
            ttl_ms=None if self.ttl is None else _millis(self.ttl),
            expected_seq=expected_seq,
            producer=producer,
            pseq=pseq,
            floor=floor,
            blob_refs=batch.blob_refs,
        )
        if batch.edit is not None:
            edit = batch.edit
            call = dataclasses.replace(
                call,
                op=edit.op,
                op_arg=edit.arg,
                entry=edit.entry,
                attrs=batch.attrs.pairs if batch.attrs else (),
                attrs_json=batch.attrs.json if batch.attrs else b"",
            )
        return PreparedAppend(call, batch, idempotency_key, window, first_try_new, numbered_by)

    def producer(self) -> Producer:
        """The producer numbering this log's next call without a key."""
        return self._own_producer or _producer.current()

    def _hand_over(self, prepared: PreparedAppend) -> None:
        """Before a call that may have committed is re-sent, new calls go to a new producer:
        the old one's window then holds only the calls already in flight, so later commits
        cannot push this call's result out of it (MSGLOG_STALE) however long it is retried.
        A try never sent has no result to protect: retiring the process's producer for it
        would add a producer field per backoff round of an outage (issue 23, item 6)."""
        if prepared.producer is not None:
            self._retire(prepared.producer)

    def _retire(self, producer: Producer) -> None:
        """Go on as a new producer (see :func:`redis_msglog._producer.retire`)."""
        if self._own_producer is producer:
            self._own_producer = Producer()
        else:
            _producer.retire(producer)

    def _send_until_answered(
        self,
        prepared: PreparedAppend,
        failed: StepFailure | None = None,
        first_sent: float | None = None,
    ) -> Plan[Commit]:
        """Send the script until the server answers, re-sending while the retry policy
        allows and a re-send is safe (the idempotency record surely still there).
        ``failed``: how a first try, sent at ``first_sent``, already failed."""
        in_doubt = False
        try:
            return (yield from self._send_tries(prepared, failed, first_sent))
        except errors.AppendInDoubtError as error:
            in_doubt = error.idempotency_key is not None
            raise
        finally:
            # Settled: no try of it will be sent again. One in doubt stays in flight for
            # good (its producer retired), so that the server keeps its result for a retry.
            if not in_doubt:
                prepared.settle()

    def _send_tries(
        self, prepared: PreparedAppend, failed: StepFailure | None, first_sent: float | None
    ) -> Plan[Commit]:
        call, then = prepared.call, None if self.durability is None else self.durability.command()
        first_sent = self.clock() if first_sent is None else first_sent
        tries = 0 if failed is None else 1
        failure: StepFailure | None = failed
        maybe_committed = isinstance(failed, ReplyLost)
        while True:
            if tries:
                if not (yield from self._pause(prepared, tries, first_sent, maybe_committed)):
                    break
                # Once a try may have reached the server, look the call up. Not before: a
                # call no try of which was sent (a busy pool, a refused connect) never ran,
                # and a look-up could only call it in doubt (MSGLOG_STALE, when later calls
                # of the producer committed first and moved its window past it).
                if prepared.first_try_new and maybe_committed:
                    call = _replace_look_up(call, prepared.producer)
            tries += 1
            try:
                reply = yield from self._eval(call.keys_and_args(), then)
            except ReplyLost as lost:
                maybe_committed, failure = True, lost
            except NotSent as not_sent:
                failure = not_sent  # nothing ran: no connection, or the cluster refused it
            except Refused as refused:
                raise script.error_for(refused, self.keys) from refused.origin
            else:
                return self._commit_of(reply, then, call.call)
        assert failure is not None
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

    def _commit_of(self, reply: Any, then: Command | None, call: str) -> Commit:
        answer, waited = reply if then else (reply, None)
        parsed = script.AppendReply.parse(answer)
        # A replay of this very call's commit (a try whose reply was lost) is fresh; a
        # replay of another call's is not: its hook has already fired there.
        fresh = not parsed.replayed or parsed.writer == call
        missing = None if self.durability is None else self.durability.shortfall(waited)
        return Commit(
            parsed.last_seq,
            parsed.at_micros,
            fresh,
            missing,
            popped=parsed.popped,
            replayed=parsed.replayed,
        )

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
            self._retire(prepared.producer)
        if maybe_committed:
            advice = (
                f"Retrying with idempotency_key={key!r} within {prepared.window} of the first "
                "try is safe."
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

    def _eval(self, keys_and_args: Command, then: Command | None) -> Plan[Any]:
        """Run the append script once (a write): ``EVALSHA`` first, straight from here
        (every append takes this path); a refusal goes to :meth:`run_script`, which
        falls back to ``EVAL`` when the script is not cached."""
        try:
            reply = yield Write(("EVALSHA", self._scripts["append.lua"].sha, *keys_and_args), then)
        except Refused as refused:
            if not _script_not_run(refused):
                raise

            def write(command: Command) -> Plan[Any]:
                reply = yield Write(command, then)
                return reply

            cached = refused.code != "NOSCRIPT"  # else the shebang: run_script sees to it
            reply = yield from self.run_script("append.lua", keys_and_args, write, cached=cached)
        return reply

    def run_script(
        self,
        name: str,
        keys_and_args: Command,
        send: Callable[[Command], Plan[Any]],
        *,
        cached: bool = True,
    ) -> Plan[Any]:
        """Run a script through ``send``: EVALSHA, falling back to EVAL when it is not
        cached, and to the script without its shebang on servers that cannot parse one.
        ``cached=False``: EVALSHA was already refused with NOSCRIPT; start with EVAL."""
        lua, send_body = self._scripts[name], not cached
        while True:
            command = ("EVAL", lua.body) if send_body else ("EVALSHA", lua.sha)
            try:
                reply = yield from send((*command, *keys_and_args))
                return reply
            except Refused as refused:
                if refused.code == "NOSCRIPT" and not send_body:
                    # Not cached (restart, failover, SCRIPT FLUSH): nothing ran, so EVAL is
                    # safe. EVAL also caches it for the next EVALSHA.
                    send_body = True
                    continue
                plain = lua.without_shebang()
                # fakeredis and Redis < 7 compile the `#!lua` line as Lua and fail on it.
                if plain is lua or "near '#'" not in refused.text:
                    raise
                self._scripts[name] = lua = plain
                send_body = True

    def _check_durability_support(self) -> Plan[None]:
        """Before the first append under ``Durability(aof=True)``: refuse (writing nothing)
        if the server has no ``WAITAOF`` or runs with ``appendonly no``. A server that
        does not let us look (ACL) is given the benefit of the doubt."""
        info = yield from self._optional_read(("COMMAND", "INFO", "WAITAOF"), patient=True)
        if info is not None and (not info or info[0] is None):
            raise errors.DurabilityUnsupportedError(
                "Durability(aof=True) needs WAITAOF (Redis 7.2+ or Valkey); this server has "
                "none. Nothing was written."
            )
        # INFO, not CONFIG GET: the documented ACL user may read it (docs/durability.md).
        info = yield from self._optional_read(("INFO", "persistence"), patient=True)
        if _info_field(info, "aof_enabled") == "0":
            raise errors.DurabilityUnsupportedError(
                "Durability(aof=True) needs appendonly yes on the server; it is off, so "
                "WAITAOF could never succeed. Nothing was written."
            )
        self._durability_checked = True

    def _eviction_risk(self) -> Plan[str | None]:
        """Why the server may evict this library's keys under memory pressure, or
        ``None``. Silent when ``INFO`` is not allowed or the server is away (the
        append itself reports that)."""
        try:
            reply = yield from self._optional_read(("INFO", "memory"), patient=False)
        except errors.ServerUnavailableError:
            return None
        policy = _info_field(reply, "maxmemory_policy")
        if policy.startswith("allkeys-") or (policy.startswith("volatile-") and self.ttl):
            return (
                f"maxmemory-policy is {policy}: under memory pressure Redis may evict a "
                f"conversation's keys (a lost counter heals from the stream; a lost stream "
                f"loses the conversation). Message logs want noeviction."
            )
        return None

    def _optional_read(self, command: Command, *, patient: bool) -> Plan[Any]:
        """The reply, or ``None`` if the server refuses the command (ACL, unknown). Re-sent
        under the retry policy if ``patient``, else tried once."""
        try:
            (reply,) = yield from self.read_raw((command,), patient=patient)
        except Refused as refused:
            if refused.code in ("NOAUTH", "WRONGPASS"):  # the call itself would fail so
                raise script.error_for(refused, self.keys) from refused.origin
            return None
        except NotSent as failure:
            raise self.error_for(failure) from (failure.origin or failure)
        return reply

    def check_expected(self, count: int, expected_seq: int | None) -> None:
        """For an empty batch with ``expected_seq``: the same verdict as the script's."""
        if expected_seq is not None:
            require_seq("expected_seq", expected_seq)
            if count != expected_seq:
                raise errors.SeqConflictError(
                    f"{count} is the last seq of {self.keys.stream}, not {expected_seq}: "
                    "another writer appended first. Nothing was written.",
                    current_seq=count,
                )

    def raise_if_not_durable(self, batch: Batch, commit: Commit) -> None:
        """After the hook has run: report a durability shortfall as an error."""
        if commit.not_durable is not None:
            first = commit.last_seq - len(batch.encoded) + 1
            raise errors.NotDurableError(
                f"committed as seq {first}..{commit.last_seq} in {self.keys.stream}, but "
                f"{commit.not_durable}",
                last_seq=commit.last_seq,
            )

    def committed_rows(self, batch: Batch, commit: Commit) -> list[StoredMessage]:
        """The rows of a committed batch exactly as a reader will decode them (binaries
        stored off the rows put back)."""
        first = commit.last_seq - len(batch.encoded) + 1
        at = str(commit.at_micros)
        rows = [decode_entry(first + i, at, data) for i, data in enumerate(batch.encoded)]
        return hydrate(rows, dict(batch.blobs)) if batch.blobs else rows

    def popped_plan(self, commit: Commit, blobs: BlobMode) -> Plan[StoredMessage | None]:
        """The message a pop hid: from the script's reply, or, for a replay (whose reply
        does not carry it), read back through the retract entry the pop wrote."""
        if commit.popped is not None:
            rows = self.decode_entries([commit.popped])
        elif commit.replayed:
            (entries,) = yield from self._read(self._xrange(commit.last_seq, 1))
            edit = self.decode_physical(entries)[0]
            if not isinstance(edit, EditEntry) or not edit.seqs:
                raise errors.CorruptLogError(
                    f"entry {commit.last_seq} of {self.keys.stream}, recorded as a pop, is "
                    "not a retraction"
                )
            (entries,) = yield from self._read(self._xrange(edit.seqs[0], 1))
            rows = self.decode_entries(entries)
        else:
            return None  # the view was empty: nothing written
        return (yield from self.with_blobs(rows, blobs))[0]

    def with_blobs(self, rows: list[StoredMessage], mode: BlobMode) -> Plan[list[StoredMessage]]:
        """``rows`` with the binaries stored off them put back (``mode="hydrate"``: one more
        round trip, only when a row refers to one), or as references (``"refs"``)."""
        check_blob_mode(mode)
        digests = references(rows) if mode == "hydrate" else []
        if not digests:
            return rows
        (values,) = yield from self._read(("HMGET", self.keys.blobs, *digests))
        missing = [d for d, value in zip(digests, values, strict=True) if value is None]
        if missing:
            seqs = [r.seq for r in rows if set(references([r])) & set(missing)]
            raise errors.CorruptLogError(
                f"blob {missing[0]} of {self.keys.blobs}, referred to by seq {seqs[0]}, is "
                f"missing ({len(missing)} missing in all): deleted by hand? See `msglog verify`"
            )
        return hydrate(rows, dict(zip(digests, values, strict=True)))

    # -- reading -------------------------------------------------------------------

    def count_plan(self, view: View | None = None) -> Plan[int]:
        """The seq counter (``view`` None or ``"physical"``), checked against the stream
        in the same round trip: garbage, or a counter that disagrees with the number of
        entries, is a :class:`~redis_msglog.CorruptLogError`. A missing counter (deleted
        or evicted) counts to the stream's last entry, where the next append continues.

        With another ``view``: the number of its rows (on an edit-free log, the counter;
        ``"archived"``: 0)."""
        if view is not None:
            check_view(view, physical=True)
        if view in (None, "physical") or not self.edited:
            probe = view not in (None, "physical")
            try:
                before, raw, after = yield from self._first_read(probe, *self._counter_commands())
            except EditsPresent:
                self.edited = True
            else:
                if view == "archived":
                    return 0
                if raw is None:
                    return 0 if not after else (yield from self._stream_end())
                return self._checked_counter(raw, before, after)
        assert view in ("visible", "active", "archived")
        return (yield from self.views.count_plan(view))

    def attrs_plan(self) -> Plan[Attributes]:
        """The conversation's attributes and its last seq, in one round trip."""
        fields, before, raw, after = yield from self._read(
            ("HGETALL", self.keys.view), *self._counter_commands()
        )
        if raw is None:
            last = 0 if not after else (yield from self._stream_end())
        else:
            last = self._checked_counter(raw, before, after)
        pairs = (
            fields.items()
            if isinstance(fields, Mapping)
            else zip(fields[::2], fields[1::2], strict=True)
        )
        values = {
            _text(name)[2:]: _text(value) for name, value in pairs if _text(name).startswith("a:")
        }
        return Attributes(values, last)

    def _counter_commands(self) -> tuple[Command, Command, Command]:
        # A sound log has one entry per seq: XLEN == counter. Other workers may append
        # between these pipelined commands, so the counter is compared with the entries
        # counted before it (never more) and after it (never fewer). Three O(1) commands.
        length = ("XLEN", self.keys.stream)
        return length, ("GET", self.keys.seq), length

    def _checked_counter(self, raw: bytes | str, before: int, after: int) -> int:
        high = self._counter(raw)
        if high < before:
            raise errors.CorruptLogError(
                f"seq counter {self.keys.seq} ({high}) is behind stream {self.keys.stream}, "
                f"which has {before} entries (the counter was set by hand?)"
            )
        if high > after:
            raise errors.CorruptLogError(
                f"stream {self.keys.stream} has {after} entries but its seq counter says "
                f"{high}: entries were deleted (XDEL?), or the counter was moved ahead"
            )
        return high

    def read_plan(
        self, after: int, limit: int | None, blobs: BlobMode = "hydrate", view: View = "visible"
    ) -> Plan[list[StoredMessage]]:
        """The rows of ``view`` whose seq is above ``after``, in view order, at most
        ``limit`` (docs/edits.md). An edit-free log's view is its stream: read with
        ``XRANGE``, a gap-free run or an error (see :meth:`_range_plan`); a log with edits
        is read by the view script."""
        check_view(view, physical=False)
        require_seq("after", after)
        if limit is not None:
            require_non_negative("limit", limit)
        if not self.edited:
            try:
                rows = yield from self._range_plan(after, limit, self.decode_entries, probe=True)
                return [] if view == "archived" else (yield from self.with_blobs(rows, blobs))
            except EditsPresent:
                self.edited = True
        rows = yield from self.views.read_plan(view, after, limit)
        return (yield from self.with_blobs(rows, blobs))

    def physical_read_plan(
        self, after: int, limit: int | None, blobs: BlobMode = "hydrate"
    ) -> Plan[list[Entry]]:
        """Every entry with seq above ``after``, messages and edits, in seq order."""
        require_seq("after", after)
        if limit is not None:
            require_non_negative("limit", limit)
        entries = yield from self._range_plan(after, limit, self.decode_physical, probe=False)
        return (yield from self.entries_with_blobs(entries, blobs))

    def _range_plan(
        self,
        after: int,
        limit: int | None,
        decode: Callable[[list[Any]], list[R]],
        *,
        probe: bool,
    ) -> Plan[list[R]]:
        """Entries with seq > ``after``, in order, at most ``limit``: a gap-free run
        that starts at ``after + 1``, or an error; never a silent gap or truncation.

        One page is one ``XRANGE`` (atomic). Longer reads are bounded by the seq counter
        read in the first round trip, so they end even while other workers append, and
        they reach it: a stream that ends before its counter is a
        :class:`~redis_msglog.CorruptLogError`, as is a counter behind the stream.
        ``probe``: also ask, in the first round trip, whether the log has edits (then
        :class:`EditsPresent` is raised: the caller reads the view instead).
        """
        if limit == 0:
            return []
        if limit is not None and limit <= self.page_size:
            (entries,) = yield from self._first_read(probe, self._xrange(after + 1, limit))
            rows = self._contiguous(decode(entries), after + 1)
            if not rows and after:
                yield from self._check_cursor(after)
            return rows
        want = self.page_size if limit is None else min(limit, self.page_size)
        before, raw_high, length, entries = yield from self._first_read(
            probe, *self._counter_commands(), self._xrange(after + 1, want)
        )
        high = None if raw_high is None else self._checked_counter(raw_high, before, length)
        rows = self._contiguous(decode(entries), after + 1)
        while len(entries) == want and (limit is None or len(rows) < limit):
            if high is not None and rows[-1].seq >= high:
                break
            want = self.page_size if limit is None else min(self.page_size, limit - len(rows))
            (entries,) = yield from self._read(self._xrange(rows[-1].seq + 1, want))
            rows.extend(self._contiguous(decode(entries), rows[-1].seq + 1))
        if not rows and after:
            yield from self._check_cursor(after)
        reached = rows[-1].seq if rows else after
        if high is not None and reached < high and (limit is None or len(rows) < limit):
            raise errors.CorruptLogError(
                f"stream {self.keys.stream} ends at seq {reached} but its seq counter says "
                f"{high}: entries were deleted, or the counter was moved ahead"
            )
        return rows

    def _first_read(self, probe: bool, *commands: Command) -> Plan[list[Any]]:
        """One round trip of ``commands``, with (``probe``) the question whether the log
        has edits in front: :class:`EditsPresent` if it has."""
        if not probe:
            return (yield from self._read(*commands))
        version, *replies = yield from self._read(("HGET", self.keys.view, "version"), *commands)
        if version not in _NO_EDITS:  # the seq of the last edit, 0 (or none) before one
            raise EditsPresent
        return replies

    def _check_cursor(self, after: int) -> Plan[None]:
        """An empty read after ``after``: fine if the log ends exactly there; an error if
        it ends before (a rewound log, or a cursor from another log)."""
        end = yield from self._stream_end()
        if end < after:
            raise errors.LogRewoundError(
                f"cursor {after} is beyond the end of {self.keys.stream} (last seq {end}): the "
                "log was rewound (a failover lost acknowledged appends?) or the cursor belongs "
                "to another log"
            )

    def _stream_end(self) -> Plan[int]:
        """The seq of the stream's last entry (0 when there is none)."""
        (newest,) = yield from self._read(("XREVRANGE", self.keys.stream, "+", "-", "COUNT", 1))
        rows = self.decode_physical(newest)
        return rows[0].seq if rows else 0

    def last_plan(
        self, n: int, blobs: BlobMode = "hydrate", view: View = "visible"
    ) -> Plan[list[StoredMessage]]:
        """The last ``n`` rows of ``view`` in view order (fewer only when it has fewer).
        On an edit-free log: a gap-free run that ends at the stream's last entry."""
        check_view(view, physical=False)
        require_non_negative("n", n)
        if n == 0:
            return []
        if not self.edited:
            try:
                rows = yield from self._tail_plan(n, self.decode_entries, probe=True)
                return [] if view == "archived" else (yield from self.with_blobs(rows, blobs))
            except EditsPresent:
                self.edited = True
        rows = yield from self.views.last_plan(view, n)
        return (yield from self.with_blobs(rows, blobs))

    def physical_last_plan(self, n: int, blobs: BlobMode = "hydrate") -> Plan[list[Entry]]:
        """The last ``n`` entries, messages and edits, in seq order."""
        require_non_negative("n", n)
        if n == 0:
            return []
        entries = yield from self._tail_plan(n, self.decode_physical, probe=False)
        return (yield from self.entries_with_blobs(entries, blobs))

    def _tail_plan(
        self, n: int, decode: Callable[[list[Any]], list[R]], *, probe: bool
    ) -> Plan[list[R]]:
        """The last ``n`` entries in seq order: a gap-free run that ends at the stream's
        last entry (fewer only when the log has fewer)."""
        want = min(n, self.page_size)
        (entries,) = yield from self._first_read(
            probe, ("XREVRANGE", self.keys.stream, "+", "-", "COUNT", want)
        )
        newest_first = self._contiguous(decode(entries), None, step=-1)
        while len(entries) == want and len(newest_first) < n and newest_first[-1].seq > 1:
            want = min(self.page_size, n - len(newest_first))
            below = newest_first[-1].seq - 1
            # "<below>" is an incomplete ID: as an end, "<below>-<max>", so the entry of
            # seq ``below`` is in, whatever its commit time (the second part of its ID).
            (entries,) = yield from self._read(
                ("XREVRANGE", self.keys.stream, str(below), "-", "COUNT", want)
            )
            newest_first.extend(self._contiguous(decode(entries), below, step=-1))
        if len(newest_first) < n and newest_first and newest_first[-1].seq > 1:
            self._gap(1, newest_first[-1].seq - 1)  # the log starts after seq 1
        newest_first.reverse()
        return newest_first

    def window_plan(
        self,
        view: View,
        *,
        turns: int | None = None,
        budget: int | None = None,
        counter: Callable[[StoredMessage], int] | None = None,
    ) -> Plan[list[StoredMessage]]:
        """A window of the view's tail that never splits a tool call from its result (see
        :func:`._views.window_start`): reads a page of the tail, and twice as much
        until the window fits or the view is read whole."""
        want = self.page_size
        while True:
            rows = yield from self.last_plan(want, "hydrate", view)
            start = window_start(rows, turns=turns, budget=budget, counter=counter)
            if start is not None:
                return rows[start:]
            if len(rows) < want:
                return rows  # the whole view fits
            want *= 2

    def _contiguous(self, rows: list[R], first: int | None, *, step: int = 1) -> list[R]:
        """``rows`` if their seqs run ``first, first + step, ...`` (``first`` None: from
        the first row's); a missing seq is a :class:`~redis_msglog.CorruptLogError`."""
        if not rows:
            return rows
        expected = rows[0].seq if first is None else first
        # Entry IDs come back strictly ordered, so the run is contiguous exactly when its
        # ends are: one check per page; the loop below only finds the first gap.
        if rows[0].seq == expected and rows[-1].seq == expected + step * (len(rows) - 1):
            return rows
        for row in rows:
            if row.seq != expected:
                assert expected is not None
                if row.seq == expected - step:
                    self.twice(row.seq)
                low, high = sorted((expected, row.seq - step))
                self._gap(low, high)
            expected = row.seq + step
        return rows

    def twice(self, seq: int) -> None:
        """Raise: two entries of ``seq`` (IDs ``<seq>-<at>`` can differ in their time)."""
        raise errors.CorruptLogError(
            f"stream {self.keys.stream} holds two entries of seq {seq} (added by hand?): the "
            "log is not one entry per seq; see `msglog verify`"
        )

    def _gap(self, low: int, high: int) -> None:
        missing = f"seq {low}" if low == high else f"seqs {low}..{high}"
        raise errors.CorruptLogError(
            f"stream {self.keys.stream} is missing {missing} (deleted or trimmed by hand?): "
            "the log is not gap-free; see `msglog verify`"
        )

    def _counter(self, raw: bytes | str) -> int:
        """The seq counter's value, if it is exactly what the append script accepts."""
        value = parse_seq_counter(raw)
        if value is None:
            raise errors.CorruptLogError(
                f"seq counter {self.keys.seq} holds {_text(raw)!r}, not a seq (set by hand?)"
            )
        return value

    # -- helpers -------------------------------------------------------------------

    def error_for(self, failure: StepFailure) -> errors.MessageLogError:
        """This library's error for a step that failed for good (its cause: the client
        library's exception, when there is one)."""
        if isinstance(failure, Refused):
            error = script.error_for(failure, self.keys)
        else:
            error = errors.ServerUnavailableError(f"Redis is unavailable: {failure.text}")
        error.__cause__ = failure.origin or failure
        return error

    def _read(self, *commands: Command) -> Plan[list[Any]]:
        """One round trip, re-sent under the retry policy while the server cannot serve
        it; a failure for good raises this library's error."""
        try:
            return (yield from self.read_raw(commands, patient=True))
        except StepFailure as failure:
            raise self.error_for(failure) from (failure.origin or failure)

    def read_raw(self, commands: tuple[Command, ...], *, patient: bool) -> Plan[list[Any]]:
        """One round trip; re-sent (when ``patient``) after failures that left it unrun.
        Reads are idempotent, so any such failure may be retried."""
        started, tries = self.clock(), 0
        while True:
            tries += 1
            try:
                replies: list[Any] = yield Read(commands)
                return replies
            except NotSent:
                delay = self.retry.pause_before(tries, self.clock() - started)
                if not patient or delay is None:
                    raise
            yield Pause(delay)

    def _xrange(self, start_seq: int, count: int) -> Command:
        # As a start, "<seq>-0" is below every entry of that seq: "<seq>-<at>", and an
        # older entry's "<seq>-0".
        return ("XRANGE", self.keys.stream, f"{start_seq}-0", "+", "COUNT", count)

    def decode_entries(self, entries: list[Any]) -> list[StoredMessage]:
        """Rows of a raw ``XRANGE``/``XREVRANGE`` reply (``[id, [field, value, ...]]``);
        an entry the library did not write raises :class:`~redis_msglog.CorruptEntryError`.

        An entry is ID ``<seq>-<at>`` (the commit time, in microseconds) with one field,
        ``msg``; or, written by earlier versions, ID ``<seq>-0`` with fields ``at`` and
        ``msg``."""
        if not entries:
            return []
        # One check per page: the client returns all bytes or all str.
        at_key, msg_key, sep = ("at", "msg", "-") if isinstance(entries[0][0], str) else _BYTES
        # The common case, a page of entries as the append script writes them, is checked
        # and decoded without a Python loop per entry (map/itemgetter run in C), then
        # validated in one call; anything else (a page mixing both formats, edits, foreign
        # entries) takes the row-by-row path below, which names the first entry that is not
        # a message.
        ids = list(map(_first, entries))
        fields = list(map(_second, entries))
        lengths = set(map(len, fields))
        zero = sep + _ZERO[sep]
        if (
            lengths == {2}
            and set(map(_first, fields)) == {msg_key}
            and not any(map(methodcaller("endswith", zero), ids))
        ):
            parts = list(map(methodcaller("partition", sep), ids))
            seqs = list(map(int, map(_first, parts)))  # stream IDs: two integers
            return decode_page(seqs, list(map(_third, parts)), list(map(_second, fields)))
        if (
            lengths == {4}
            and all(map(methodcaller("endswith", zero), ids))
            and set(map(_first, fields)) == {at_key}
            and set(map(_third, fields)) == {msg_key}
        ):
            seqs = list(map(int, map(methodcaller("removesuffix", zero), ids)))
            return decode_page(seqs, list(map(_second, fields)), list(map(_fourth, fields)))
        return self.decode_entries_one_by_one(entries)

    def decode_entries_one_by_one(self, entries: list[Any]) -> list[StoredMessage]:
        """:meth:`decode_entries` without the page path: what it must equal, row for row
        and error for error (the reference of the property tests)."""
        if not entries:
            return []
        at_key, msg_key, sep = ("at", "msg", "-") if isinstance(entries[0][0], str) else _BYTES
        rows = []
        for entry_id, fields in entries:
            seq_part, _, tail = entry_id.partition(sep)
            if len(fields) == 2 and fields[0] == msg_key:
                at, body, field = tail, fields[1], False
            elif len(fields) == 4 and fields[0] == at_key and fields[2] == msg_key:
                at, body, field = fields[1], fields[3], True
            else:  # other field orders, edits, missing or foreign fields
                named = dict(zip(fields[::2], fields[1::2], strict=False))
                field = at_key in named
                at, body = named.get(at_key, tail), named.get(msg_key)
                if body is None and _EDIT_FIELDS & named.keys() and field == (tail in _ZEROS):
                    raise EditsPresent  # a view read of a log with edits: see read_plan
            # The commit time is in an "at" field exactly when the ID is "<seq>-0".
            if body is None or field != (tail in _ZEROS):
                raise errors.CorruptEntryError(
                    f"stream {self.keys.stream} entry {_text(entry_id)} was not written by "
                    f"redis-msglog (expected ID <seq>-<at> and field 'msg', or an earlier "
                    f"version's ID <seq>-0 and fields 'at' and 'msg')",
                    seq=int(seq_part),
                )
            rows.append(decode_entry(int(seq_part), at, body))
        return rows

    def decode_physical(self, entries: list[Any]) -> list[Entry]:
        """Entries of a raw ``XRANGE``/``XREVRANGE`` reply, messages and edits."""
        rows: list[Entry] = []
        start = 0
        for index, (entry_id, fields) in enumerate(entries):
            if len(fields) == 2 and fields[0] in _MSG_FIELD:
                continue  # a message as the script writes it: decoded with its page
            if len(fields) == 4 and fields[0] in _AT_FIELD and fields[2] in _MSG_FIELD:
                continue  # the same, written by an earlier version
            named = dict(zip(fields[::2], fields[1::2], strict=False))
            edit = named.get("edit", named.get(b"edit"))
            if edit is None:
                continue
            rows.extend(self.decode_entries(entries[start:index]))
            rows.append(self._decode_edit(entry_id, named, edit))
            start = index + 1
        rows.extend(self.decode_entries(entries[start:]))
        return rows

    def _decode_edit(self, entry_id: bytes | str, named: dict[Any, Any], edit: Any) -> EditEntry:
        """An edit entry: ID ``<seq>-<at>`` and field ``edit`` alone, or (an earlier
        version's) ID ``<seq>-0`` and fields ``at`` and ``edit``."""
        seq, _, tail = _text(entry_id).partition("-")
        at = named.get("at", named.get(b"at"))
        if at is None and len(named) == 1 and tail != "0":
            at = tail
        elif len(named) != 2 or tail != "0":
            at = None
        if at is None or not seq.isdigit():
            raise errors.CorruptEntryError(
                f"stream {self.keys.stream} entry {_text(entry_id)} was not written by "
                f"redis-msglog (expected ID <seq>-<at> and field 'edit', or an earlier "
                f"version's ID <seq>-0 and fields 'at' and 'edit')",
                seq=int(seq) if seq.isdigit() else None,
            )
        return decode_edit(int(seq), at, edit)

    def entries_with_blobs(self, entries: list[Entry], mode: BlobMode) -> Plan[list[Entry]]:
        """:meth:`with_blobs` for a physical read: the messages' binaries put back."""
        messages = [e for e in entries if isinstance(e, StoredMessage)]
        hydrated = iter((yield from self.with_blobs(messages, mode)))
        return [next(hydrated) if isinstance(e, StoredMessage) else e for e in entries]


class EditsPresent(Exception):
    """Raised inside the core when a fast read of an edit-free log meets an edit: the
    log has edits after all, and the read is made again through the view script."""


_BYTES = (b"at", b"msg", b"-")
_ZERO: dict[Any, Any] = {"-": "0", b"-": b"0"}
_ZEROS = ("0", b"0")  # the second part of an earlier version's entry ID
_first, _second, _third, _fourth = (itemgetter(i) for i in range(4))
_EDIT_FIELDS = frozenset(("edit", b"edit"))
_AT_FIELD, _MSG_FIELD = frozenset(("at", b"at")), frozenset(("msg", b"msg"))
_NO_EDITS = (None, b"0", "0")
R = TypeVar("R", bound=Entry)


def check_view(view: object, *, physical: bool) -> None:
    """InvalidArgumentError unless ``view`` is one of the views (``"physical"`` where a
    physical read is meant to go through its own method)."""
    allowed = VIEWS if physical else tuple(v for v in VIEWS if v != "physical")
    if view not in allowed:
        raise InvalidArgumentError(
            f"view must be one of {', '.join(map(repr, allowed))}; got {shown(view)}"
        )


_validate_many = TypeAdapter(list[AgentMessage]).validator.validate_python


def _coerce_all(msgs: Iterable[AgentMessage | Mapping[str, Any]]) -> tuple[AgentMessage, ...]:
    """Every message validated. A batch of dicts (and messages) goes through pydantic-core
    in one call (0.75 µs a message against 1.3 for a call each); anything else, and any
    batch that fails, message by message, which names the first bad one."""
    items = msgs if type(msgs) is list or type(msgs) is tuple else list(msgs)
    if len(items) > 1 and all(type(m) is dict or isinstance(m, AgentMessage) for m in items):
        try:
            return tuple(_validate_many(items))
        except ValidationError:
            pass  # the same validation again, one by one: the error names the message
    return tuple([_coerce(m, i) for i, m in enumerate(items)])


def _coerce(msg: AgentMessage | Mapping[str, Any], index: int) -> AgentMessage:
    if isinstance(msg, AgentMessage):
        return msg
    if type(msg) is not dict and not isinstance(msg, Mapping):  # dict: skip the ABC check
        raise errors.InvalidMessageError(
            f"message {index}: expected an AgentMessage or a mapping, got {type(msg).__name__}",
            index=index,
        )
    try:
        return AgentMessage.model_validate(msg)
    except ValidationError as exc:
        problems = describe_errors(exc, msg)
        raise errors.InvalidMessageError(f"message {index}: {problems}", index=index) from exc


def _check_depth(msg: AgentMessage, index: int) -> None:
    where = too_deep_field(msg)
    if where is not None:
        raise errors.InvalidMessageError(
            f"message {index}: {where} nests deeper than {MAX_JSON_DEPTH} levels of objects "
            "and arrays, the limit for every JSON value of a message (docs/guide.md, "
            '"Limits"). Nothing was written.',
            index=index,
        )


def parse_seq_counter(raw: bytes | str) -> int | None:
    """A seq counter's value, or ``None`` unless it is exactly what the append script
    accepts: a canonical non-negative integer (what ``INCRBY`` takes: no sign, spaces,
    leading zeros, decimals or exponents) of at most 15 digits (exact in Lua's doubles)."""
    text = _text(raw)
    if text == "0" or (text[:1] in "123456789" and text.isascii() and text.isdigit()):
        return int(text) if len(text) <= 15 else None
    return None


def _text(value: bytes | str) -> str:
    return value.decode(errors="backslashreplace") if isinstance(value, bytes) else value


@functools.lru_cache(maxsize=64)  # a log's windows are few and fixed: once each
def _millis(duration: timedelta) -> int:
    return max(1, int(duration / timedelta(milliseconds=1)))


def _short(batch: Batch) -> str:
    """The part of the batch's fingerprint that a retry key carries."""
    return batch.fingerprint()[:16]


def _replace_look_up(call: script.AppendCall, producer: Producer | None) -> script.AppendCall:
    floor = call.floor if producer is None else producer.floor()
    return dataclasses.replace(call, look_up=True, floor=floor)


def _script_not_run(refused: Refused) -> bool:
    """Whether the server refused to run a script at all: not cached (``NOSCRIPT``), or
    not compiled (fakeredis and Redis < 7 choke on the ``#!lua`` line): :meth:`LogCore.
    run_script` falls back to ``EVAL``, and to the script without its shebang."""
    return refused.code == "NOSCRIPT" or "near '#'" in refused.text


def _info_field(reply: Any, name: str) -> str:
    """The value of ``name`` in an ``INFO`` reply (``name:value`` lines), or ``""``."""
    for line in _text(reply or b"").splitlines():
        key, _, value = line.partition(":")
        if key == name:
            return value.strip()
    return ""


def _check_idempotency_key(key: str) -> None:
    check_text("idempotency_key", key, max_length=MAX_IDEMPOTENCY_KEY_LENGTH)


def _at_least(value: object, least: timedelta) -> bool:
    return isinstance(value, timedelta) and value >= least


def _require_positive(name: str, value: int) -> None:
    check_int(name, value, lowest=1)


def require_non_negative(name: str, value: int) -> None:
    """A count (``n``, ``limit``, ``budget``): an int >= 0, no upper bound."""
    check_int(name, value)


def require_callable(name: str, value: object) -> None:
    if not callable(value):
        raise InvalidArgumentError(f"{name} must be callable, got {type(value).__name__}")


def require_seq(name: str, value: int) -> None:
    """A seq (``after``, ``at_seq``, ``expected_seq``): an int from 0 to ``MAX_SEQ``."""
    check_seq(name, value)
