"""The I/O-free core shared by the sync and asyncio clients.

Every operation is a *plan*: a generator that yields the Redis commands it needs
(:class:`Read` or :class:`Write` steps), receives their replies (or has the client's
exception thrown into it), and returns the result. The shells in ``sync.py`` and
``aio.py`` only carry steps to the server, so paging, script loading, validation and
error mapping are written once.
"""

from __future__ import annotations

from collections.abc import Generator, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import ValidationError
from redis import exceptions as redis_errors

from . import errors
from .codec import decode_entry, encode_message
from .keys import ConversationKeys
from .models import AgentMessage, StoredMessage
from .scripts import LuaScript, load_script

T = TypeVar("T")
Command = tuple[str | bytes | int, ...]

DEFAULT_MAX_MESSAGE_BYTES = 8 * 1024 * 1024
DEFAULT_PAGE_SIZE = 1000


@dataclass(frozen=True, slots=True)
class Read:
    """Commands to run in one round trip (a non-transactional pipeline when there are
    several). Reads are idempotent, so the client's own retry policy applies. The reply
    is the list of their parsed replies."""

    commands: tuple[Command, ...]


@dataclass(frozen=True, slots=True)
class Write:
    """One command to send exactly once, never re-sent by the client library (a blind
    re-send of an append writes it twice). The reply is the raw server reply."""

    command: Command


Step = Read | Write
Plan = Generator[Step, Any, T]


class ReplyLost(Exception):
    """Thrown into a plan by a shell when the connection failed after a :class:`Write`
    was sent: the server may have executed it."""


@dataclass(frozen=True, slots=True)
class Batch:
    """Validated, encoded messages ready to append."""

    messages: tuple[AgentMessage, ...]
    encoded: tuple[bytes, ...]


class LogCore:
    """Everything a message log does, minus the I/O."""

    def __init__(
        self,
        conversation: str,
        *,
        prefix: str,
        max_message_bytes: int,
        page_size: int,
    ) -> None:
        _require_positive("max_message_bytes", max_message_bytes)
        _require_positive("page_size", page_size)
        self.conversation = conversation
        self.keys = ConversationKeys.build(prefix, conversation)
        self.max_message_bytes = max_message_bytes
        self.page_size = page_size
        self._script: LuaScript = load_script("append.lua")
        self._publish = "PUBLISH"

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

    def append_plan(self, batch: Batch) -> Plan[tuple[int, int]]:
        """Append a non-empty batch in one script call; returns ``(last_seq, at_micros)``."""
        keys_and_args: Command = (
            2,
            self.keys.seq,
            self.keys.stream,
            self._publish,
            self.keys.channel,
            *batch.encoded,
        )
        script, send_body = self._script, False
        try:
            while True:
                command = "EVAL" if send_body else "EVALSHA"
                try:
                    reply = yield Write(
                        (command, script.body if send_body else script.sha, *keys_and_args)
                    )
                    break
                except redis_errors.NoScriptError:
                    # Not cached (restart, failover, SCRIPT FLUSH): nothing ran, so EVAL is
                    # safe. EVAL also caches it for the next EVALSHA.
                    if send_body:
                        raise
                    send_body = True
                except redis_errors.ResponseError as exc:
                    plain = script.without_shebang()
                    if plain is script or not _is_shebang_rejection(exc):
                        raise
                    self._script = script = plain
                    send_body = True
        except (redis_errors.RedisError, ReplyLost) as exc:
            raise storage_error(exc, self.keys) from exc
        return int(reply[0]), int(reply[1])

    def committed_rows(self, batch: Batch, last_seq: int, at_micros: int) -> list[StoredMessage]:
        """The rows of a committed batch exactly as a reader will decode them."""
        first = last_seq - len(batch.encoded) + 1
        return [
            decode_entry(first + i, str(at_micros), data) for i, data in enumerate(batch.encoded)
        ]

    # -- reading -------------------------------------------------------------------

    def count_plan(self) -> Plan[int]:
        (raw,) = yield from self._read(("GET", self.keys.seq))
        return 0 if raw is None else int(raw)

    def read_plan(self, after: int, limit: int | None) -> Plan[list[StoredMessage]]:
        """Messages with seq > ``after``, in order, at most ``limit``: a gap-free prefix.

        One page is one ``XRANGE`` (atomic). Longer reads are bounded by the seq counter
        read in the first round trip, so they end even while other workers append.
        """
        _require_non_negative("after", after)
        if limit is not None:
            _require_non_negative("limit", limit)
            if limit == 0:
                return []
            if limit <= self.page_size:
                (entries,) = yield from self._read(self._xrange(after + 1, "+", limit))
                return self._decode(entries)
        want = self.page_size if limit is None else min(limit, self.page_size)
        raw_high, entries = yield from self._read(
            ("GET", self.keys.seq), self._xrange(after + 1, "+", want)
        )
        high = None if raw_high is None else int(raw_high)
        end = "+" if high is None else f"{high}-0"
        rows = [row for row in self._decode(entries) if high is None or row.seq <= high]
        while len(entries) == want and (limit is None or len(rows) < limit):
            start = rows[-1].seq + 1 if rows else after + 1
            if high is not None and start > high:
                break
            want = self.page_size if limit is None else min(self.page_size, limit - len(rows))
            (entries,) = yield from self._read(self._xrange(start, end, want))
            rows.extend(self._decode(entries))
        return rows

    def last_plan(self, n: int) -> Plan[list[StoredMessage]]:
        """The last ``n`` messages in chronological order."""
        _require_non_negative("n", n)
        if n == 0:
            return []
        want = min(n, self.page_size)
        (entries,) = yield from self._read(("XREVRANGE", self.keys.stream, "+", "-", "COUNT", want))
        newest_first = self._decode(entries)
        while len(entries) == want and len(newest_first) < n and newest_first[-1].seq > 1:
            want = min(self.page_size, n - len(newest_first))
            end = f"{newest_first[-1].seq - 1}-0"
            (entries,) = yield from self._read(
                ("XREVRANGE", self.keys.stream, end, "-", "COUNT", want)
            )
            newest_first.extend(self._decode(entries))
        newest_first.reverse()
        return newest_first

    # -- helpers -------------------------------------------------------------------

    def _read(self, *commands: Command) -> Plan[list[Any]]:
        try:
            replies: list[Any] = yield Read(commands)
        except redis_errors.RedisError as exc:
            raise storage_error(exc, self.keys) from exc
        return replies

    def _xrange(self, start_seq: int, end: str, count: int) -> Command:
        return ("XRANGE", self.keys.stream, f"{start_seq}-0", end, "COUNT", count)

    def _decode(self, entries: list[tuple[Any, Mapping[Any, Any]]]) -> list[StoredMessage]:
        if not entries:
            return []
        # One check per page: the client returns all bytes or all str.
        at_key, msg_key, sep = ("at", "msg", "-") if isinstance(entries[0][0], str) else _BYTES
        rows = []
        for entry_id, fields in entries:
            seq_part, _, tail = entry_id.partition(sep)
            at, body = fields.get(at_key), fields.get(msg_key)
            if at is None or body is None or tail not in ("0", b"0"):
                raise errors.CodecError(
                    f"stream {self.keys.stream} entry {entry_id!r} was not written by "
                    f"redis-msglog (expected ID <seq>-0 and fields 'at' and 'msg')"
                )
            rows.append(decode_entry(int(seq_part), at, body))
        return rows


