"""The ACL rules of a user confined to what this library does.

An explicit allow-list: every command the library, its scripts (a script's commands are
checked one by one, under the caller's user), the integrations, the cluster client and
the ``msglog`` command send, and nothing else. ``FLUSHALL``, ``FLUSHDB``, ``SWAPDB``,
``CLIENT KILL``/``PAUSE``, ``FUNCTION``, ``SCRIPT``, ``CONFIG``, ``DEBUG``, ``KEYS``,
``DEL`` and every other command are refused (``UNLINK`` is allowed: ``log.erase()``
deletes a conversation's keys with it). ``tests/contract/test_acl.py`` runs every public
operation and ``msglog`` command under these rules and checks the refusals.

A tenant's rules grant no command that lists the keyspace (``SCAN``: Redis does not
filter its reply by the user's key patterns); what lists conversations under a tenant
reads a scope's index instead (docs/security.md, "Tenants").
"""

from __future__ import annotations

import re
from typing import Any

import redis
import redis.cluster

from .._core.args import is_int, shown
from .._core.stored.keys import _GLOB_SPECIAL, ConversationKeys
from ..errors import InvalidArgumentError

# Each group: why the library sends it.
_CONNECTION = (
    "auth", "hello", "ping", "select",  # connecting: a URL's user, RESP3, a URL's /db
    "client|setinfo", "client|setname",  # redis-py names its connection (own connection only)
)  # fmt: skip
_SCRIPTS = ("evalsha", "eval")  # the append and view scripts (EVAL after NOSCRIPT)
_IN_SCRIPTS = (  # what lua/*.lua call (append, view and their included libs)
    "time", "type", "exists", "get", "set", "incrby", "pexpire",
    "pttl",  # a redaction's rewrite of the stream keeps the stream's expiry
    "xadd", "xrange", "xrevrange", "xlen",
    "hget", "hexists", "hset", "hsetnx", "hdel", "hlen", "hrandfield",
    "zadd", "zrem", "zrangebyscore", "zrevrangebyscore",
    "publish", "spublish",  # the commit events (sharded on a cluster)
    "unlink",  # erase.lua, and the erasure's leftover idempotency records (docs/lifecycle.md)
)  # fmt: skip
_READS = (
    "xread",  # follow(), subscribe(), msglog tail -f
    "hmget", "hgetall",  # blobs of a page; a view's attributes; the drafts in progress
    "hkeys",  # erase: the drafts' delta streams, unlinked with the conversation
    "hscan",  # msglog verify: the producers hash
    "scan",  # msglog ls/verify --all/stats, erase (idempotency records): not for tenants
    "zrange", "zscore",  # Directory.list (a scope's index); verify: a scoped one's entries
    "memory|usage", "info",  # msglog stats
    # COMMAND (metadata only): the cluster client's key table; Durability(aof=True)
    # asks COMMAND INFO WAITAOF.
    "command",
)  # fmt: skip
_DURABILITY = ("wait", "waitaof")
# trim() and redact() delete entries (docs/lifecycle.md): granted only with
# acl_rules(deletions=True).
DELETION_COMMANDS: tuple[str, ...] = ("xtrim", "xdel", "xsetid")
_EVENTS = ("subscribe", "unsubscribe", "ssubscribe", "sunsubscribe")  # redis-cli SUBSCRIBE
_CLUSTER = (  # a cluster client: the topology, redirections, reads from replicas
    "cluster|slots", "cluster|shards", "asking", "readonly", "readwrite",
)  # fmt: skip

LIBRARY_COMMANDS: tuple[str, ...] = (
    *_CONNECTION, *_SCRIPTS, *_IN_SCRIPTS, *_READS, *_DURABILITY, *_EVENTS, *_CLUSTER
)  # fmt: skip

# What a tenant is not granted: SCAN shows every key name of the database, whatever the
# user's key patterns (msglog ls --scope and the Pydantic AI store's scope read a scope's
# index instead; an erasure leaves the idempotency records it cannot find to expire).
KEYSPACE_COMMANDS = frozenset({"scan"})

# Commands Redis 7.0 does not have (ACL SETUSER refuses an unknown name).
_SINCE_7_2 = frozenset({"client|setinfo", "waitaof"})

_TENANT = re.compile(r"[A-Za-z0-9_.-]{1,200}")


