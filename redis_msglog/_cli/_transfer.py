"""``export`` and ``import``: a conversation out to a file (written beside it and
renamed once complete) and a JSON Lines export back in, with a progress bar."""

from __future__ import annotations

import contextlib
import os
import stat
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import IO, Any

import click
import orjson
from rich.progress import Progress
from rich.text import Text

from .. import adapters, admin
from .._core.stored.codec import encode_row
from .._tools.render import safe_text
from ._common import (
    Settings,
    connection_options,
    entry_pages,
    err,
    existing_log,
)
from ._migrate import SOURCE_HELP, import_from_framework

FORMATS = ("jsonl", "openai", "responses", "anthropic", "langchain")
SOURCES = ("openai-agents", "langchain", "llama-index")  # integrations.migrate.SOURCES


@click.command()
@click.argument("conversation")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="jsonl", show_default=True)
@click.option("-o", "--output", type=click.Path(dir_okay=False, writable=True, allow_dash=True))
@connection_options
def export(settings: Settings, conversation: str, fmt: str, output: str | None) -> None:
    """Write a conversation out. jsonl streams page by page in bounded memory and
    round-trips through `msglog import`; the provider formats (one JSON array) need the
    whole history at once to pair tool calls with their results."""
    log = existing_log(settings, conversation)
    with _output(output) as file, _progress("exporting", log.count(), output) as (advance, _):
        if fmt == "jsonl":
            for row in entry_pages(log, 0):
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


@click.command("import")
@click.argument("args", nargs=-1, required=True, metavar="FILE CONVERSATION | KEY...")
@click.option("--from", "source", type=click.Choice(SOURCES), help=SOURCE_HELP)
@click.option("--source-url", help="With --from: the framework's server (default: --url).")
@click.option("--key-prefix", help="With --from: the framework store's key prefix.")
@click.option("--scope", help="With --from: register the conversations in this scope (a/b).")
@click.option("--batch-size", default=500, show_default=True, type=click.IntRange(1, 100_000))
@connection_options
def import_command(
    settings: Settings,
    args: tuple[str, ...],
    source: str | None,
    source_url: str | None,
    key_prefix: str | None,
    scope: str | None,
    batch_size: int,
) -> None:
    """Append the messages of a jsonl export (FILE, or - for stdin; read once) to
    CONVERSATION, in batches. The file is validated first (nothing is written if any
    line is bad); running it again after an interruption does not duplicate (each
    batch has an idempotency key, remembered 24 h) and says how many were new.

    With --from, read each KEY's history from that framework's own Redis store into the
    conversation of the same id: every row checked first (a bad one: an error naming the
    key and row, nothing written for that key), run it again and nothing is written twice,
    and each key's counts are checked and printed."""
    if source is not None:
        import_from_framework(
            settings,
            source,
            args,
            source_url=source_url,
            key_prefix=key_prefix,
            scope=scope,
            batch_size=batch_size,
        )
        return
    if len(args) != 2 or any(v is not None for v in (source_url, key_prefix, scope)):
        raise click.UsageError(
            "import takes FILE CONVERSATION (or --from SOURCE KEY...; --source-url, "
            "--key-prefix and --scope go with --from)"
        )
    file, conversation = args
    if file != "-" and (not os.path.exists(file) or os.path.isdir(file)):
        raise click.BadParameter(f"File {file!r} does not exist.", param_hint="'FILE'")
    log = settings.log(conversation)
    stream: Any = sys.stdin.buffer if file == "-" else file
    with _progress("importing", None, file) as (advance, set_total):
        result = admin.import_jsonl(
            log, stream, batch_size=batch_size, progress=advance, on_validated=set_total
        )
    err.print(
        Text.assemble(
            f"imported {result.messages} messages into ",
            safe_text(conversation),
            f": {result.new} new, {result.already_there} already there "
            f"(last seq {result.last_seq})",
        )
    )


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
