"""What a rebalance reads and writes in a cluster: the placements and registered brokers in its ZooKeeper, a
leader's view of its followers from the broker's `/stats`, and one partition's replicas written with a
compare-and-set on the placement node (its epoch bumped: the brokers and clients fence on it)."""

from __future__ import annotations

import json
from dataclasses import dataclass

from kazoo.exceptions import BadVersionError, KazooException, NoNodeError

from apps.clusters.broker_stats import fetch_node_stats
from apps.clusters.zookeeper import BrokerNode, ZooKeeperUnreachable
from apps.provisioning.zk import Session
from broker_core.layout import LAYOUT, decode, encode, placement_replicas


class PlacementChanged(Exception):
    """The placement node changed between our read and our write (another writer): read it again."""


@dataclass
class TopicPlacement:
    topic: str
    doc: dict
    version: int

    @property
    def replicas(self) -> dict[int, list[str]]:
        return {pid: list(reps) for pid, reps in placement_replicas(self.doc).items()}

    @property
    def epoch(self) -> int:
        return int(self.doc.get("epoch") or 0)


def session(cluster) -> Session:
    return Session(cluster.zk_connect, cluster.zk_chroot)


def registered(s: Session) -> dict[str, BrokerNode]:
    """The brokers registered in `/brokers` now, by node id."""
    nodes = s.read_many([LAYOUT.broker(n) for n in s.children(LAYOUT.BROKERS)])
    out = {}
    for path, node in nodes.items():
        if node is None:
            continue
        doc = decode(node.data)
        node_id = path.rsplit("/", 1)[-1]
        out[node_id] = BrokerNode(node_id, str(doc.get("host") or ""), int(doc.get("port") or 0),
                                  doc.get("metrics_port"), doc.get("started_at"), doc.get("version"))
    return out


def placement(s: Session, topic: str) -> TopicPlacement | None:
    node = s.read(LAYOUT.placement(topic))
    return TopicPlacement(topic, decode(node.data), node.version) if node is not None else None


def placements(s: Session) -> dict[str, dict[int, list[str]]]:
    """Every placed topic of the cluster: partition -> replicas."""
    topics = s.children(LAYOUT.PLACEMENT)
    nodes = s.read_many([LAYOUT.placement(t) for t in topics])
    return {t: {pid: list(r) for pid, r in placement_replicas(decode(nodes[LAYOUT.placement(t)].data)).items()}
            for t in topics if nodes[LAYOUT.placement(t)] is not None}


def leader_of(s: Session, topic: str, partition: int) -> str | None:
    """The leader `/partition-state/<topic>/<p>` names (brokers write it once leaders are elected), else None."""
    node = s.read(LAYOUT.partition_state(topic, partition))
    try:
        leader = decode(node.data).get("leader") if node is not None else None
    except (ValueError, AttributeError):  # unreadable: the placement's first replica, as without one
        return None
    return str(leader) if leader else None


def write_replicas(s: Session, current: TopicPlacement, partition: int, replicas: list[str]) -> int:
    """Set one partition's replicas, bumping the placement's epoch; only if the node is still the one read.
    Returns the new epoch. Raises PlacementChanged when another writer came first."""
    doc = json.loads(json.dumps(current.doc))
    for part in doc["partitions"]:
        if int(part["id"]) == partition:
            part["replicas"] = list(replicas)
    doc["epoch"] = current.epoch + 1
    try:
        s.zk.set(s.abs(LAYOUT.placement(current.topic)), encode(doc), version=current.version)
    except (BadVersionError, NoNodeError) as exc:
        raise PlacementChanged(f"the placement of {current.topic} changed while it was written") from exc
    except KazooException as exc:
        raise ZooKeeperUnreachable(f"ZooKeeper did not take the placement of {current.topic}: {exc}") from exc
    return doc["epoch"]


@dataclass
class Follower:
    answered: bool  # the leader's /stats answered
    connected: bool = False  # the follower is connected to the leader
    in_sync: bool = False
    acked: int = 0
    error: str = ""


def follower_state(leader: BrokerNode, topic: str, partition: int, follower: str) -> Follower:
    """What the partition's leader says of the follower (its `/stats`: replication.leading.<p>.followers)."""
    stats = fetch_node_stats(leader)
    if not stats.ok:
        return Follower(False, error=stats.error)
    leading = ((stats.stats.get("topics") or {}).get(topic) or {}).get("replication", {}).get("leading") or {}
    seen = ((leading.get(str(partition)) or {}).get("followers") or {}).get(follower)
    if seen is None:
        return Follower(True)
    return Follower(True, True, bool(seen.get("in_sync")), int(seen.get("acked") or 0))
