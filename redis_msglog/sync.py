"""MessageLog: the synchronous client, a thin shell over :mod:`redis_msglog.core`."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar, overload

from redis import Redis
from redis import exceptions as redis_errors

from . import adapters
from .core import (
    DEFAULT_MAX_MESSAGE_BYTES,
    DEFAULT_PAGE_SIZE,
    Batch,
    Command,
    Plan,
    Read,
    ReplyLost,
    ShellBase,
)
from .models import AgentMessage, Role, StoredMessage

T = TypeVar("T")
OnAppend = Callable[[list[StoredMessage]], object]


class MessageLog(ShellBase):
    """A conversation's durable, append-only message log in Redis (synchronous).

    Any number of workers, in any process or host, may share one conversation: every
    message gets a gap-free ``seq`` assigned by the server atomically with the write.

    Args:
        redis: a ``redis.Redis`` client (``decode_responses`` either way).
        conversation: the conversation id; any non-empty string.
        on_append: called after each append commits, in this process, with the rows
            exactly as persisted (one call per ``append_many``). Its exceptions propagate
            to the caller; the rows stay committed.
        prefix: the first part of every key and channel name (see the README's layout).
        max_message_bytes: the largest encoded message accepted (default 8 MiB).
        page_size: entries fetched per round trip by ``all``, ``read`` and ``last(n)``.
    """

    def __init__(
        self,
        redis: Redis,
        conversation: str,
        on_append: OnAppend | None = None,
        prefix: str = "msglog",
        *,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        page_size: int = DEFAULT_PAGE_SIZE,
    ) -> None:
        self._setup_core(
            redis,
            conversation,
            prefix=prefix,
            max_message_bytes=max_message_bytes,
            page_size=page_size,
        )
        self._redis = redis
        self._on_append = on_append

    # -- writing -------------------------------------------------------------------

    def add(self, role: Role, content: str) -> int:
        """Append ``{"role": role, "content": content}``; return its seq."""
        return self.append({"role": role, "content": content})

    def append(self, msg: AgentMessage | Mapping[str, Any]) -> int:
        """Append one message; return the seq the server assigned to it.

        Raises :class:`~redis_msglog.InvalidMessageError`, :class:`~redis_msglog.CodecError`
        or :class:`~redis_msglog.MessageTooLargeError` before anything is sent, and a
        :class:`~redis_msglog.StorageError` subclass if the server fails. The append is
        never re-sent blindly: a lost reply raises :class:`~redis_msglog.AppendInDoubtError`.
        """
        return self._commit(self._core.batch((msg,)))

    def append_many(self, msgs: Iterable[AgentMessage | Mapping[str, Any]]) -> int:
        """Append a batch atomically (all rows or none); return the last seq assigned.

        An empty batch writes nothing and returns :meth:`count`. One bad message rejects
        the whole batch before anything is sent.
        """
        batch = self._core.batch(msgs)
        return self._commit(batch) if batch.encoded else self.count()

    def _commit(self, batch: Batch) -> int:
        last_seq, at = self._run(self._core.append_plan(batch))
        if self._on_append is not None:
            self._on_append(self._core.committed_rows(batch, last_seq, at))
        return last_seq

    # -- reading -------------------------------------------------------------------

    def all(self) -> list[StoredMessage]:
        """The full history in seq order (paged internally, no cap)."""
        return self._run(self._core.read_plan(0, None))

    def read(self, after: int = 0, limit: int | None = None) -> list[StoredMessage]:
        """Messages with seq > ``after``, in order, at most ``limit``: a cursor whose cost
        does not grow with the history's length."""
        return self._run(self._core.read_plan(after, limit))

    @overload
    def last(self) -> StoredMessage | None: ...
    @overload
    def last(self, n: int) -> list[StoredMessage]: ...
    def last(self, n: int | None = None) -> StoredMessage | list[StoredMessage] | None:
        """The most recent message (``None`` on an empty log), or the last ``n`` in
        chronological order (``ValueError`` for a negative ``n``)."""
        if n is None:
            rows = self._run(self._core.last_plan(1))
            return rows[0] if rows else None
        return self._run(self._core.last_plan(n))

    def count(self) -> int:
        """Total messages ever appended: the seq high-water mark (one ``GET``)."""
        return self._run(self._core.count_plan())

    # -- provider formats (see redis_msglog.adapters for the rules) ------------------

    def to_openai(self) -> list[dict[str, Any]]:
        """The full history as OpenAI Chat Completions messages."""
        return adapters.to_openai(self.all())

    def to_anthropic(self) -> list[dict[str, Any]]:
        """The full history as Anthropic Messages turns (``system`` dropped: pass it as
        the request's top-level ``system`` parameter)."""
        return adapters.to_anthropic(self.all())

    def to_langchain(self) -> list[dict[str, Any]]:
        """The full history as LangChain ``{"role", "content"}`` messages (user,
        assistant and system only)."""
        return adapters.to_langchain(self.all())

    # -- carrying plan steps to the server -------------------------------------------

    def _run(self, plan: Plan[T]) -> T:
        reply: Any = None
        error: BaseException | None = None
        while True:
            try:
                step = plan.send(reply) if error is None else plan.throw(error)
            except StopIteration as done:
                result: T = done.value
                return result
            reply, error = None, None
            try:
                if isinstance(step, Read):
                    reply = self._read(step.commands)
                else:
                    reply = self._write_once(step.command)
            except (redis_errors.RedisError, ReplyLost) as exc:
                error = exc

    def _read(self, commands: tuple[Command, ...]) -> list[Any]:
        if len(commands) == 1:
            return [self._redis.execute_command(*commands[0])]
        pipe = self._redis.pipeline(transaction=False)
        for command in commands:
            pipe.execute_command(*command)
        return pipe.execute()

    def _write_once(self, command: Command) -> Any:
        # Our own connection handling, so redis-py's retry policy can never re-send it.
        pool = self._redis.connection_pool
        conn = pool.get_connection()  # connects: a failure here means nothing was sent
        try:
            conn.send_command(*command)
            return conn.read_response()
        except redis_errors.ResponseError:
            raise  # the server answered; the connection is fine
        except (redis_errors.ConnectionError, redis_errors.TimeoutError, OSError) as exc:
            conn.disconnect()
            raise ReplyLost(str(exc)) from exc
        except BaseException:
            conn.disconnect()  # e.g. KeyboardInterrupt mid-reply: the stream is unusable
            raise
        finally:
            pool.release(conn)
