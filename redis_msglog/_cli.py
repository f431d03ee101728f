"""The ``msglog`` command (also ``python -m redis_msglog``): the demo, and the tools an
operator needs to look at conversations without writing Python."""

from __future__ import annotations

import contextlib
import functools
import ipaddress
import os
import re
import signal
import stat
import sys
import tempfile
import urllib.parse
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import IO, Any, NoReturn, TypeVar, cast

import click
import orjson
import redis
import redis.cluster
from redis import exceptions as redis_errors
from redis.exceptions import RedisClusterException
from rich.console import Console
from rich.progress import Progress
from rich.table import Table
from rich.text import Text

from . import __version__, adapters, admin
from ._codec import encode_row
from ._render import format_row, human_bytes, json_line, safe_text, visible
from ._retry import RetryPolicy
from ._sync import MessageLog
from .edits import Entry
from .errors import MessageLogError

DEFAULT_URL = "redis://localhost:6379/0"
# An operator at a terminal wants a one-line error soon, not the workers' 30 s patience
# (an import re-run after it is still safe: each batch carries an idempotency key).
CLI_RETRY = RetryPolicy(deadline=5.0)
FORMATS = ("jsonl", "openai", "responses", "anthropic", "langchain")
F = TypeVar("F", bound=Callable[..., Any])


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
            raise CliError(_describe(exc)) from exc
        except RedisClusterException as exc:  # a cluster client that could not start
            raise CliError(_describe(exc.__cause__ or exc)) from exc
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


def _describe(exc: BaseException) -> str:
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


@click.group(cls=MsglogGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--url",
    envvar="REDIS_URL",
    help=f"Redis URL, redis:// or rediss:// [default: $REDIS_URL, else {DEFAULT_URL}; "
    "the demo starts a private server instead].",
)
@click.option("--prefix", default="msglog", show_default=True, help="Key prefix.")
@click.option(
    "--cluster",
    is_flag=True,
    envvar="MSGLOG_CLUSTER",
    help="The URL is a node of a Redis Cluster [env: MSGLOG_CLUSTER].",
)
@click.version_option(__version__, prog_name="msglog")
@click.pass_context
def main(ctx: click.Context, url: str | None, prefix: str, cluster: bool) -> None:
    """Durable, append-only conversation logs for LLM agent workers, in Redis."""
    ctx.obj = Settings(url, prefix, cluster)


# -- the demo ---------------------------------------------------------------------------


@main.command()
@click.option("--workers", default=4, show_default=True, type=click.IntRange(1, 64))
@click.option("--turns", default=5, show_default=True, type=click.IntRange(1, 10_000))
@connection_options
def demo(settings: Settings, workers: int, turns: int) -> None:
    """Worker processes share one conversation while a follower prints it live; then
    the history, its provider payloads and a verified summary.

    With no --url and no $REDIS_URL it starts a private throwaway server."""
    from ._demo import run_demo

    sys.exit(run_demo(settings.url, workers, turns, prefix=settings.prefix, console=out))


# -- looking at conversations -------------------------------------------------------------


@main.command("ls")
@click.option("--match", default="*", show_default=True, help="Glob over conversation ids.")
@click.option("--limit", type=click.IntRange(1), help="Stop after this many.")
@click.option("--json", "as_json", is_flag=True, help="JSON lines instead of a table.")
@connection_options
def list_command(settings: Settings, match: str, limit: int | None, as_json: bool) -> None:
    """Conversations under the prefix, with message count and last activity (SCAN, a
    page at a time: safe on large keyspaces)."""
    infos = admin.list_conversations(settings.client(), settings.prefix, match=match)
    shown = 0
    table = Table("conversation", "messages", "last activity (UTC)", box=None)
    for info in infos:
        if limit is not None and shown >= limit:
            break
        shown += 1
        if as_json:
            last = info.last_at.isoformat() if info.last_at else None
            doc = {"conversation": info.conversation, "count": info.count, "last_at": last}
            click.echo(json_line(orjson.dumps(doc)))
        else:
            when = f"{info.last_at:%Y-%m-%d %H:%M:%S}" if info.last_at else "-"
            table.add_row(safe_text(info.conversation), str(info.count), when)
    if not as_json:
        out.print(table if shown else "no conversations")


