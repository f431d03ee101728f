"""The health commands: ``stats`` (counts and memory) and ``verify``."""

from __future__ import annotations

import sys
from typing import Any, cast

import click
import redis
import redis.cluster
from rich.table import Table
from rich.text import Text

from .. import admin
from .._sync import Directory
from .._tools.render import human_bytes, safe_text
from ..errors import MessageLogError
from ._common import (
    DEFAULT_URL,
    Settings,
    connection_options,
    describe,
    out,
    shown_url,
)


@click.command()
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
        if found.erased:
            table.add_row("erased", "yes: a tombstone refuses writes until it expires")
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


@click.command()
@click.argument("conversation", required=False)
@click.option("--all", "check_all", is_flag=True, help="Every conversation under the prefix.")
@click.option(
    "--repair",
    is_flag=True,
    help="Add a scoped conversation missing from its scope's indexes to them.",
)
@connection_options
def verify(settings: Settings, conversation: str | None, check_all: bool, repair: bool) -> None:
    """Check that the seq counter matches the stream, seqs are contiguous from 1, every
    entry decodes and a scoped conversation is in its scopes' indexes. Exit code 1, with a
    precise report, when not (``--repair``: a conversation missing from its indexes is
    added to them, and counts as repaired)."""
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
            out.print(Text.assemble("FAIL  ", safe_text(name), ": ", safe_text(describe(exc))))
            continue
        if repair and report.scope is not None and report.missing_indexes:
            Directory(client, prefix=settings.prefix).register(name, report.scope)
            out.print(Text.assemble("fixed ", safe_text(name), ": added to its scope's indexes"))
            report = admin.verify_conversation(client, settings.prefix, name)
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
