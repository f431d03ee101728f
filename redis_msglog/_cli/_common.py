"""What every ``msglog`` command shares: the consoles, the one-line errors (never a
traceback), the connection settings and their options, and reading a conversation
that must exist a page at a time."""

from __future__ import annotations

import contextlib
import functools
import os
import re
import signal
import sys
import urllib.parse
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import IO, Any, NoReturn, TypeVar, cast

import click
import redis
import redis.cluster
from redis import exceptions as redis_errors
from redis.exceptions import RedisClusterException
from rich.console import Console

from .. import admin
from .._core.args import duration
from .._core.lifecycle.scope import MAX_LIST_LIMIT, Scope, ScopedConversation, SkippedEntry
from .._core.retry import RetryPolicy
from .._core.stored.codec import encode_row
from .._core.stored.entries import is_tombstone
from .._core.stored.keys import ConversationKeys
from .._sync import Directory, MessageLog
from .._tools.render import format_row, json_line, visible
from ..edits import Entry
from ..errors import MessageLogError

DEFAULT_URL = "redis://localhost:6379/0"
# An operator at a terminal wants a one-line error soon, not the workers' 30 s patience
# (an import re-run after it is still safe: each batch carries an idempotency key).
CLI_RETRY = RetryPolicy(deadline=5.0)
F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")


class _Console(Console):
    def on_broken_pipe(self) -> None:  # rich's own: exit status 1
        _reader_went_away()


out = _Console(highlight=False, soft_wrap=True)
err = _Console(stderr=True, highlight=False, soft_wrap=True)


class CliError(click.ClickException):
    """One readable line on stderr and exit code 1, never a traceback."""

    def show(self, file: IO[Any] | None = None) -> None:
        # The message may quote an id or a server error: no raw control characters.
        click.echo(f"msglog: {visible(self.format_message())}", err=True)


class MsglogGroup(click.Group):
    """Turns the library's and redis-py's errors into :class:`CliError`."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except BrokenPipeError:
            _reader_went_away()
        except (MessageLogError, redis.RedisError, OSError, ValueError) as exc:
            raise CliError(describe(exc)) from exc
        except RedisClusterException as exc:  # a cluster client that could not start
            raise CliError(describe(exc.__cause__ or exc)) from exc
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except Exception as exc:  # a bug of ours: still one line, never a traceback
            raise CliError(f"internal error: {type(exc).__name__}: {exc}") from exc


def _reader_went_away() -> NoReturn:
    """stdout's reader left (``msglog show ... | head``): stop quietly, as Unix tools do
    (the exit status a SIGPIPE gives), with stdout pointed at /dev/null so that the
    interpreter's last flush does not complain either."""
    with contextlib.suppress(OSError, ValueError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    sys.exit(128 + signal.SIGPIPE)


def describe(exc: BaseException) -> str:
    if isinstance(exc, redis.AuthenticationError) or "WRONGPASS" in str(exc):
        return f"authentication failed: {exc}"
    if (moved := _redirection(exc)) is not None:
        return (
            f"the server is a node of a Redis Cluster (it redirected a command: {moved}): "
            "give --cluster (or set MSGLOG_CLUSTER=1)"
        )
    if isinstance(exc, redis.ConnectionError):
        return f"Redis is unavailable: {exc}"
    return str(exc) or type(exc).__name__


def _redirection(exc: BaseException | None) -> str | None:
    """``MOVED <slot> <node>`` (or ``ASK``) if a cluster redirection caused ``exc``: a
    plain client's reply from a cluster node."""
    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, (redis_errors.MovedError, redis_errors.AskError)):
            code = "ASK" if isinstance(exc, redis_errors.AskError) else "MOVED"
            return f"{code} {exc}"
        if isinstance(exc, MessageLogError) and (found := _MOVED.search(str(exc))):
            return found.group(0)
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return None


_MOVED = re.compile(r"\b(MOVED|ASK) [0-9]+ \S+")


def shown_url(url: str) -> str:
    """``url`` without its password (userinfo or ``?password=``): printable."""
    parts = urllib.parse.urlsplit(url)
    netloc = parts.netloc
    if parts.password is not None:
        user = parts.username or ""
        netloc = f"{user}:***@{netloc.rpartition('@')[2]}"
    query = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
    hidden = [(k, "***" if "pass" in k.lower() else v) for k, v in query]
    query_text = urllib.parse.urlencode(hidden, safe="*/:")
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc, query=query_text))


