"""The commands that run something until stopped: the ``demo`` and the web viewer
(``serve``)."""

from __future__ import annotations

import ipaddress
import sys

import click

from ._common import (
    CliError,
    Settings,
    connection_options,
    err,
    out,
)


@click.command()
@click.option("--workers", default=4, show_default=True, type=click.IntRange(1, 64))
@click.option("--turns", default=5, show_default=True, type=click.IntRange(1, 10_000))
@connection_options
def demo(settings: Settings, workers: int, turns: int) -> None:
    """Worker processes share one conversation while a follower prints it live; then
    the history, its provider payloads and a verified summary.

    With no --url and no $REDIS_URL it starts a private throwaway server."""
    from .._tools.demo import run_demo

    sys.exit(run_demo(settings.url, workers, turns, prefix=settings.prefix, console=out))


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=8000, show_default=True, type=click.IntRange(0, 65535))
@click.option("--allow", is_flag=True, help="Listen on a non-loopback address (no login!).")
@click.option(
    "--allow-host",
    "allow_hosts",
    multiple=True,
    metavar="NAME",
    help="Another name the Host header may give (repeatable); any other is refused.",
)
@click.option(
    "--max-followers",
    default=64,
    show_default=True,
    type=click.IntRange(1, 100_000),
    help="Conversations followed live at once (a Redis connection each).",
)
@connection_options
def serve(
    settings: Settings,
    host: str,
    port: int,
    allow: bool,
    allow_hosts: tuple[str, ...],
    max_followers: int,
) -> None:
    """The viewer page and the HTTP API for an operator, on loopback: every request is
    allowed, so a non-loopback --host needs --allow. Needs the `web` extra.

    \b
    Docs: https://github.com/redis-msglog/redis-msglog/blob/main/docs/web.md"""
    if not allow and not _is_loopback(host):
        raise CliError(
            f"{host} is not a loopback address: the viewer lets anyone who reaches it read "
            "every conversation; give --allow to listen there anyway"
        )
    try:
        import uvicorn

        from ..web import create_app
    except ModuleNotFoundError as exc:
        raise CliError("msglog serve needs the web extra: pip install 'redis-msglog[web]'") from exc
    client = settings.client()
    client.ping()  # a wrong URL fails now, in one line, not at the first page view
    # An operator tool: whoever reaches it may read (loopback unless --allow). The Host
    # check keeps pages of other sites out, even through DNS rebinding.
    hosts = served_hosts(host, allow_hosts)
    app = create_app(
        client,
        authorize=lambda request, conversation, action: True,
        prefix=settings.prefix,
        viewer=True,
        max_followers=max_followers,
        # A cluster client cannot be copied by the app: a second one for the followers.
        follower_client=settings.client() if settings.cluster else None,
        allowed_hosts=hosts,
    )
    err.print(f"msglog: serving http://{host}:{port}/ (Ctrl-C stops)")
    # Open event streams never end by themselves: Ctrl-C must not wait for the viewers.
    uvicorn.run(app, host=host, port=port, log_level="warning", timeout_graceful_shutdown=1)


def served_hosts(host: str, extra: tuple[str, ...]) -> list[str]:
    """The ``Host`` names ``msglog serve`` answers: the address it listens on (``0.0.0.0``
    or ``::``: every IP address), the loopback names when that is loopback, and ``extra``."""
    hosts = [host, *extra]
    if _is_loopback(host):
        hosts += ["localhost", "127.0.0.1", "::1"]
    return hosts


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