_BYTES = (b"at", b"msg", b"-")


class ShellBase:
    """What the sync and asyncio clients share besides carrying steps: the core, built
    from the constructor's options, and the names it computes."""

    _core: LogCore

    def _setup_core(
        self,
        client: object,
        conversation: str,
        *,
        prefix: str,
        max_message_bytes: int,
        page_size: int,
    ) -> None:
        if not hasattr(client, "connection_pool"):
            raise TypeError(
                f"{type(self).__name__} needs a redis-py client with a connection pool, "
                f"got {type(client).__name__}"
            )
        self._core = LogCore(
            conversation, prefix=prefix, max_message_bytes=max_message_bytes, page_size=page_size
        )

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
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or 'message'}: {e['msg']}" for e in exc.errors()
        )
        raise errors.InvalidMessageError(f"message {index}: {problems}", index=index) from exc


def _is_shebang_rejection(exc: redis_errors.ResponseError) -> bool:
    # fakeredis and Redis < 7 compile the `#!lua` line as Lua and fail on it.
    return "near '#'" in str(exc)


def storage_error(exc: BaseException, keys: ConversationKeys) -> errors.MessageLogError:
    """Map a redis-py exception (or :class:`ReplyLost`) to this library's errors."""
    text = str(exc)
    if isinstance(exc, ReplyLost):
        return errors.AppendInDoubtError(
            f"connection lost after the append was sent to {keys.stream}; it may or may not "
            f"have committed ({exc.__cause__ or exc}). It was not re-sent."
        )
    if isinstance(exc, (redis_errors.ConnectionError, redis_errors.TimeoutError)):
        return errors.ServerUnavailableError(f"Redis is unavailable: {text}")
    if isinstance(exc, redis_errors.OutOfMemoryError) or text.startswith("OOM"):
        return errors.OutOfMemoryError(f"Redis refused the write (maxmemory reached): {text}")
    if "WRONGTYPE" in text:
        return errors.WrongTypeError(f"a key of {keys.stream!r}'s conversation: {text}")
    if "MSGLOG_" in text:
        return errors.CorruptLogError(text)
    return errors.StorageError(f"Redis error: {text}")


def _require_positive(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")


def _require_non_negative(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be a non-negative int, got {value!r}")
