"""A real local Redis Cluster for the tests (``EphemeralCluster``), with the faults the
tests inject: moving a slot between primaries, and failing a primary over."""

from __future__ import annotations

import time
from typing import Any

import redis.cluster

from redis_msglog.testing import EphemeralCluster, EphemeralServer, _wait


class LocalCluster(EphemeralCluster):
    """3 primaries with a replica each, by default."""

    @property
    def primaries(self) -> list[EphemeralServer]:
        return [s for s in self.servers if self.admin(s).info("replication")["role"] == "master"]

    def client(self, **options: Any) -> redis.cluster.RedisCluster:
        return redis.cluster.RedisCluster(host="127.0.0.1", port=self.port, **options)

    def owner(self, slot: int) -> EphemeralServer:
        """The primary serving ``slot``."""
        for start, end, primary, *_replicas in self.admin(self.servers[0]).execute_command(
            "CLUSTER", "SLOTS"
        ):
            if start <= slot <= end:
                return next(s for s in self.servers if s.port == int(primary[1]))
        raise LookupError(slot)

    def migrate_slot(
        self, slot: int, target: EphemeralServer, batch: int = 10, pause: float = 0.0
    ) -> None:
        """Move ``slot`` to ``target`` the way ``redis-cli --cluster reshard`` does:
        IMPORTING/MIGRATING, MIGRATE the keys in batches (``pause`` seconds apart, as
        under a busy real cluster), then SETSLOT NODE everywhere."""
        source = self.owner(slot)
        if source.port == target.port:
            return
        src, dst = self.admin(source), self.admin(target)
        dst.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", self.node_id(source))
        src.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", self.node_id(target))
        while keys := src.execute_command("CLUSTER", "GETKEYSINSLOT", slot, batch):
            src.execute_command("MIGRATE", "127.0.0.1", target.port, "", 0, 5000, "KEYS", *keys)
            time.sleep(pause)
        for server in self.primaries:
            self.admin(server).execute_command(
                "CLUSTER", "SETSLOT", slot, "NODE", self.node_id(target)
            )

    def replica_of(self, primary: EphemeralServer) -> EphemeralServer:
        for server in self.servers:
            info = self.admin(server).info("replication")
            if info["role"] == "slave" and info.get("master_port") == primary.port:
                return server
        raise LookupError(f"no replica of the node on port {primary.port}")

    def failover(self, primary: EphemeralServer) -> EphemeralServer:
        """A manual failover (``CLUSTER FAILOVER`` on the replica): the replica catches up
        first, so no acknowledged write is lost. Returns the promoted node."""
        replica = self.replica_of(primary)
        self.admin(replica).execute_command("CLUSTER", "FAILOVER")
        _wait(lambda: self.admin(replica).info("replication")["role"] == "master", "failover")
        self.wait_healthy()
        return replica