@main.command()
@click.argument("conversation")
@click.option("--last", "last_n", type=click.IntRange(0), help="Only the last N messages.")
@click.option("--after", type=click.IntRange(0), help="Only messages with seq > AFTER.")
@click.option("--json", "as_json", is_flag=True, help="JSON lines (the export format).")
@click.option("--physical", is_flag=True, help="Every entry, edits included, instead of the view.")
@connection_options
def show(
    settings: Settings,
    conversation: str,
    last_n: int | None,
    after: int | None,
    as_json: bool,
    physical: bool,
) -> None:
    """A conversation's messages as its view shows them (docs/edits.md: retracted and
    compacted messages left out), or with --physical every entry, edits included;
    readable or as JSON lines."""
    if last_n is not None and after is not None:
        raise click.UsageError("--last and --after cannot be combined")
    log = _existing_log(settings, conversation)
    rows: Iterable[Entry]
    if last_n is not None:
        rows = log.last(last_n, view="physical") if physical else log.last(last_n)
    elif physical:
        rows = _pages(log, after or 0)
    else:
        rows = log.read(after or 0)
    for row in rows:
        _print_row(row, as_json)


@main.command()
@click.argument("conversation")
@click.option("-n", "--lines", "count", default=10, show_default=True, type=click.IntRange(0))
@click.option("-f", "--follow", is_flag=True, help="Then print new messages as they commit.")
@click.option("--json", "as_json", is_flag=True, help="JSON lines.")
@connection_options
def tail(settings: Settings, conversation: str, count: int, follow: bool, as_json: bool) -> None:
    """The last messages of a conversation; with -f, then every new one, gap-free,
    until interrupted."""
    client = settings.client()
    log = settings.log(conversation, client)
    if not follow:  # -f may wait for a conversation that does not exist yet
        admin.require_conversation(client, log.keys, conversation)
    rows = log.last(count, view="physical")  # edits too: the log as it grows
    for row in rows:
        _print_row(row, as_json)
    if follow:
        start = rows[-1].seq if rows else log.count()
        try:
            for row in log.follow(after=start, reconnect_within=None):
                _print_row(row, as_json)
        except KeyboardInterrupt:
            sys.exit(130)


# -- the web viewer ---------------------------------------------------------------------


@main.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=8000, show_default=True, type=click.IntRange(0, 65535))
@click.option("--allow", is_flag=True, help="Listen on a non-loopback address (no login!).")
@connection_options
def serve(settings: Settings, host: str, port: int, allow: bool) -> None:
    """The viewer page and the HTTP API (docs/web.md) for an operator, on loopback: every
    request is allowed, so a non-loopback --host needs --allow. Needs the `web` extra."""
    if not allow and not _is_loopback(host):
        raise CliError(
            f"{host} is not a loopback address: the viewer lets anyone who reaches it read "
            "every conversation; give --allow to listen there anyway"
        )
    try:
        import uvicorn

        from .web import create_app
    except ModuleNotFoundError as exc:
        raise CliError("msglog serve needs the web extra: pip install 'redis-msglog[web]'") from exc
    client = settings.client()
    client.ping()  # a wrong URL fails now, in one line, not at the first page view
    # An operator tool: whoever reaches it may read (loopback unless --allow).
    app = create_app(
        client,
        authorize=lambda request, conversation, action: True,
        prefix=settings.prefix,
        viewer=True,
    )
    err.print(f"msglog: serving http://{host}:{port}/ (Ctrl-C stops)")
    # Open event streams never end by themselves: Ctrl-C must not wait for the viewers.
    uvicorn.run(app, host=host, port=port, log_level="warning", timeout_graceful_shutdown=1)


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


