"""The commands that delete part of a conversation: ``redact`` (one message) and
``trim`` (the oldest entries), each after a confirmation (docs/lifecycle.md)."""

from __future__ import annotations

import click

from .._tools.render import visible
from ._common import Settings, connection_options, out
from ._lifecycle import confirmed


@click.command()
@click.argument("conversation")
@click.argument("seq", type=click.IntRange(min=1))
@click.option("--reason", help="Why, kept in the redact entry (never the content).")
@click.option("--yes", is_flag=True, help="Redact without asking for a confirmation.")
@connection_options
def redact(settings: Settings, conversation: str, seq: int, reason: str | None, yes: bool) -> None:
    """Redact message SEQ of CONVERSATION: its content is removed from Redis (and the
    blobs only it used) and a row marked redacted, content "[redacted]", takes its place,
    recorded by one redact entry. Asks first, unless --yes; without a terminal to ask
    on, --yes is required.

    \b
    Docs: https://github.com/redis-msglog/redis-msglog/blob/main/docs/lifecycle.md"""
    log = settings.log(conversation)  # the id and the prefix checked before asking
    what = f"seq {seq} of conversation {visible(conversation)!r}"
    confirmed(what, yes, ("redact", "redacting", "redacted"))
    entry = log.redact(seq, reason=reason)
    out.print(f"redacted {what} (redact entry: seq {entry})", markup=False)


@click.command()
@click.argument("conversation")
@click.argument("through_seq", type=click.IntRange(min=1))
@click.option("--yes", is_flag=True, help="Trim without asking for a confirmation.")
@connection_options
def trim(settings: Settings, conversation: str, through_seq: int, yes: bool) -> None:
    """Trim CONVERSATION through THROUGH_SEQ: every entry up to it is removed from Redis
    (and the blobs only they used), recorded by one trim entry; reads then start after
    it. Asks first, unless --yes; without a terminal to ask on, --yes is required.

    \b
    Docs: https://github.com/redis-msglog/redis-msglog/blob/main/docs/lifecycle.md"""
    log = settings.log(conversation)
    what = f"the entries up to seq {through_seq} of conversation {visible(conversation)!r}"
    confirmed(what, yes, ("trim", "trimming", "trimmed"))
    entry = log.trim(through_seq)
    out.print(f"trimmed {what} (trim entry: seq {entry})", markup=False)
