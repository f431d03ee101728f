"""The I/O-free core shared by the sync and asyncio clients.

Every operation is a *plan*: a generator that yields the Redis commands it needs
(:class:`Read` or :class:`Write` steps), receives their replies (or has the client's
exception thrown into it), and returns the result. The shells in ``sync.py`` and
``aio.py`` only carry steps to the server, so paging, script loading, validation and
error mapping are written once.
"""

from __future__ import annotations

import hashlib
import os
import time
import warnings
import weakref
from collections.abc import Generator, Iterable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

from pydantic import ValidationError
from redis import exceptions as redis_errors

from . import errors
from .codec import decode_entry, encode_message
from .durability import Durability
from .keys import ConversationKeys
from .models import AgentMessage, StoredMessage, describe_errors
from .retry import DEFAULT_RETRY, RetryPolicy
from .routing import is_cluster
from .scripts import LuaScript, load_script

T = TypeVar("T")
Command = tuple[str | bytes | int, ...]

DEFAULT_MAX_MESSAGE_BYTES = 8 * 1024 * 1024
DEFAULT_PAGE_SIZE = 1000
DEFAULT_IDEMPOTENCY_WINDOW = timedelta(hours=24)
MAX_IDEMPOTENCY_KEY_LENGTH = 256


@dataclass(frozen=True, slots=True)
class Read:
    """Commands to run in one round trip (pipelined when there are several). Reads are
    idempotent, so the client's own retry policy applies. The reply is the list of their
    raw replies, not reshaped by redis-py's response callbacks (the core parses stream
    entries itself, which is most of a read's cost)."""

    commands: tuple[Command, ...]


@dataclass(frozen=True, slots=True)
class Write:
    """One command to send exactly once, never re-sent by the client library (a blind
    re-send of an append writes it twice). The reply is the raw server reply.

    ``then`` is sent right behind it, in the same write on the same connection (``WAIT``
    and ``WAITAOF`` count that connection's writes); the reply is then the pair of
    replies, the second possibly a ``ResponseError`` instance."""

    command: Command
    then: Command | None = None


@dataclass(frozen=True, slots=True)
class Pause:
    """Wait this many seconds (between retries). The reply is ``None``."""

    seconds: float


Step = Read | Write | Pause
Plan = Generator[Step, Any, T]


class ReplyLost(redis_errors.ConnectionError):
    """Thrown into a plan by a shell when the connection failed after a :class:`Write`
    was sent: the server may have executed it. (A ``ConnectionError``, so routing code
    that reacts to broken connections sees it too.)"""


@dataclass(frozen=True, slots=True)
class Batch:
    """Validated, encoded messages ready to append."""

    messages: tuple[AgentMessage, ...]
    encoded: tuple[bytes, ...]

    def fingerprint(self) -> str:
        """A digest of the batch, stored with an idempotency record so that a key reused
        for a different batch is refused instead of answered with the wrong seqs."""
        digest = hashlib.blake2b(digest_size=16)
        for data in self.encoded:
            digest.update(len(data).to_bytes(8, "big"))
            digest.update(data)
        return digest.hexdigest()


