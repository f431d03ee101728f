"""An append, from a batch to its commit: the script call prepared with the identity
its tries share (a caller's idempotency key, or the producer's id and call number), the
once-per-log checks as one preflight plan when still needed, the first try the shell
sends itself, and the commit read from the script's reply. What follows a failed first
try (re-sends, look-ups, giving up) is :mod:`.tries`."""

from __future__ import annotations

import dataclasses
import functools
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from ... import errors
from ..._lua import contract as script
from ...models import StoredMessage
from ..args import check_text
from ..checks import require_seq
from ..read.roundtrip import Reader
from ..retry import RetryPolicy
from ..steps import Plan, Write
from ..stored.codec import decode_entry
from ..stored.usage import NO_DELTA
from .blobs import hydrate
from .bounds import DEFAULT_REWRITE, Rewrite
from .durability import Durability
from .encode import Batch
from .preflight import check_durability_support, eviction_risk
from .producer import Producer, ProducerSlot

MAX_IDEMPOTENCY_KEY_LENGTH = 256
RETRY_KEY_PREFIX = "msglog-retry:"
"""How the key of an :class:`~redis_msglog.AppendInDoubtError` for an append made without
one begins: ``msglog-retry:<producer>:<pseq>:<fingerprint>``. Passed back as an
``idempotency_key``, it makes the call a try of the original one."""
_RETRY_KEY = re.compile(
    re.escape(RETRY_KEY_PREFIX) + r"([0-9a-f]{12}):([1-9][0-9]{0,14}):([0-9a-f]{16})"
)


# Not frozen (on every append's path: a frozen dataclass's __init__ costs ~0.15 µs a
# field): parsed from the reply (one object, not a reply and a commit), its own fields
# set once by Appends.commit_of, never changed after.
@dataclass(slots=True)
class Commit(script.AppendReply):
    """The result of an append: the script's reply (last seq, commit time, whether it
    replayed an idempotency record, the call that wrote it, a pop's entry) and what the
    client made of it. ``fresh`` is False when the server answered with an earlier
    call's result for the same idempotency key (nothing was written)."""

    fresh: bool = True
    not_durable: str | None = None  # what the log's durability found missing
    eviction_risk: str | None = None  # why the server may evict the log's keys (to warn)


# Not frozen (on every append's path: a frozen dataclass's __init__ costs ~0.15 µs a
# field); ``preflight`` and ``eviction_risk`` are set once, before the first try.
@dataclass(slots=True)
class PreparedAppend:
    """An append's script call, its first try, and what its tries share."""

    call: script.AppendCall
    batch: Batch
    idempotency_key: str | None  # the caller's key (or a retry key), if any
    window: timedelta  # how long the server remembers the call's result
    first_try_new: bool  # a producer's own call: its first try cannot have committed
    producer: Producer | None  # a producer's own call: the producer numbering it
    first_try: Write  # EVALSHA, and the durability wait behind it when there is one
    preflight: Plan[None] | None = None  # the once-per-client/log checks still needed
    eviction_risk: str | None = None  # what the preflight found, for the commit to carry
    registered_again: bool = False  # a scoped log's call re-sent once after registering

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


