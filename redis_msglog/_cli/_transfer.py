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
from .._codec import encode_row
from .._render import safe_text
from ._common import (
    Settings,
    connection_options,
    entry_pages,
    err,
    existing_log,
)

FORMATS = ("jsonl", "openai", "responses", "anthropic", "langchain")


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
