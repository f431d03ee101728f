"""A real local Redis Cluster for the tests: primaries (and replicas) started from the same
binaries as every other test server, on free ports, wired with CLUSTER ADDSLOTSRANGE,
MEET and REPLICATE (no redis-cli needed)."""

from __future__ import annotations

import time
from collections.abc import Callable

import redis
import redis.cluster

from redis_msglog.ephemeral import EphemeralServer

SLOTS = 16384


def _wait(condition: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"local cluster: timed out waiting for {what}")
        time.sleep(0.05)


class LocalCluster:
    """``primaries`` primaries with ``replicas`` replicas each; use as a context manager."""

    def __init__(self, binary: str, *, primaries: int = 3, replicas: int = 1) -> None:
        self.binary = binary
        self.primary_count = primaries
        self.replica_count = replicas
        self.servers: list[EphemeralServer] = []

    def __enter__(self) -> LocalCluster:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def admin(self, server: EphemeralServer) -> redis.Redis:
        return redis.Redis(port=server.port, decode_responses=True, socket_timeout=10)

    def node_id(self, server: EphemeralServer) -> str:
        return str(self.admin(server).execute_command("CLUSTER", "MYID"))

    def start(self) -> None:
        args = ["--cluster-enabled", "yes", "--cluster-node-timeout", "2000"]
        args += ["--cluster-config-file", "nodes.conf", "--enable-debug-command", "local"]
        total = self.primary_count * (1 + self.replica_count)
        self.servers = [EphemeralServer(self.binary, args).start() for _ in range(total)]
        primaries = self.servers[: self.primary_count]
        step = SLOTS // self.primary_count
        for index, server in enumerate(primaries):
            last = SLOTS - 1 if index == self.primary_count - 1 else (index + 1) * step - 1
            self.admin(server).execute_command("CLUSTER", "ADDSLOTSRANGE", index * step, last)
        first = self.admin(self.servers[0])
        for server in self.servers[1:]:
            first.execute_command("CLUSTER", "MEET", "127.0.0.1", server.port)
        _wait(lambda: all(self._known(s) == total for s in self.servers), "nodes to meet")
        for index, server in enumerate(self.servers[self.primary_count :]):
            primary = primaries[index % self.primary_count]
            self.admin(server).execute_command("CLUSTER", "REPLICATE", self.node_id(primary))
        _wait(self._healthy, "cluster_state:ok and replicas in sync")

    def _known(self, server: EphemeralServer) -> int:
        return len(str(self.admin(server).execute_command("CLUSTER", "NODES")).splitlines())

    def _healthy(self) -> bool:
        for server in self.servers:
            admin = self.admin(server)
            if admin.cluster("info")["cluster_state"] != "ok":
                return False
            role = admin.info("replication")
            if role["role"] == "slave" and role.get("master_link_status") != "up":
                return False
        return True

    def stop(self) -> None:
        for server in self.servers:
            server.stop()

    @property
    def primaries(self) -> list[EphemeralServer]:
        return [s for s in self.servers if self.admin(s).info("replication")["role"] == "master"]

    def client(self, **options: object) -> redis.cluster.RedisCluster:
        return redis.cluster.RedisCluster(
            host="127.0.0.1",
            port=self.servers[0].port,
            **options,  # type: ignore[arg-type]
        )

    def owner(self, slot: int) -> EphemeralServer:
        """The primary serving ``slot``."""
        for server in self.primaries:
            for start, end, *_ in self.admin(server).execute_command("CLUSTER", "SLOTS"):
                if start <= slot <= end and _port(_) == server.port:
                    return server
        raise LookupError(slot)

    def migrate_slot(self, slot: int, target: EphemeralServer, batch: int = 10) -> None:
        """Move ``slot`` to ``target`` the way ``redis-cli --cluster reshard`` does:
        IMPORTING/MIGRATING, MIGRATE the keys in batches, then SETSLOT NODE everywhere."""
        source = self.owner(slot)
        if source.port == target.port:
            return
        src, dst = self.admin(source), self.admin(target)
        dst.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", self.node_id(source))
        src.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", self.node_id(target))
        while keys := src.execute_command("CLUSTER", "GETKEYSINSLOT", slot, batch):
            src.execute_command("MIGRATE", "127.0.0.1", target.port, "", 0, 5000, "KEYS", *keys)
        for server in self.primaries:
            self.admin(server).execute_command(
                "CLUSTER", "SETSLOT", slot, "NODE", self.node_id(target)
            )

    def replica_of(self, primary: EphemeralServer) -> EphemeralServer:
        primary_id = self.node_id(primary)
        for server in self.servers:
            info = self.admin(server).info("replication")
            if info["role"] == "slave" and info.get("master_port") == primary.port:
                return server
        raise LookupError(f"no replica of {primary_id}")

    def failover(self, primary: EphemeralServer) -> EphemeralServer:
        """A manual failover (``CLUSTER FAILOVER`` on the replica): no acknowledged write
        is lost. Returns the promoted node."""
        replica = self.replica_of(primary)
        self.admin(replica).execute_command("CLUSTER", "FAILOVER")
        _wait(lambda: self.admin(replica).info("replication")["role"] == "master", "failover")
        _wait(self._healthy, "the cluster to settle after the failover")
        return replica


def _port(nodes: list[object]) -> int:
    return int(nodes[0][1]) if nodes and isinstance(nodes[0], list) else -1  # type: ignore[index]
