"""The ``usage`` command: the usage totals (tokens, cost) of one conversation or of a
scope (docs/usage.md)."""

from __future__ import annotations

import click
from rich.table import Table

from .._core.lifecycle.scope import scope_of_text
from .._sync import Directory
from ..models import Usage
from ._common import CLI_RETRY, Settings, connection_options, out


@click.command()
@click.argument("conversation", required=False)
@click.option("--scope", help="Totals of this scope's conversations, from its index (no SCAN).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object instead of a table.")
@connection_options
def usage(settings: Settings, conversation: str | None, scope: str | None, as_json: bool) -> None:
    """Usage totals of one conversation (tokens, cost), or of a scope's conversations and
    its sub-scopes' (with --scope: what a tenant is billed)."""
    if (conversation is None) == (scope is None):
        raise click.UsageError("give a CONVERSATION or --scope (one of them)")
    if conversation is not None:
        totals = settings.log(conversation).usage()
    else:
        directory = Directory(settings.client(), prefix=settings.prefix, retry=CLI_RETRY)
        totals = directory.usage(scope_of_text(str(scope)))
    if as_json:
        click.echo(totals.model_dump_json())
        return
    out.print(_table(totals))


def _table(totals: Usage) -> Table:
    table = Table(box=None, show_header=False)
    table.add_row("input tokens", f"{totals.input_tokens:,}")
    table.add_row("  of them cached", f"{totals.cached_tokens:,}")
    table.add_row("output tokens", f"{totals.output_tokens:,}")
    table.add_row("  of them reasoning", f"{totals.reasoning_tokens:,}")
    cost = "-" if totals.cost is None else f"{totals.cost:.9f}".rstrip("0").rstrip(".")
    table.add_row("cost", cost if totals.currency is None else f"{cost} {totals.currency}")
    return table
