"""The checks made once before appends: whether the server's eviction policy may drop a
conversation's keys (once per client, reported for the shell to warn), and whether it
can honour ``Durability(aof=True)`` (once per log, refused before anything is written).
Both read ``INFO``; a server that does not let us look is given the benefit of the
doubt."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from ... import errors
from ..._lua import contract as script
from ..read.roundtrip import Reader
from ..steps import Command, NotSent, Plan, Refused
from ..stored.entries import text


def check_durability_support(reader: Reader) -> Plan[None]:
    """Before the first append under ``Durability(aof=True)``: refuse (writing nothing)
    if the server has no ``WAITAOF`` or runs with ``appendonly no``. A server that
    does not let us look (ACL) is given the benefit of the doubt."""
    info = yield from _optional_read(reader, ("COMMAND", "INFO", "WAITAOF"), patient=True)
    if info is not None and (not info or info[0] is None):
        raise errors.DurabilityUnsupportedError(
            "Durability(aof=True) needs WAITAOF (Redis 7.2+ or Valkey); this server has "
            "none. Nothing was written."
        )
    # INFO, not CONFIG GET: the documented ACL user may read it (docs/durability.md).
    info = yield from _optional_read(reader, ("INFO", "persistence"), patient=True)
    if info_field(info, "aof_enabled") == "0":
        raise errors.DurabilityUnsupportedError(
            "Durability(aof=True) needs appendonly yes on the server; it is off, so "
            "WAITAOF could never succeed. Nothing was written."
        )


def eviction_risk(reader: Reader, ttl: timedelta | None) -> Plan[str | None]:
    """Why the server may evict this library's keys under memory pressure, or
    ``None``. Silent when ``INFO`` is not allowed or the server is away (the
    append itself reports that)."""
    try:
        reply = yield from _optional_read(reader, ("INFO", "memory"), patient=False)
    except errors.ServerUnavailableError:
        return None
    policy = info_field(reply, "maxmemory_policy")
    if policy.startswith("allkeys-") or (policy.startswith("volatile-") and ttl):
        return (
            f"maxmemory-policy is {policy}: under memory pressure Redis may evict a "
            f"conversation's keys (a lost counter heals from the stream; a lost stream "
            f"loses the conversation). Message logs want noeviction."
        )
    return None


def _optional_read(reader: Reader, command: Command, *, patient: bool) -> Plan[Any]:
    """The reply, or ``None`` if the server refuses the command (ACL, unknown). Re-sent
    under the retry policy if ``patient``, else tried once."""
    try:
        (reply,) = yield from reader.read_raw((command,), patient=patient)
    except Refused as refused:
        if refused.code in ("NOAUTH", "WRONGPASS"):  # the call itself would fail so
            raise script.error_for(refused, reader.keys) from refused.origin
        return None
    except NotSent as failure:
        raise reader.error_for(failure) from (failure.origin or failure)
    return reply


def info_field(reply: Any, name: str) -> str:
    """The value of ``name`` in an ``INFO`` reply (``name:value`` lines), or ``""``."""
    for line in text(reply or b"").splitlines():
        key, _, value = line.partition(":")
        if key == name:
            return value.strip()
    return ""
