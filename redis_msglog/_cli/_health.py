"""The health commands: ``stats`` (counts and memory) and ``verify``."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from typing import Any, cast

import click
import redis
import redis.cluster
from rich.table import Table
from rich.text import Text

from .. import admin
from .._core.lifecycle.scope import scope_of_text
from .._sync import Directory
from .._tools.render import human_bytes, safe_text
from ..errors import MessageLogError
from ._common import (
    DEFAULT_URL,
    Settings,
    connection_options,
    describe,
    out,
    scanned,
    scope_conversations,
    shown_url,
)
from ._read import DAMAGED


@click.command()
@click.argument("conversation", required=False)
@click.option("--scope", help="Totals of this scope's conversations, from its index (no SCAN).")
@connection_options
def stats(settings: Settings, conversation: str | None, scope: str | None) -> None:
    """Count, first/last commit and memory of one conversation, or totals for all (with
    --scope, for a scope's: what a tenant's ACL user counts)."""
    if conversation is not None and scope is not None:
        raise click.UsageError("give a CONVERSATION or --scope (not both)")
    client = settings.client()
    table = Table(box=None, show_header=False)
    if conversation is not None:
        found = admin.conversation_stats(client, settings.prefix, conversation)
        table.add_row("conversation", safe_text(found.conversation))
        table.add_row("entries", _held(found))
        if found.erased:
            table.add_row("erased", "yes: a tombstone refuses writes until it expires")
        table.add_row("first commit (UTC)", f"{found.first_at or '-'}")
        table.add_row("last commit (UTC)", f"{found.last_at or '-'}")
        table.add_row("memory (counter, stream, blobs)", human_bytes(found.memory_bytes))
        records = f"{found.idempotency_records} ({human_bytes(found.idempotency_bytes)})"
        table.add_row("idempotency records", records)
    else:
        conversations = appended = damaged = 0
        for count in _counts(client, settings.prefix, scope):
            conversations += 1
            appended += max(count, 0)
            damaged += count < 0
        server = client.info("server")
        if settings.cluster:  # one INFO per primary, keyed by node
            per_node: Any = cast(Any, client).info("memory", target_nodes="primaries")
            memories = list(per_node.values())
        else:
            memories = [client.info("memory")]
        used = sum(int(m["used_memory"]) for m in memories)
        table.add_row("conversations", str(conversations))
        # The last seqs summed: what was appended, not what the logs hold after trims.
        not_counted = f" ({_count(damaged, 'damaged counter')} not counted)" if damaged else ""
        table.add_row("entries appended (edits included)", f"{appended}{not_counted}")
        where_url = shown_url(settings.url or DEFAULT_URL)
        table.add_row("server", f"{server.get('redis_version')} ({safe_text(where_url)})")
        where = f"{len(memories)} primaries" if settings.cluster else "whole server"
        table.add_row(f"used memory ({where})", human_bytes(used))
        table.add_row("maxmemory policy", str(memories[0].get("maxmemory_policy")))
    out.print(table)


@click.command()
@click.argument("conversation", required=False)
@click.option("--all", "check_all", is_flag=True, help="Every conversation under the prefix.")
@click.option("--scope", help="Every conversation of this scope, from its index (no SCAN).")
@click.option(
    "--repair",
    is_flag=True,
    help="Add a scoped conversation missing from its scope's indexes to them.",
)
@connection_options
def verify(
    settings: Settings,
    conversation: str | None,
    check_all: bool,
    scope: str | None,
    repair: bool,
) -> None:
    """Check that the seq counter matches the stream, seqs are contiguous from 1, every
    entry decodes and a scoped conversation is in its scopes' indexes. Exit code 1, with a
    precise report, when not (``--repair``: a conversation missing from its indexes is
    added to them, and counts as repaired). --all: every conversation (SCAN); --scope:
    a scope's, from its index (what a tenant's ACL user checks)."""
    if (conversation is not None) + check_all + (scope is not None) != 1:
        raise click.UsageError("give a CONVERSATION, --all or --scope (one of them)")
    check_all = conversation is None
    client = settings.client()
    names: Iterable[str] = (
        [conversation] if conversation is not None else _names(client, settings.prefix, scope)
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
            out.print(Text.assemble("FAIL  ", safe_text(name), ": ", safe_text(describe(exc))))
            continue
        if repair and report.scope is not None and report.missing_indexes:
            Directory(client, prefix=settings.prefix).register(name, report.scope)
            out.print(Text.assemble("fixed ", safe_text(name), ": added to its scope's indexes"))
            report = admin.verify_conversation(client, settings.prefix, name)
        if report.ok:
            out.print(Text.assemble("ok    ", safe_text(name), ": ", _verified(report)))
        else:
            failed += 1
            counter = DAMAGED if report.counter is None else f"seq counter {report.counter}"
            summary = f": {_count(report.entries, 'entry', 'entries')}, {counter}"
            out.print(Text.assemble("FAIL  ", safe_text(name), summary))
            for problem in report.problems:
                out.print(Text.assemble("      - ", safe_text(problem)))
    if check_all:
        out.print(f"{_count(checked, 'conversation')} checked, {failed} with problems")
    if failed:
        sys.exit(1)


def _names(client: redis.Redis, prefix: str, scope: str | None) -> Iterator[str]:
    """Every conversation's id: a scope's from its index, else the prefix's (SCAN)."""
    if scope is not None:
        for found in scope_conversations(client, prefix, scope_of_text(scope)):
            yield found.conversation
    else:
        for info in scanned(admin.list_conversations(client, prefix)):
            yield info.conversation


def _counts(client: redis.Redis, prefix: str, scope: str | None) -> Iterator[int]:
    """Every conversation's last seq (-1: a damaged counter), as :func:`_names` finds them."""
    if scope is not None:
        for found in scope_conversations(client, prefix, scope_of_text(scope)):
            yield found.last_seq
    else:
        for info in scanned(admin.list_conversations(client, prefix)):
            yield info.count


def _count(n: int, one: str, many: str | None = None) -> str:
    """``"1 entry"``, ``"12 entries"``."""
    return f"{n} {one if n == 1 else many or one + 's'}"


def _seqs(first: int, last: int, redacted: int) -> str:
    """The seqs a log holds: ``"seqs 1..18"``, ``"seqs 7..18, 1..6 trimmed"``, and how
    many of them are redacted (their entries gone, marker rows in their place)."""
    if last < first:
        return "no seqs"
    held = f"seq {last}" if first == last else f"seqs {first}..{last}"
    if first == 2:
        held += ", seq 1 trimmed"
    elif first > 2:
        held += f", 1..{first - 1} trimmed"
    return held + (f", {redacted} redacted" if redacted else "")


def _verified(report: admin.VerifyReport) -> str:
    """What a sound log holds: ``"12 entries (seqs 7..18, 1..6 trimmed)"``."""
    if report.erased:
        return "erased (its tombstone stands; no entries)"
    if report.values:
        return f"{_count(report.values, 'value', 'values')} kept in place (no log)"
    held = _seqs(report.first_seq, report.last_seq, report.redacted)
    return f"{_count(report.entries, 'entry', 'entries')} ({held})"


def _held(found: admin.ConversationStats) -> str:
    """The ``entries`` line of ``stats CONV``: how many the stream holds, and their seqs
    (the last seq is the counter: every entry ever appended, edits included)."""
    if found.erased:
        return "0 (erased)"
    if found.count < 0:
        return f"{DAMAGED}; {found.entries} in the stream (see verify)"
    return f"{found.entries} ({_seqs(found.first_seq, found.count, found.redacted)})"
