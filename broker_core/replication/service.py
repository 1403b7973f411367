"""Which partitions this broker leads or follows, from the placement (issue 20, item 2).

A partition of two or more replicas has a `PartitionLeader` on the broker its placement names first and a
`PartitionFollower` on every other replica. Leaders are static here (the placement's first replica): electing
another one when it dies is issue 20 item 2's next step (`/partition-state`, docs/zookeeper-layout.md).
`min_insync` is the cluster's (`/meta`); the cluster secret comes from `SWITCHYARD_BROKER_CLUSTER_SECRET` or the
mode-600 file `SWITCHYARD_BROKER_CLUSTER_SECRET_FILE` names (never argv).
"""

from __future__ import annotations

import logging

from broker_core.replication.follower import PartitionFollower
from broker_core.replication.leader import PartitionLeader
from broker_core.secret_source import read_secret

log = logging.getLogger("broker_core.replication")

SECRET_VAR = "SWITCHYARD_BROKER_CLUSTER_SECRET"


class Replication:
    def __init__(self, state, node_id, heartbeat_s: float = 1.0):
        self.state = state
        self.node_id = node_id  # a callable: the node id is known once the broker starts
        self.secret = read_secret(SECRET_VAR, default="") or ""
        self.heartbeat_s = heartbeat_s
        self.leaders: dict[tuple[str, int], PartitionLeader] = {}
        self.followers: dict[tuple[str, int], PartitionFollower] = {}

    def min_insync(self) -> int:
        return int((self.state.meta or {}).get("min_insync") or 1)

    def _leader_address(self, topic: str, partition: int):
        node = self.state.leader_of(topic, partition)
        info = self.state.brokers.get(node or "")
        return (info["host"], int(info["port"])) if info else None

    def refresh(self, name: str, topic) -> None:
        """Lead or follow the topic's replicated partitions this broker holds, as its placement says now."""
        me = self.node_id()
        for pid, replicas in (self.state.placements.get(name) or {}).items():
            key, store = (name, pid), topic.store.stores.get(pid)
            if len(replicas) < 2 or store is None:
                continue
            if replicas[0] == me and key not in self.leaders:
                self._stop_following(key)
                self.leaders[key] = PartitionLeader(name, pid, store, self.min_insync)
            elif replicas[0] != me and key not in self.followers:
                self.leaders.pop(key, None)
                if not self.secret:
                    log.error("topic %s partition %d: this broker follows it but has no cluster secret (%s_FILE): "
                              "it cannot replicate", name, pid, SECRET_VAR)
                    continue
                follower = PartitionFollower(name, pid, store, me, lambda n=name, q=pid: self._leader_address(n, q),
                                             self.secret, self.heartbeat_s)
                self.followers[key] = follower
                follower.start()
        topic.leaders = {pid: leader for (t, pid), leader in self.leaders.items() if t == name}

    def forget(self, name: str) -> None:
        for key in [k for k in self.leaders if k[0] == name]:
            del self.leaders[key]
        for key in [k for k in self.followers if k[0] == name]:
            self._stop_following(key)

    def _stop_following(self, key) -> None:
        follower = self.followers.pop(key, None)
        if follower is not None:
            follower.stop()

    # -- a follower's connection ---------------------------------------------------------------

    def fetch(self, conn, ev) -> None:
        leader = self.leaders.get((ev.topic, ev.partition))
        if leader is None:
            conn.error(None, "not_leader", f"this broker does not lead partition {ev.partition} of {ev.topic!r}")
            return
        leader.fetch(conn, ev.from_seq)

    def stored(self, conn, ev) -> None:
        leader = self.leaders.get((ev.topic, ev.partition))
        if leader is not None:
            leader.stored(conn, ev.through_seq)

    def gone(self, conn) -> None:
        for leader in self.leaders.values():
            leader.gone(conn)

    def tick(self, now: float) -> None:
        for leader in self.leaders.values():
            leader.tick(now)

    def stop(self) -> None:
        for key in list(self.followers):
            self._stop_following(key)

    def stats(self, name: str) -> dict:
        return {"min_insync": self.min_insync(),
                "leading": {str(pid): leader.stats() for (t, pid), leader in self.leaders.items() if t == name},
                "following": {str(pid): f.stats() for (t, pid), f in self.followers.items() if t == name}}
