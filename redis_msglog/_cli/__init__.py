"""The ``msglog`` command (also ``python -m redis_msglog``): the demo, and the tools an
operator needs to look at conversations without writing Python.
The group is here; its commands are in the modules beside it."""

from __future__ import annotations

import click

from .. import __version__
from ._acl import acl
from ._common import DEFAULT_URL, MsglogGroup, Settings
from ._deletions import redact, trim
from ._health import stats, verify
from ._lifecycle import erase
from ._read import list_command, show, tail
from ._run import demo, serve
from ._transfer import export, import_command
from ._usage import usage

__all__ = ["main"]


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


for _command in (
    acl,
    demo,
    list_command,
    show,
    tail,
    serve,
    export,
    import_command,
    stats,
    verify,
    erase,
    redact,
    trim,
    usage,
):
    main.add_command(_command)
