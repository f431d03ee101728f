"""The lifecycle commands: ``erase`` (one conversation, after a confirmation; see
docs/lifecycle.md)."""

from __future__ import annotations

import re
import sys
from datetime import timedelta

import click

from .._render import visible
from ._common import CliError, Settings, connection_options, out

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


def confirmed(what: str, yes: bool) -> None:
    """Go on only with ``--yes``, or a "y" typed at a terminal; otherwise a
    :class:`CliError` (exit status 1) and nothing is done."""
    if yes:
        return
    if not at_terminal():
        raise CliError(f"not erased: erasing {what} needs --yes when no terminal can confirm it")
    if not click.confirm(f"Erase {what}? This cannot be undone", default=False, err=True):
        raise CliError(f"not erased: {what} was left as it was")


@click.command()
@click.argument("conversation")
@click.option(
    "--erased-for",
    default="24h",
    show_default=True,
    help="How long the tombstone refuses writes into the id (e.g. 90m, 7d; at least 1s).",
)
@click.option("--yes", is_flag=True, help="Erase without asking for a confirmation.")
@connection_options
def erase(settings: Settings, conversation: str, erased_for: str, yes: bool) -> None:
    """Erase CONVERSATION: every key it has, in one atomic call, leaving a tombstone that
    refuses writes into it for --erased-for (docs/lifecycle.md). Asks first, unless
    --yes; without a terminal to ask on, --yes is required."""
    # A later `--scope acme/user-42` (a scope's every conversation) goes beside this
    # argument, the two mutually exclusive; the confirmation is the same.
    lifetime = parse_duration(erased_for)
    log = settings.log(conversation)  # the id and the prefix checked before asking
    what = f"conversation {visible(conversation)!r}"
    confirmed(what, yes)
    erasure = log._erase(lifetime)
    out.print(
        f"erased {what}: {erasure.deleted} keys deleted; tombstone {visible(log.keys.seq)} "
        f"refuses writes for {erased_for}",
        markup=False,
    )
