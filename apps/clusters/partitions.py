"""A cluster's partitions as ZooKeeper holds them now (issue 20): per topic, each partition's leader, replicas
and in-sync replicas, and which are under-replicated.

`/placement/<topic>` (the control plane's) names the replicas; `/partition-state/<topic>/<p>` (the brokers',
once leaders are elected) the leader, its epoch and the ISR. Without a partition state the placement's first
replica leads, and every replica registered in `/brokers` counts as in sync. A partition is under-replicated
when fewer of its replicas are in sync than it has; offline when its leader is not registered.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from broker_core.layout import LAYOUT


@dataclass
class PartitionView:
    topic: str
    partition: int
    replicas: list[str]
    leader: str
    leader_epoch: int | None
    isr: list[str]
    offline: bool

    @property
    def under_replicated(self) -> bool:
        return len(self.isr) < len(self.replicas)


@dataclass
class TopicPartitions:
    topic: str
    epoch: int
    partitions: list[PartitionView] = field(default_factory=list)

    @property
    def under_replicated(self) -> int:
        return sum(p.under_replicated for p in self.partitions)


def _doc(zk: KazooClient, path: str) -> dict | None:
    try:
        data, _ = zk.get(path)
    except NoNodeError:
        return None
    try:
        doc = json.loads(data or b"{}")
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None


def _children(zk: KazooClient, path: str) -> list[str]:
    try:
        return sorted(zk.get_children(path))
    except NoNodeError:
        return []


def read_partitions(zk: KazooClient, chroot: str, registered: set[str]) -> list[TopicPartitions]:
    """Every placed topic of the cluster under `chroot`, `registered` being the node ids in `/brokers`."""
    out = []
    for topic in _children(zk, chroot + LAYOUT.PLACEMENT):
        placement = _doc(zk, chroot + LAYOUT.placement(topic))
        if placement is None:
            continue
        view = TopicPartitions(topic, int(placement.get("epoch") or 0))
        for part in placement.get("partitions") or []:
            pid, replicas = int(part["id"]), [str(r) for r in part.get("replicas") or []]
            state = _doc(zk, chroot + LAYOUT.partition_state(topic, pid)) or {}
            leader = str(state.get("leader") or (replicas[0] if replicas else ""))
            isr = [str(r) for r in state["isr"]] if isinstance(state.get("isr"), list) else list(replicas)
            isr = [r for r in isr if r in registered]
            view.partitions.append(PartitionView(topic, pid, replicas, leader, state.get("leader_epoch"), isr,
                                                 offline=leader not in registered))
        out.append(view)
    return out


def under_replicated(topics: list[TopicPartitions]) -> int:
    return sum(t.under_replicated for t in topics)
