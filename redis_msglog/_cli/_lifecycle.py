"""The lifecycle commands: ``erase`` (one conversation, after a confirmation; see
docs/lifecycle.md)."""

from __future__ import annotations

import re
import sys
from datetime import timedelta

import click

from .._core.lifecycle.scope import scope_of_text
from .._sync import Directory
from .._tools.render import visible
from ..errors import InvalidArgumentError
from ._common import CliError, Settings, connection_options, out, report_skipped

_DURATION = re.compile(r"(\d{1,9})(ms|s|m|h|d)")
_UNITS = {
    "ms": timedelta(milliseconds=1),
    "s": timedelta(seconds=1),
    "m": timedelta(minutes=1),
    "h": timedelta(hours=1),
    "d": timedelta(days=1),
}


def parse_duration(text: str) -> timedelta:
    """``"24h"``, ``"90m"``, ``"7d"``, ``"1h30m"``...: a sum of numbers with units ``ms``,
    ``s``, ``m``, ``h``, ``d``; a :class:`CliError` for anything else."""
    parts = _DURATION.findall(text)
    if not text or "".join(n + unit for n, unit in parts) != text:
        raise CliError(
            f"--erased-for: {visible(text)!r} is not a duration (e.g. 24h, 90m, 7d, 1h30m)"
        )
    return sum((int(n) * _UNITS[unit] for n, unit in parts), timedelta())


def at_terminal() -> bool:
    """Whether a person can answer a question (stdin is a terminal)."""
    return sys.stdin.isatty()


def confirmed(
    what: str, yes: bool, verb: tuple[str, str, str] = ("erase", "erasing", "erased")
) -> None:
    """Go on only with ``--yes``, or a "y" typed at a terminal; otherwise a
    :class:`CliError` (exit status 1) and nothing is done. ``verb``: what is done, as
    ("erase", "erasing", "erased")."""
    if yes:
        return
    do, doing, done = verb
    if not at_terminal():
        raise CliError(f"not {done}: {doing} {what} needs --yes when no terminal can confirm it")
    if not click.confirm(
        f"{do.capitalize()} {what}? This cannot be undone", default=False, err=True
    ):
        raise CliError(f"not {done}: {what} was left as it was")


@click.command()
@click.argument("conversation", required=False)
@click.option(
    "--scope",
    "scope_text",
    metavar="SCOPE",
    help="Erase every conversation of this scope and its sub-scopes (e.g. acme/user-42).",
)
@click.option(
    "--erased-for",
    default="24h",
    show_default=True,
    help="How long the tombstone refuses writes into the id (e.g. 90m, 7d; at least 1s).",
)
@click.option("--yes", is_flag=True, help="Erase without asking for a confirmation.")
@click.option(
    "--scan-records",
    is_flag=True,
    help="Also SCAN for idempotency records written by versions before the records set.",
)
@connection_options
def erase(
    settings: Settings,
    conversation: str | None,
    scope_text: str | None,
    erased_for: str,
    yes: bool,
    scan_records: bool,
) -> None:
    """Erase CONVERSATION (every key it has, in one atomic call, leaving a tombstone that
    refuses writes into it for --erased-for), or with --scope every conversation of a
    scope and its sub-scopes and then its index. Asks first, unless --yes; without a
    terminal to ask on, --yes is required.

    \b
    Docs: https://github.com/redis-msglog/redis-msglog/blob/main/docs/lifecycle.md"""
    if (conversation is None) == (scope_text is None):
        raise CliError("give a CONVERSATION or --scope SCOPE (one of them)")
    lifetime = parse_duration(erased_for)
    if scope_text is not None:
        _erase_scope(settings, scope_text, (lifetime, erased_for), yes, scan_records)
        return
    assert conversation is not None
    log = settings.log(conversation)  # the id and the prefix checked before asking
    what = f"conversation {visible(conversation)!r}"
    confirmed(what, yes)
    erasure = log._erase_and_unindex(lifetime, scan_records=scan_records)
    out.print(
        f"erased {what}: {erasure.deleted} keys deleted; tombstone {visible(log.keys.seq)} "
        f"refuses writes for {erased_for}",
        markup=False,
    )


def _erase_scope(
    settings: Settings,
    scope_text: str,
    erased_for: tuple[timedelta, str],
    yes: bool,
    scan_records: bool,
) -> None:
    try:
        scope = scope_of_text(scope_text)
    except InvalidArgumentError as exc:
        raise CliError(f"--scope: {exc}") from exc
    directory = Directory(settings.client(), prefix=settings.prefix)
    what = f"scope {visible(scope_text)!r} (every conversation of it and below)"
    confirmed(what, yes)
    erased = directory.erase(scope, erased_for=erased_for[0], scan_records=scan_records)
    out.print(
        f"erased {what}: {len(erased)} conversations; the scope refuses new ones for "
        f"{erased_for[1]}",
        markup=False,
    )
    report_skipped(erased.skipped, "not erased")