class Appends:
    """One log's appends up to their first try, and their commits."""

    def __init__(
        self,
        reader: Reader,
        *,
        retry: RetryPolicy,
        idempotency_window: timedelta,
        ttl: timedelta | None,
        durability: Durability | None,
        producers: ProducerSlot,
        publish: str,
        register: Callable[[], Plan[object]] | None = None,
        max_age: timedelta | None = None,
        scope: str = "",
        rewrite: Rewrite = DEFAULT_REWRITE,
    ) -> None:
        self._reader = reader
        self.keys = reader.keys
        self.retry = retry
        self.idempotency_window = idempotency_window
        self.ttl = ttl
        self.durability = durability
        self.producers = producers
        self._publish = publish
        self._ttl_ms = None if ttl is None else _millis(ttl)
        self._max_age_us = None if max_age is None else max_age // timedelta(microseconds=1)
        self._rewrite = f"{rewrite.max_bytes} {rewrite.node_entries}"
        self.durability_checked = durability is None or not durability.aof
        # A scoped log's registration (_core/lifecycle/scope.py), run once in its first
        # write's preflight.
        self._register = register
        self.registered = register is None
        # And every write of it names the scope: the script checks the owner record.
        self.scope = scope

    def prepare(
        self,
        batch: Batch,
        idempotency_key: str | None,
        expected_seq: int | None,
        check_eviction: bool = False,
    ) -> PreparedAppend:
        """The script call for ``batch``, with the identity its tries share (if any), its
        first try, and (``check_eviction``, or a durability not yet checked) the preflight
        to run before it. A producer's call is in flight from here: the caller settles
        it (see :meth:`PreparedAppend.settle`) if it never sends it."""
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
            record, producer, pseq, window = self._keyed(batch, idempotency_key)
            token = os.urandom(8).hex()
        elif self.retry.retries:
            numbered_by = self.producers.current()
            pseq, floor = numbered_by.begin()
            producer, window, first_try_new = numbered_by.id, self.retry.generated_key_ttl, True
        if self.ttl is not None:
            window = min(window, self.ttl)  # a record never outlives its conversation
        call = _new_call(  # positional: see _new_call
            self.keys, batch.encoded, token, batch.blobs, self._publish, record,
            _millis(window), batch.fingerprint() if record is not None else "",
            not first_try_new, self._ttl_ms, expected_seq, "", "", b"", (), b"",
            producer, pseq, floor, batch.blob_refs, self._max_age_us, self.scope, self._rewrite,
            # A log with a lifetime names the totals in every append (their expiry kept
            # with the rest's, see ttl_ms in append.lua).
            batch.usage or (NO_DELTA if self._ttl_ms is not None else ""),
        )  # fmt: skip
        if batch.edit is not None:
            call = _with_edit(call, batch)
        then = None if self.durability is None else self.durability.command()
        name, keys_and_args = call.script_and_args()
        command = ("EVALSHA", self._reader.runner.scripts[name].sha, *keys_and_args)
        # Packed by the shell as it is sent, all but its numbers and messages from a cache
        # (Write.split): not a call with a record, whose key is among the cached head's and
        # differs call by call.
        first = Write(command, then, 0 if then or record else _HEAD + int(command[2]))
        prepared = PreparedAppend(
            call, batch, idempotency_key, window, first_try_new, numbered_by, first
        )
        if check_eviction or not self.durability_checked or not self.registered:
            prepared.preflight = self._preflight(prepared, check_eviction)
        return prepared

    def _keyed(self, batch: Batch, idempotency_key: str) -> tuple[str | None, str, int, timedelta]:
        """The record, producer, call number and window of a call with a caller's key:
        its own record, or, for the key of an AppendInDoubtError, that producer's call."""
        check_text("idempotency_key", idempotency_key, max_length=MAX_IDEMPOTENCY_KEY_LENGTH)
        resumed = _RETRY_KEY.fullmatch(idempotency_key)
        if resumed is None:
            return self.keys.idempotency_record(idempotency_key), "", 0, self.idempotency_window
        producer, pseq_text, short = resumed.groups()  # a try of that producer's call
        if short != _short(batch):
            raise errors.IdempotencyConflictError(
                f"idempotency key {idempotency_key!r} was made for a different batch "
                "of messages. Nothing was written."
            )
        return None, producer, int(pseq_text), self.retry.generated_key_ttl

    def _preflight(self, prepared: PreparedAppend, check_eviction: bool) -> Plan[None]:
        """The checks before a client's first append (its server's eviction policy) and a
        log's first under ``Durability(aof=True)`` (the server's support), and a scoped
        log's registration: one plan, run before the first try. A refusal leaves the call
        unsent and settled."""
        try:
            if check_eviction:
                prepared.eviction_risk = yield from eviction_risk(self._reader, self.ttl)
            if not self.durability_checked:
                yield from check_durability_support(self._reader)
                self.durability_checked = True
            if not self.registered and self._register is not None:
                # Last: a refused check above writes nothing. Idempotent (a lost reply is
                # re-sent; two concurrent first appends both register, harmlessly).
                yield from self._register()
                self.registered = True
        except BaseException:
            prepared.settle()  # never sent
            raise

    def commit_of(self, prepared: PreparedAppend, reply: Any) -> Commit:
        """The result of a try the server answered (the call is settled)."""
        prepared.settle()
        answer, waited = reply if prepared.first_try.then else (reply, None)
        commit = Commit.parse(answer)
        # A replay of this very call's commit (a try whose reply was lost) is fresh; a
        # replay of another call's is not: its hook has already fired there.
        commit.fresh = not commit.replayed or commit.writer == prepared.call.call
        if self.durability is not None:
            commit.not_durable = self.durability.shortfall(waited)
        commit.eviction_risk = prepared.eviction_risk
        return commit

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

    @staticmethod
    def committed_rows(batch: Batch, commit: Commit) -> list[StoredMessage]:
        """The rows of a committed batch exactly as a reader will decode them (binaries
        stored off the rows put back)."""
        first = commit.last_seq - len(batch.encoded) + 1
        at = str(commit.at_micros)
        rows = [decode_entry(first + i, at, data) for i, data in enumerate(batch.encoded)]
        return hydrate(rows, dict(batch.blobs)) if batch.blobs else rows


# An AppendCall's fields, in order: every append builds one, positionally (a dataclass
# __init__ called with 21 keywords took 2.3 µs, positionally 0.8, measured). Checked at
# import: a field added or moved in _lua/contract.py fails here, not as a wrong call.
_CALL_FIELDS = (
    "keys", "messages", "call", "blobs", "publish", "record", "record_ttl_ms", "fingerprint",
    "look_up", "ttl_ms", "expected_seq", "op", "op_arg", "entry", "attrs", "attrs_json",
    "producer", "pseq", "floor", "blob_refs", "max_age_us", "scope", "rewrite", "usage",
)  # fmt: skip
if tuple(field.name for field in dataclasses.fields(script.AppendCall)) != _CALL_FIELDS:
    raise ImportError("AppendCall's fields changed: update _CALL_FIELDS and prepare() here")
_new_call = script.AppendCall
_HEAD = 9  # EVALSHA, sha, numkeys; then the keys; publish, channel, ttl, look_up, call, producer


def _with_edit(call: script.AppendCall, batch: Batch) -> script.AppendCall:
    """``call`` making the batch's edit (and attribute changes) before its messages."""
    edit = batch.edit
    assert edit is not None
    return dataclasses.replace(
        call,
        op=edit.op,
        op_arg=edit.arg,
        entry=edit.entry,
        attrs=batch.attrs.pairs if batch.attrs else (),
        attrs_json=batch.attrs.json if batch.attrs else b"",
    )


@functools.lru_cache(maxsize=64)  # a log's windows are few and fixed: once each
def _millis(duration: timedelta) -> int:
    return max(1, int(duration / timedelta(milliseconds=1)))


def _short(batch: Batch) -> str:
    """The part of the batch's fingerprint that a retry key carries."""
    return batch.fingerprint()[:16]
