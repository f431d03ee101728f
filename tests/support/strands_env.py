"""What the Strands integration tests share: a sync client per backend, ids, messages,
and every key (and byte) a session holds."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from strands.types.session import SessionMessage

from redis_msglog.testing import EphemeralServer

from ..conftest import backend_server, make_env
from .cluster import LocalCluster

BACKENDS = ["redis", "valkey", "fakeredis", "cluster", "acl"]  # acl: a restricted user


@contextmanager
def sync_client(
    backend: str,
    shared_server: Callable[[str], EphemeralServer],
    shared_cluster: Callable[[], LocalCluster],
) -> Iterator[Any]:
    """A sync client of ``backend`` (the ACL backend's: the restricted user)."""
    env = make_env(backend, "sync", backend_server(backend, shared_server, shared_cluster))
    made = env.make_sync_client()
    try:
        yield made
    finally:
        made.close()
        env.close()


def new_id() -> str:
    return f"st-{uuid.uuid4().hex[:12]}"


def message(text: str, index: int, role: str = "user") -> SessionMessage:
    return SessionMessage.from_message({"role": role, "content": [{"text": text}]}, index)  # type: ignore[typeddict-item]


def keys_of(client: Any, top: str) -> list[str]:
    """Every key of a session (its conversations and its scope's keys), by ``SCAN``
    (every node of a cluster)."""
    found = client.scan_iter(match=f"*{top}*", count=1000)
    return sorted({k.decode() if isinstance(k, bytes) else k for k in found})


def contents(client: Any, key: str) -> bytes:
    """Everything a key holds, as bytes (by its type: no compressed DUMP payload)."""
    kind = client.type(key)
    kind = kind.decode() if isinstance(kind, bytes) else kind
    if kind == "stream":
        return repr(client.xrange(key)).encode()
    if kind == "hash":
        return repr(client.hgetall(key)).encode()
    if kind == "zset":
        return repr(client.zrange(key, 0, -1)).encode()
    return repr(client.get(key)).encode()
