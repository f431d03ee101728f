"""The ``acl`` command: the ACL rules of a user confined to the library, for the server
at ``--url`` (its version read from it: Redis 7.0 refuses rules naming commands it does
not know)."""

from __future__ import annotations

import click

from .._tools.acl import acl_rules_for
from ._common import Settings, connection_options


@click.command("acl")
@click.option("--user", default="msglog-app", show_default=True, help="The ACL user's name.")
@click.option("--tenant", help="Only the conversations whose id starts with '<TENANT>:'.")
@click.option("--deletions", is_flag=True, help="Also what trim and redact need (XTRIM, XDEL).")
@connection_options
def acl(settings: Settings, user: str, tenant: str | None, deletions: bool) -> None:
    """Print the ACL SETUSER line of a user confined to what this library does under the
    prefix (or one tenant's conversations), fitted to the server's version (read with
    INFO server). Replace PASSWORD, then run it as an administrator (redis-cli).

    \b
    Docs: https://github.com/redis-msglog/redis-msglog/blob/main/docs/durability.md#security"""
    if not user or any(c.isspace() or not c.isprintable() for c in user):
        raise click.BadParameter("a user name is printable, without spaces", param_hint="--user")
    rules = acl_rules_for(settings.client(), settings.prefix, tenant=tenant, deletions=deletions)
    click.echo(" ".join(["ACL SETUSER", user, "on", ">PASSWORD", *rules]))