# -- export and import ---------------------------------------------------------------------


@main.command()
@click.argument("conversation")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="jsonl", show_default=True)
@click.option("-o", "--output", type=click.Path(dir_okay=False, writable=True, allow_dash=True))
@connection_options
def export(settings: Settings, conversation: str, fmt: str, output: str | None) -> None:
    """Write a conversation out. jsonl streams page by page in bounded memory and
    round-trips through `msglog import`; the provider formats (one JSON array) need the
    whole history at once to pair tool calls with their results."""
    log = _existing_log(settings, conversation)
    with _output(output) as file, _progress("exporting", log.count(), output) as (advance, _):
        if fmt == "jsonl":
            for row in _pages(log, 0):
                file.write(encode_row(row) + b"\n")
                advance(1)
        else:
            rows = log.all()
            convert = {
                "openai": adapters.to_openai,
                "responses": adapters.to_responses,
                "anthropic": adapters.to_anthropic,
                "langchain": adapters.to_langchain,
            }[fmt]
            file.write(orjson.dumps(convert(rows), option=orjson.OPT_INDENT_2) + b"\n")
            advance(len(rows))


@main.command("import")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, allow_dash=True))
@click.argument("conversation")
@click.option("--batch-size", default=500, show_default=True, type=click.IntRange(1, 100_000))
@connection_options
def import_command(settings: Settings, file: str, conversation: str, batch_size: int) -> None:
    """Append the messages of a jsonl export (FILE, or - for stdin; read once) to
    CONVERSATION, in batches. The file is validated first (nothing is written if any
    line is bad); running it again after an interruption does not duplicate (each
    batch has an idempotency key, remembered 24 h) and says how many were new."""
    log = settings.log(conversation)
    source: Any = sys.stdin.buffer if file == "-" else file
    with _progress("importing", None, file) as (advance, set_total):
        result = admin.import_jsonl(
            log, source, batch_size=batch_size, progress=advance, on_validated=set_total
        )
    err.print(
        Text.assemble(
            f"imported {result.messages} messages into ",
            safe_text(conversation),
            f": {result.new} new, {result.already_there} already there "
            f"(last seq {result.last_seq})",
        )
    )


# -- health ---------------------------------------------------------------------------------


@main.command()
@click.argument("conversation", required=False)
@connection_options
def stats(settings: Settings, conversation: str | None) -> None:
    """Count, first/last commit and memory of one conversation, or totals for all."""
    client = settings.client()
    table = Table(box=None, show_header=False)
    if conversation is not None:
        found = admin.conversation_stats(client, settings.prefix, conversation)
        table.add_row("conversation", safe_text(found.conversation))
        table.add_row("messages", str(found.count))
        table.add_row("first commit (UTC)", f"{found.first_at or '-'}")
        table.add_row("last commit (UTC)", f"{found.last_at or '-'}")
        table.add_row("memory (counter, stream, blobs)", human_bytes(found.memory_bytes))
        table.add_row(
            "idempotency records",
            f"{found.idempotency_records} ({human_bytes(found.idempotency_bytes)})",
        )
    else:
        conversations = messages = 0
        for info in admin.list_conversations(client, settings.prefix):
            conversations += 1
            messages += max(info.count, 0)
        server = client.info("server")
        if settings.cluster:  # one INFO per primary, keyed by node
            per_node: Any = cast(Any, client).info("memory", target_nodes="primaries")
            memories = list(per_node.values())
        else:
            memories = [client.info("memory")]
        used = sum(int(m["used_memory"]) for m in memories)
        table.add_row("conversations", str(conversations))
        table.add_row("messages", str(messages))
        where_url = shown_url(settings.url or DEFAULT_URL)
        table.add_row("server", f"{server.get('redis_version')} ({safe_text(where_url)})")
        where = f"{len(memories)} primaries" if settings.cluster else "whole server"
        table.add_row(f"used memory ({where})", human_bytes(used))
        table.add_row("maxmemory policy", str(memories[0].get("maxmemory_policy")))
    out.print(table)