@dataclass(frozen=True, slots=True)
class Commit:
    """The result of an append: ``fresh`` is False when the server answered with an
    earlier call's result for the same idempotency key (nothing was written)."""

    last_seq: int
    at_micros: int
    fresh: bool
    not_durable: str | None = None  # what the log's durability found missing


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
    ) -> None:
        _require_positive("max_message_bytes", max_message_bytes)
        if durability is not None and not isinstance(durability, Durability):
            raise TypeError(f"durability must be a Durability, got {type(durability).__name__}")
        if ttl is not None and (not isinstance(ttl, timedelta) or ttl < timedelta(seconds=1)):
            raise ValueError(f"ttl must be None or a timedelta of at least 1 s, got {ttl!r}")
        _require_positive("page_size", page_size)
        if not isinstance(retry, RetryPolicy):
            raise TypeError(f"retry must be a RetryPolicy, got {type(retry).__name__}")
        if not isinstance(idempotency_window, timedelta) or idempotency_window < timedelta(
            milliseconds=1
        ):
            raise ValueError(
                "idempotency_window must be a timedelta of at least 1 ms, "
                f"got {idempotency_window!r}"
            )
        self.conversation = conversation
        self.keys = ConversationKeys.build(prefix, conversation)
        self.max_message_bytes = max_message_bytes
        self.page_size = page_size
        self.retry = retry
        self.idempotency_window = idempotency_window
        self.ttl = ttl
        self.durability = durability
        self._durability_checked = durability is None or not durability.aof
        self._script: LuaScript = load_script("append.lua")
        # Sharded pub/sub on a cluster: the event goes to the conversation's own shard.
        self._publish = "SPUBLISH" if sharded_events else "PUBLISH"

    # -- writing -------------------------------------------------------------------

    def batch(self, msgs: Iterable[AgentMessage | Mapping[str, Any]]) -> Batch:
        """Validate and encode ``msgs``; raise before anything is sent if any is bad."""
        if isinstance(msgs, (str, bytes, Mapping, AgentMessage)):
            raise errors.InvalidMessageError(
                f"expected a sequence of messages, got {type(msgs).__name__}"
            )
        messages = tuple(_coerce(m, i) for i, m in enumerate(msgs))
        encoded = []
        for index, msg in enumerate(messages):
            try:
                data = encode_message(msg)
            except errors.CodecError as exc:
                raise errors.CodecError(f"message {index}: {exc}") from exc
            if len(data) > self.max_message_bytes:
                raise errors.MessageTooLargeError(
                    f"message {index} encodes to {len(data)} bytes, over the limit of "
                    f"{self.max_message_bytes} (max_message_bytes)"
                )
            encoded.append(data)
        return Batch(messages, tuple(encoded))

    def append_plan(
        self, batch: Batch, idempotency_key: str | None, *, check_eviction: bool = False
    ) -> Plan[Commit]:
        """Append a non-empty batch in one script call, re-sent under the retry policy.

        Every try carries the same idempotency key (the caller's, or one generated for
        this call when retries are enabled), so a re-send after a lost reply returns the
        committed result instead of writing the batch twice.
        """
        generated = False
        if idempotency_key is not None:
            _check_idempotency_key(idempotency_key)
            window = self.idempotency_window
        elif self.retry.attempts:
            idempotency_key, window = os.urandom(12).hex(), self.retry.generated_key_ttl
            generated = True
        keys: Command = (2, self.keys.seq, self.keys.stream)
        record: Command = ("", "")  # the record's lifetime (ms) and the batch's fingerprint
        if idempotency_key is not None:
            keys = (3, *keys[1:], self.keys.idempotency_record(idempotency_key))
            if self.ttl is not None:
                window = min(window, self.ttl)  # a record never outlives its conversation
            record = (_millis(window), batch.fingerprint())
        lifetime = "" if self.ttl is None else _millis(self.ttl)
        # Every try of this call carries one token, kept in the idempotency record: a
        # replay then tells "my own lost try committed" from "another call committed".
        call = os.urandom(8).hex()

        def script_args(look_up_record: bool) -> Command:
            flag = "1" if look_up_record else "0"
            header = (self._publish, self.keys.channel, *record, flag, lifetime, call)
            return (*keys, *header, *batch.encoded)

        # A generated key is new on the first try: the script skips looking it up.
        keys_and_args = script_args(look_up_record=not generated)

        if check_eviction:
            yield from self._warn_if_evicting()
        if not self._durability_checked:
            yield from self._check_durability_support()
        then = None if self.durability is None else self.durability.command()

        maybe_committed = False
        failure: BaseException | None = None
        first_sent, tries = time.monotonic(), 0
        for attempt in range(self.retry.attempts + 1):
            if attempt:
                delay = self.retry.delay(attempt)
                if maybe_committed and not _record_outlives(first_sent, delay, window):
                    break  # the record may be gone by then: a re-send could write twice
                yield Pause(delay)
                if generated:  # from now on the key may have a record: look it up
                    keys_and_args = script_args(look_up_record=True)
            tries += 1
            try:
                reply = yield from self._eval(keys_and_args, then)
            except ReplyLost as exc:
                maybe_committed, failure = True, exc
            except (redis_errors.ConnectionError, redis_errors.TimeoutError) as exc:
                failure = exc  # no connection: nothing was sent
            except redis_errors.RedisError as exc:
                raise storage_error(exc, self.keys) from exc
            else:
                (last_seq, at, replayed, writer), waited = reply if then else (reply, None)
                # A replay of this very call's commit (a try whose reply was lost) is fresh;
                # a replay of another call's is not: its hook has already fired there.
                fresh = not int(replayed) or _text(writer) == call
                missing = None if self.durability is None else self.durability.shortfall(waited)
                return Commit(int(last_seq), int(at), fresh, missing)
        assert failure is not None
        tried = f"{tries} {'try' if tries == 1 else 'tries'}"
        if maybe_committed:
            raise errors.AppendInDoubtError(
                f"connection lost after the append was sent to {self.keys.stream} "
                f"({tried}; last: {failure.__cause__ or failure}); it may have "
                f"committed. "
                + (
                    f"Retrying with idempotency_key={idempotency_key!r} within {window} is safe."
                    if idempotency_key is not None
                    else "It was not re-sent (retries are off and no idempotency_key was given)."
                ),
                idempotency_key=idempotency_key,
            ) from failure
        raise errors.ServerUnavailableError(
            f"Redis is unavailable ({tried}): {failure}. Nothing was written."
        ) from failure

    def _eval(self, keys_and_args: Command, then: Command | None) -> Plan[Any]:
        """Run the append script: EVALSHA, falling back to EVAL when it is not cached."""
        script, send_body = self._script, False
        while True:
            command = ("EVAL", script.body) if send_body else ("EVALSHA", script.sha)
            try:
                reply = yield Write((*command, *keys_and_args), then)
                return reply
            except redis_errors.NoScriptError:
                # Not cached (restart, failover, SCRIPT FLUSH): nothing ran, so EVAL is safe.
                # EVAL also caches it for the next EVALSHA.
                if send_body:
                    raise
                send_body = True
            except redis_errors.ResponseError as exc:
                plain = script.without_shebang()
                if plain is script or not _is_shebang_rejection(exc):
                    raise
                self._script = script = plain
                send_body = True

    def _check_durability_support(self) -> Plan[None]:
        """Before the first append under ``Durability(aof=True)``: refuse (writing nothing)
        if the server has no ``WAITAOF`` or runs with ``appendonly no``. A server that
        does not let us look (ACL) is given the benefit of the doubt."""
        info = yield from self._optional_read(("COMMAND", "INFO", "WAITAOF"))
        if info is not None and (not info or info[0] is None):
            raise errors.DurabilityUnsupportedError(
                "Durability(aof=True) needs WAITAOF (Redis 7.2+ or Valkey); this server has "
                "none. Nothing was written."
            )
        config = yield from self._optional_read(("CONFIG", "GET", "appendonly"))
        values = list(config.values()) if isinstance(config, Mapping) else (config or [])[1:]
        if values and values[0] in (b"no", "no"):
            raise errors.DurabilityUnsupportedError(
                "Durability(aof=True) needs appendonly yes on the server; it is off, so "
                "WAITAOF could never succeed. Nothing was written."
            )
        self._durability_checked = True

    def _warn_if_evicting(self) -> Plan[None]:
        """Warn (once per client and process) when the server may evict this library's
        keys under memory pressure. Silent when ``CONFIG GET`` is not allowed."""
        try:
            reply = yield from self._optional_read(("CONFIG", "GET", "maxmemory-policy"))
        except errors.StorageError:
            return  # best effort: the append itself will report an unreachable server
        values = list(reply.values()) if isinstance(reply, Mapping) else (reply or [])[1:]
        policy = (
            values[0].decode()
            if values and isinstance(values[0], bytes)
            else values[0]
            if values
            else ""
        )
        if policy.startswith("allkeys-") or (policy.startswith("volatile-") and self.ttl):
            warnings.warn(
                f"maxmemory-policy is {policy}: under memory pressure Redis may evict a "
                f"conversation's keys (a lost counter heals from the stream; a lost stream "
                f"loses the conversation). Message logs want noeviction.",
                errors.EvictionWarning,
                stacklevel=2,
            )

    def _optional_read(self, command: Command) -> Plan[Any]:
        """The reply, or ``None`` if the server refuses the command (ACL, unknown)."""
        try:
            (reply,) = yield Read((command,))
        except redis_errors.ResponseError:
            return None
        except redis_errors.RedisError as exc:
            raise storage_error(exc, self.keys) from exc
        return reply

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
        """The rows of a committed batch exactly as a reader will decode them."""
        first = commit.last_seq - len(batch.encoded) + 1
        at = str(commit.at_micros)
        return [decode_entry(first + i, at, data) for i, data in enumerate(batch.encoded)]

    # -- reading -------------------------------------------------------------------

    def count_plan(self) -> Plan[int]:
        """The seq counter, checked against the stream in the same round trip: garbage, or
        a counter that disagrees with the number of entries, is a
        :class:`~redis_msglog.CorruptLogError`. A missing counter (deleted or evicted)
        counts to the stream's last entry, where the next append continues."""
        before, raw, after = yield from self._read(*self._counter_commands())
        if raw is None:
            return 0 if not after else (yield from self._stream_end())
        return self._checked_counter(raw, before, after)

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

    def read_plan(self, after: int, limit: int | None) -> Plan[list[StoredMessage]]:
        """Messages with seq > ``after``, in order, at most ``limit``: a gap-free run
        that starts at ``after + 1``, or an error; never a silent gap or truncation.

        One page is one ``XRANGE`` (atomic). Longer reads are bounded by the seq counter
        read in the first round trip, so they end even while other workers append, and
        they reach it: a stream that ends before its counter is a
        :class:`~redis_msglog.CorruptLogError`, as is a counter behind the stream.
        """
        require_non_negative("after", after)
        if limit is not None:
            require_non_negative("limit", limit)
            if limit == 0:
                return []
            if limit <= self.page_size:
                (entries,) = yield from self._read(self._xrange(after + 1, limit))
                rows = self._contiguous(self.decode_entries(entries), after + 1)
                if not rows and after:
                    yield from self._check_cursor(after)
                return rows
        want = self.page_size if limit is None else min(limit, self.page_size)
        before, raw_high, length, entries = yield from self._read(
            *self._counter_commands(), self._xrange(after + 1, want)
        )
        high = None if raw_high is None else self._checked_counter(raw_high, before, length)
        rows = self._contiguous(self.decode_entries(entries), after + 1)
        while len(entries) == want and (limit is None or len(rows) < limit):
            if high is not None and rows[-1].seq >= high:
                break
            want = self.page_size if limit is None else min(self.page_size, limit - len(rows))
            (entries,) = yield from self._read(self._xrange(rows[-1].seq + 1, want))
            rows.extend(self._contiguous(self.decode_entries(entries), rows[-1].seq + 1))
        if not rows and after:
            yield from self._check_cursor(after)
        reached = rows[-1].seq if rows else after
        if high is not None and reached < high and (limit is None or len(rows) < limit):
            raise errors.CorruptLogError(
                f"stream {self.keys.stream} ends at seq {reached} but its seq counter says "
                f"{high}: entries were deleted, or the counter was moved ahead"
            )
        return rows

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
        rows = self.decode_entries(newest)
        return rows[0].seq if rows else 0

    def last_plan(self, n: int) -> Plan[list[StoredMessage]]:
        """The last ``n`` messages in chronological order: a gap-free run that ends at the
        stream's last entry (fewer only when the log has fewer)."""
        require_non_negative("n", n)
        if n == 0:
            return []
        want = min(n, self.page_size)
        (entries,) = yield from self._read(("XREVRANGE", self.keys.stream, "+", "-", "COUNT", want))
        newest_first = self._contiguous(self.decode_entries(entries), None, step=-1)
        while len(entries) == want and len(newest_first) < n and newest_first[-1].seq > 1:
            want = min(self.page_size, n - len(newest_first))
            below = newest_first[-1].seq - 1
            (entries,) = yield from self._read(
                ("XREVRANGE", self.keys.stream, f"{below}-0", "-", "COUNT", want)
            )
            newest_first.extend(self._contiguous(self.decode_entries(entries), below, step=-1))
        if len(newest_first) < n and newest_first and newest_first[-1].seq > 1:
            self._gap(1, newest_first[-1].seq - 1)  # the log starts after seq 1
        newest_first.reverse()
        return newest_first

    def _contiguous(
        self, rows: list[StoredMessage], first: int | None, *, step: int = 1
    ) -> list[StoredMessage]:
        """``rows`` if their seqs run ``first, first + step, ...`` (``first`` None: from
        the first row's); a missing seq is a :class:`~redis_msglog.CorruptLogError`."""
        expected = rows[0].seq if first is None and rows else first
        for row in rows:
            if row.seq != expected:
                assert expected is not None
                low, high = sorted((expected, row.seq - step))
                self._gap(low, high)
            expected = row.seq + step
        return rows

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

    def _read(self, *commands: Command) -> Plan[list[Any]]:
        try:
            replies: list[Any] = yield Read(commands)
        except redis_errors.RedisError as exc:
            raise storage_error(exc, self.keys) from exc
        return replies

    def _xrange(self, start_seq: int, count: int) -> Command:
        return ("XRANGE", self.keys.stream, f"{start_seq}-0", "+", "COUNT", count)

    def decode_entries(self, entries: list[Any]) -> list[StoredMessage]:
        """Rows of an ``XRANGE``/``XREVRANGE`` reply, raw (``[id, [field, value, ...]]``)
        or as redis-py parses it (``(id, {field: value})``)."""
        if not entries:
            return []
        # One check per page: the client returns all bytes or all str.
        at_key, msg_key, sep = ("at", "msg", "-") if isinstance(entries[0][0], str) else _BYTES
        rows = []
        for entry_id, fields in entries:
            seq_part, _, tail = entry_id.partition(sep)
            if type(fields) is list and len(fields) == 4 and fields[0] == at_key:
                at, body = fields[1], fields[3] if fields[2] == msg_key else None
            else:  # other field orders, RESP3 maps, parsed replies
                if not isinstance(fields, Mapping):
                    fields = dict(zip(fields[::2], fields[1::2], strict=False))
                at, body = fields.get(at_key), fields.get(msg_key)
            if at is None or body is None or tail not in ("0", b"0"):
                raise errors.CorruptEntryError(
                    f"stream {self.keys.stream} entry {_text(entry_id)} was not written by "
                    f"redis-msglog (expected ID <seq>-0 and fields 'at' and 'msg')",
                    seq=int(seq_part) if tail in ("0", b"0") else None,
                )
            rows.append(decode_entry(int(seq_part), at, body))
        return rows