@dataclass
class Settings:
    """Global options; a subcommand's own ``--url``/``--prefix`` override them."""

    url: str | None
    prefix: str
    cluster: bool = False

    def client(self) -> redis.Redis:
        options: dict[str, Any] = {"socket_connect_timeout": 5, "socket_timeout": 30}
        if not self.cluster:
            plain = redis.Redis.from_url(self.url or DEFAULT_URL, **options)
            if not _is_cluster_node(plain):
                return plain
            plain.close()
            self.cluster = True  # a node of a cluster without --cluster: use it as one
        # Any node's URL; the client discovers the rest.
        cluster: Any = redis.cluster.RedisCluster.from_url(self.url or DEFAULT_URL, **options)
        return cast(redis.Redis, cluster)

    def log(self, conversation: str, client: redis.Redis | None = None) -> MessageLog:
        return MessageLog(
            client or self.client(), conversation, prefix=self.prefix, retry=CLI_RETRY
        )


def _is_cluster_node(client: redis.Redis) -> bool:
    """Whether the server runs in cluster mode (``INFO cluster``); ``False`` when it
    cannot say (unreachable, or ``INFO`` not allowed: the command reports what fails)."""
    try:
        return str(client.info("cluster").get("cluster_enabled")) == "1"
    except (redis.RedisError, OSError):
        return False


def connection_options(command: F) -> F:
    """``--url`` and ``--prefix`` after the subcommand too (``msglog ls --url ...``)."""

    @click.option("--url", help="Redis URL (overrides the global --url).")
    @click.option("--prefix", help="Key prefix (overrides the global --prefix).")
    @click.pass_context
    @functools.wraps(command)
    def wrapper(ctx: click.Context, /, url: str | None, prefix: str | None, **kwargs: Any) -> Any:
        settings: Settings = ctx.obj
        if url:
            settings.url = url
        if prefix:
            settings.prefix = prefix
        return command(settings, **kwargs)

    return wrapper  # type: ignore[return-value]


def existing_log(settings: Settings, conversation: str) -> MessageLog:
    client = settings.client()
    log = settings.log(conversation, client)
    require_readable(client, log.keys, conversation)
    return log


def require_readable(client: redis.Redis, keys: ConversationKeys, conversation: str) -> None:
    """An error, as for an unknown conversation, unless the conversation has keys and is
    not erased: an erased one reads as an empty log (docs/lifecycle.md), which ``show``
    printed as nothing at all, with exit status 0."""
    admin.require_conversation(client, keys, conversation)
    if not is_tombstone(client.get(keys.seq)):
        return
    left = client.pttl(keys.seq)
    stands = (
        f" for another {duration(timedelta(seconds=round(left / 1000)))}"
        if left >= 0
        else " until it is deleted"
        if left == -1
        else ""
    )
    raise CliError(
        f"conversation {conversation!r} was erased: it holds nothing, and its tombstone "
        f"{keys.seq} refuses writes into it{stands}"
    )


def entry_pages(log: MessageLog, after: int) -> Iterator[Entry]:
    """Every entry after ``after``, edits too, read a page at a time (bounded memory)."""
    end = log.count()
    while after < end:
        page = log.read(after=after, limit=log.page_size, view="physical")
        if not page:
            return
        yield from page
        after = page[-1].seq


def print_row(row: Entry, as_json: bool) -> None:
    if as_json:
        sys.stdout.buffer.write(json_line(encode_row(row)) + b"\n")
        sys.stdout.flush()
        return
    out.print(format_row(row))


def scanned(found: Iterable[T]) -> Iterator[T]:
    """``found`` (what ``SCAN`` lists), with a user refused ``SCAN`` (a tenant's ACL user,
    docs/security.md) told in one line to list a scope's index instead."""
    try:
        yield from found
    except redis_errors.NoPermissionError as exc:
        if "'scan'" not in str(exc).lower():
            raise
        raise CliError(
            "this user may not SCAN the keyspace (a tenant's ACL user): pass --scope "
            "<tenant> to list the tenant's conversations from its scope's index"
        ) from exc


def scope_conversations(
    client: redis.Redis, prefix: str, scope: Scope, limit: int | None = None
) -> Iterator[ScopedConversation]:
    """The conversations of ``scope`` and its sub-scopes, from its index (no ``SCAN``),
    newest-created first, a page at a time; at most ``limit``."""
    directory = Directory(client, prefix=prefix)
    shown, cursor = 0, None
    while True:
        page = directory.list(
            scope, limit=min(limit or MAX_LIST_LIMIT, MAX_LIST_LIMIT), cursor=cursor
        )
        report_skipped(page.skipped, "not shown")
        for found in page.conversations:
            if limit is not None and shown >= limit:
                return
            shown += 1
            yield found
        if page.cursor is None:
            return
        cursor = page.cursor


def report_skipped(skipped: list[SkippedEntry], done: str) -> None:
    """One line on stderr per index entry skipped (its owner record disagrees with it)."""
    for entry in skipped:
        err.print(
            f"skipped {visible(entry.conversation)!r} ({done}): listed in the scope's index, "
            f"but {visible(entry.reason)}",
            markup=False,
        )