def acl_rules(
    prefix: str = "msglog",
    *,
    tenant: str | None = None,
    redis_version: tuple[int, int] = (7, 2),
    deletions: bool = False,
) -> list[str]:
    """``ACL SETUSER <user> on ><password> <rules...>`` rules that allow exactly what this
    library does under ``prefix`` (docs/durability.md#security) and refuse every other
    command: the keys and channels under ``prefix``, or with ``tenant`` only those of the
    conversations whose id starts with ``"<tenant>:"`` (tenant ``acme`` owns
    ``acme:conv-1``, never ``acme2:conv-1``), and the indexes of the scopes whose
    outermost part is the tenant (``<prefix>:{acme:}:...``: ``scope=("acme", ...)``,
    docs/lifecycle.md). A tenant is letters, digits, ``_``, ``.``
    and ``-`` (no ``:``, so no tenant's ids are inside another's). ``redis_version``
    below ``(7, 2)`` (Redis 7.0) leaves out the commands that server does not know
    (``WAITAOF``, ``CLIENT SETINFO``), which ``ACL SETUSER`` would refuse; Valkey is 7.2.
    ``deletions``: also what ``trim()`` and ``redact()`` need to delete entries
    (``XTRIM``, ``XDEL``, inside the append script); without it a trim or a redaction is
    refused by the ACL and writes nothing.

    With ``tenant``, ``SCAN`` is left out (it lists every key name of the database, which
    key patterns do not filter): list a tenant's conversations from its scope's index
    (``Directory``, ``msglog ls --scope acme``). :func:`acl_rules_for` reads
    ``redis_version`` from the server."""
    ConversationKeys.build(prefix, "x")  # validates the prefix
    if not (
        isinstance(redis_version, tuple)
        and len(redis_version) == 2
        and all(is_int(part) and part >= 0 for part in redis_version)
    ):
        raise InvalidArgumentError(
            f"redis_version must be (major, minor), got {shown(redis_version)}"
        )
    scope = prefix.translate(_GLOB_SPECIAL) + ":"
    if tenant is not None:
        if not isinstance(tenant, str) or not _TENANT.fullmatch(tenant):
            raise InvalidArgumentError(
                f"tenant must be 1 to 200 letters, digits, '_', '.' or '-', got {shown(tenant)}"
            )
        # The hash tag starts right after "<prefix>:{" and holds the escaped id, which
        # never contains a brace: the pattern covers that tenant's conversations only.
        scope += "{" + tenant + ":"
    return [
        "resetkeys", f"~{scope}*", "resetchannels", f"&{scope}*", "-@all",
        *(
            f"+{command}"
            for command in LIBRARY_COMMANDS
            if (redis_version >= (7, 2) or command not in _SINCE_7_2)
            and (tenant is None or command not in KEYSPACE_COMMANDS)
        ),
        *(f"+{command}" for command in DELETION_COMMANDS if deletions is True),
    ]  # fmt: skip


def acl_rules_for(
    client: Any,
    prefix: str = "msglog",
    *,
    tenant: str | None = None,
    deletions: bool = False,
) -> list[str]:
    """:func:`acl_rules` for the server ``client`` (a sync ``redis.Redis`` or
    ``RedisCluster``, of a user that may run ``INFO``) is connected to: its
    ``redis_version`` read with ``INFO server`` (a cluster: the lowest of its nodes), so
    that ``ACL SETUSER`` accepts every rule (Redis 7.0 knows no ``WAITAOF`` or ``CLIENT
    SETINFO``; Valkey reports the Redis version it matches)."""
    if not isinstance(client, (redis.Redis, redis.cluster.RedisCluster)):
        raise InvalidArgumentError(
            f"client must be a sync redis.Redis or RedisCluster, got {type(client).__name__}"
        )
    return acl_rules(
        prefix, tenant=tenant, redis_version=server_version(client), deletions=deletions
    )


def server_version(client: Any) -> tuple[int, int]:
    """``(major, minor)`` of ``redis_version`` in ``INFO server`` (a cluster client's
    reply, one per node: the lowest)."""
    info = client.info("server")
    found = [info] if "redis_version" in info else [v for v in info.values() if isinstance(v, dict)]
    versions = []
    for node in found:
        parts = str(node.get("redis_version", "")).split(".")
        if len(parts) < 2 or not (parts[0].isdigit() and parts[1].isdigit()):
            raise InvalidArgumentError(
                f"the server's INFO gives no redis_version: {shown(node.get('redis_version'))}"
            )
        versions.append((int(parts[0]), int(parts[1])))
    if not versions:
        raise InvalidArgumentError("the server's INFO server reply has no redis_version")
    return min(versions)