_BYTES = (b"at", b"msg", b"-")


_EVICTION_CHECKED: weakref.WeakSet[Any] = weakref.WeakSet()  # clients already checked


class ShellBase:
    """What the sync and asyncio clients share besides carrying steps: the core, built
    from the constructor's options, and the names it computes."""

    _core: LogCore
    _redis: Any  # the shell's client, typed there

    def _append_plan(self, batch: Batch, idempotency_key: str | None) -> Plan[Commit]:
        check = self._redis not in _EVICTION_CHECKED
        _EVICTION_CHECKED.add(self._redis)
        return self._core.append_plan(batch, idempotency_key, check_eviction=check)

    def _setup_core(self, client: object, conversation: str, **options: Any) -> None:
        """Check the client and build the core from the shell's (typed) options."""
        if not hasattr(client, "connection_pool") and not is_cluster(client):
            raise TypeError(
                f"{type(self).__name__} needs a redis-py client (Redis or RedisCluster), "
                f"got {type(client).__name__}"
            )
        self._core = LogCore(conversation, sharded_events=is_cluster(client), **options)

    @property
    def conversation(self) -> str:
        """The conversation id."""
        return self._core.conversation

    @property
    def keys(self) -> ConversationKeys:
        """The names of this conversation's keys and channel (for ops and tooling)."""
        return self._core.keys


