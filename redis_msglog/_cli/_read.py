"""The commands that look at conversations: ``ls``, ``show`` and ``tail``."""

from __future__ import annotations

import sys
from collections.abc import Iterable

import click
import orjson
from rich.table import Table

from .. import admin
from .._core.lifecycle.scope import Scope, ScopedConversation, joined, scope_of_text
from .._tools.render import json_line, safe_text
from ..edits import Entry
from ._common import (
    Settings,
    connection_options,
    entry_pages,
    existing_log,
    out,
    print_row,
    require_readable,
    scanned,
    scope_conversations,
)

DAMAGED = "damaged counter"
"""What ``ls`` shows for a seq counter that is missing or not a seq (``verify`` says which)."""


@click.command("ls")
@click.option("--match", default="*", show_default=True, help="Glob over conversation ids.")
@click.option("--limit", type=click.IntRange(1), help="Stop after this many.")
@click.option("--json", "as_json", is_flag=True, help="JSON lines instead of a table.")
@click.option("--scope", help="Only this scope's conversations (acme/user-42), from its index.")
@connection_options
def list_command(
    settings: Settings, match: str, limit: int | None, as_json: bool, scope: str | None
) -> None:
    """Conversations under the prefix, with message count and last activity (SCAN, a
    page at a time: safe on large keyspaces); with --scope, a scope's conversations from
    its index (no SCAN: what a tenant's ACL user lists), newest-created first, with their
    scope and created time."""
    if scope is not None:
        if match != "*":
            raise click.UsageError("--scope and --match cannot be combined")
        _list_scope(settings, scope_of_text(scope), limit, as_json)
        return
    infos = scanned(admin.list_conversations(settings.client(), settings.prefix, match=match))
    shown = 0
    # The seq counter: every entry ever appended, edits included; a trim does not lower it.
    table = Table("conversation", "last seq", "last activity (UTC)", box=None)
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
            seq = DAMAGED if info.count < 0 else str(info.count)
            table.add_row(safe_text(info.conversation), seq, when)
    if not as_json:
        out.print(table if shown else "no conversations")


def _list_scope(settings: Settings, scope: Scope, limit: int | None, as_json: bool) -> None:
    table = Table("conversation", "scope", "last seq", "created (UTC)", box=None)
    shown = 0
    for found in scope_conversations(settings.client(), settings.prefix, scope, limit):
        shown += 1
        _print_scoped(found, table, as_json)
    if not as_json:
        out.print(table if shown else "no conversations")


def _print_scoped(found: ScopedConversation, table: Table, as_json: bool) -> None:
    if as_json:
        doc = {
            "conversation": found.conversation,
            "scope": joined(found.scope),
            "count": found.last_seq,
            "created_at": found.created_at.isoformat(),
        }
        click.echo(json_line(orjson.dumps(doc)))
    else:
        when = f"{found.created_at:%Y-%m-%d %H:%M:%S}"
        row = (found.conversation, joined(found.scope), str(found.last_seq), when)
        table.add_row(*map(safe_text, row))


@click.command()
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
    """A conversation's messages as its view shows them (retracted and compacted
    messages left out), or with --physical every entry, edits included; readable or as
    JSON lines.

    \b
    Docs: https://github.com/redis-msglog/redis-msglog/blob/main/docs/edits.md"""
    if last_n is not None and after is not None:
        raise click.UsageError("--last and --after cannot be combined")
    log = existing_log(settings, conversation)
    rows: Iterable[Entry]
    if last_n is not None:
        rows = log.last(last_n, view="physical") if physical else log.last(last_n)
    elif physical:
        rows = entry_pages(log, after or 0)
    else:
        rows = log.read(after or 0)
    for row in rows:
        print_row(row, as_json)


@click.command()
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
        require_readable(client, log.keys, conversation)
    rows = log.last(count, view="physical")  # edits too: the log as it grows
    for row in rows:
        print_row(row, as_json)
    if follow:
        start = rows[-1].seq if rows else log.count()
        try:
            for row in log.follow(after=start, reconnect_within=None):
                print_row(row, as_json)
        except KeyboardInterrupt:
            sys.exit(130)