@main.command()
@click.argument("conversation", required=False)
@click.option("--all", "check_all", is_flag=True, help="Every conversation under the prefix.")
@connection_options
def verify(settings: Settings, conversation: str | None, check_all: bool) -> None:
    """Check that the seq counter matches the stream, seqs are contiguous from 1 and
    every entry decodes. Exit code 1, with a precise report, when not."""
    if (conversation is None) == (not check_all):
        raise click.UsageError("give a CONVERSATION or --all (not both)")
    client = settings.client()
    names = (
        [conversation]
        if conversation is not None
        else (info.conversation for info in admin.list_conversations(client, settings.prefix))
    )
    checked = failed = 0
    for name in names:
        checked += 1
        try:
            report = admin.verify_conversation(client, settings.prefix, name)
        except (MessageLogError, redis.ResponseError) as exc:
            if not check_all:
                raise
            failed += 1  # one broken conversation must not stop the check of the others
            out.print(Text.assemble("FAIL  ", safe_text(name), ": ", safe_text(_describe(exc))))
            continue
        if report.ok:
            summary = f": {report.entries} messages, seqs 1..{report.last_seq}"
            out.print(Text.assemble("ok    ", safe_text(name), summary))
        else:
            failed += 1
            summary = f": {report.entries} entries, counter {report.counter}"
            out.print(Text.assemble("FAIL  ", safe_text(name), summary))
            for problem in report.problems:
                out.print(Text.assemble("      - ", safe_text(problem)))
    if check_all:
        out.print(f"{checked} conversations checked, {failed} with problems")
    if failed:
        sys.exit(1)


# -- helpers --------------------------------------------------------------------------------


def _existing_log(settings: Settings, conversation: str) -> MessageLog:
    client = settings.client()
    log = settings.log(conversation, client)
    admin.require_conversation(client, log.keys, conversation)
    return log


def _pages(log: MessageLog, after: int) -> Iterator[Entry]:
    """Every entry after ``after``, edits too, read a page at a time (bounded memory)."""
    end = log.count()
    while after < end:
        page = log.read(after=after, limit=log.page_size, view="physical")
        if not page:
            return
        yield from page
        after = page[-1].seq


def _print_row(row: Entry, as_json: bool) -> None:
    if as_json:
        sys.stdout.buffer.write(json_line(encode_row(row)) + b"\n")
        sys.stdout.flush()
        return
    out.print(format_row(row))


@contextmanager
def _output(path: str | None) -> Iterator[IO[bytes]]:
    """stdout, or a temporary file beside ``path`` renamed over it once complete: a
    failed export leaves an existing file as it was."""
    if path is None or path == "-":
        yield sys.stdout.buffer
        sys.stdout.flush()
        return
    target = os.path.abspath(path)
    fd, temporary = tempfile.mkstemp(
        dir=os.path.dirname(target), prefix=f".{os.path.basename(target)}.", suffix=".part"
    )
    try:
        os.fchmod(fd, _mode_for(target))
        with os.fdopen(fd, "wb") as file:
            yield file
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def _mode_for(target: str) -> int:
    """The existing file's permissions, else what ``open()`` would give a new one."""
    try:
        return stat.S_IMODE(os.stat(target).st_mode)
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


Advance = Callable[[int], None]


@contextmanager
def _progress(
    action: str, total: int | None, target: str | None
) -> Iterator[tuple[Advance, Callable[[int], None]]]:
    """A progress bar on stderr when it is a terminal and stdout is not the data:
    ``(advance, set_total)``."""
    if not err.is_terminal or target in (None, "-"):
        yield (lambda n: None), (lambda n: None)
        return
    with Progress(console=err, transient=True) as progress:
        task = progress.add_task(action, total=total)
        yield (
            lambda n: progress.advance(task, n),
            lambda n: progress.update(task, total=n),
        )


if __name__ == "__main__":
    main(prog_name="msglog")