def _coerce(msg: AgentMessage | Mapping[str, Any], index: int) -> AgentMessage:
    if isinstance(msg, AgentMessage):
        return msg
    if not isinstance(msg, Mapping):
        raise errors.InvalidMessageError(
            f"message {index}: expected an AgentMessage or a mapping, got {type(msg).__name__}",
            index=index,
        )
    try:
        return AgentMessage.model_validate(msg)
    except ValidationError as exc:
        problems = describe_errors(exc, msg)
        raise errors.InvalidMessageError(f"message {index}: {problems}", index=index) from exc


def _is_shebang_rejection(exc: redis_errors.ResponseError) -> bool:
    # fakeredis and Redis < 7 compile the `#!lua` line as Lua and fail on it.
    return "near '#'" in str(exc)


def storage_error(exc: BaseException, keys: ConversationKeys) -> errors.MessageLogError:
    """Map a redis-py exception to this library's errors."""
    text = str(exc)
    if isinstance(exc, (redis_errors.ConnectionError, redis_errors.TimeoutError)):
        return errors.ServerUnavailableError(f"Redis is unavailable: {text}")
    if isinstance(exc, redis_errors.OutOfMemoryError) or text.startswith("OOM"):
        return errors.OutOfMemoryError(f"Redis refused the write (maxmemory reached): {text}")
    if "WRONGTYPE" in text:
        return errors.WrongTypeError(f"a key of {keys.stream!r}'s conversation: {text}")
    if "MSGLOG_KEYREUSED" in text:
        return errors.IdempotencyConflictError(text)
    if "MSGLOG_" in text:
        return errors.CorruptLogError(text)
    return errors.StorageError(f"Redis error: {text}")


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


def _millis(duration: timedelta) -> int:
    return max(1, int(duration / timedelta(milliseconds=1)))


def _record_outlives(first_sent: float, delay: float, window: timedelta) -> bool:
    """Whether an idempotency record written by the first try is surely still there after
    ``delay`` more seconds (with a margin for clock-rate differences)."""
    return time.monotonic() + delay - first_sent < 0.9 * window.total_seconds()


def _check_idempotency_key(key: str) -> None:
    if not isinstance(key, str) or not key:
        raise ValueError(f"idempotency_key must be a non-empty str, got {key!r}")
    if len(key) > MAX_IDEMPOTENCY_KEY_LENGTH:
        raise ValueError(
            f"idempotency_key is {len(key)} characters long, over {MAX_IDEMPOTENCY_KEY_LENGTH}"
        )


def _require_positive(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")


def require_non_negative(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be a non-negative int, got {value!r}")
