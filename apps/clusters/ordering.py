"""An ordered topic as the control plane shows it (issue 21, docs/ordered-topics.md): its mapping of logic
partitions to physical ones, each physical partition's leader, and per consumer group which consumer holds each
partition now and under which generation.

The mapping is `broker_core.layout`'s (`logic % partitions`, the one the SDK and the brokers use, `partitions` being
those the placement's key mapping names: a merged-away partition stays placed, with no logic partition, until it is
empty; apps/clusters/rescale.py gives the mapping's version and drain progress); the leaders come
from the cluster's placement as ZooKeeper holds it now (`apps.clusters.partitions`); the holders from each broker's
`/stats` (`ordered.partitions_held` of the groups it leads partitions of, `delivery/ordered.py`), read just before.
Nothing here reads or writes anything itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from apps.clusters.broker_stats import ClusterStats
from apps.clusters.partitions import TopicPartitions
from apps.clusters.rescale import Rescale
from broker_core.layout import LOGIC_PARTITIONS

ORDERED_FIGURES = ("keys_waiting", "keys_out", "reassigned", "stale_acks")
EVERY_BROKER = "every broker"  # a topic without a placement: one partition, held by every broker


@dataclass
class MappedPartition:
    partition: int
    logic_partitions: int  # how many of the LOGIC_PARTITIONS map here
    leader: str


@dataclass
class Holder:
    partition: int
    consumer: str
    generation: int | None
    node: str  # the broker that leads the partition and reported the assignment


@dataclass
class GroupAssignment:
    group: str
    holders: list[Holder] = field(default_factory=list)
    figures: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ORDERED_FIGURES, 0))


@dataclass
class Ordering:
    logic_partitions: int
    partitions: int
    mapping: list[MappedPartition]
    groups: list[GroupAssignment]
    rescale: Rescale | None = None  # the key mapping's version and its drain progress (None: no placement read)


def mapping(partitions: int, placed: TopicPartitions | None, physical: int | None = None) -> list[MappedPartition]:
    """Each physical partition (`physical` of them, at least `partitions`) with the count of logic partitions `l`
    for which `l % partitions` is it (none for one merged away)."""
    leaders = {p.partition: p.leader for p in placed.partitions} if placed is not None else {}
    return [MappedPartition(p, len(range(p, LOGIC_PARTITIONS, partitions)) if p < partitions else 0,
                            leaders.get(p, EVERY_BROKER if placed is None else "?"))
            for p in range(max(partitions, physical or 0))]


def assignments(topic: str, live: ClusterStats | None) -> list[GroupAssignment]:
    """Per group of `topic`, the partitions held on every broker that answered (each partition is led by one)."""
    groups: dict[str, GroupAssignment] = {}
    for node in (live.nodes if live is not None else []):
        for name, group in ((node.stats or {}).get("topics", {}).get(topic, {}).get("groups", {})).items():
            ordered = group.get("ordered")
            if not isinstance(ordered, dict):
                continue
            g = groups.setdefault(name, GroupAssignment(name))
            for partition, held in (ordered.get("partitions_held") or {}).items():
                g.holders.append(Holder(int(partition), str(held.get("consumer", "?")), held.get("generation"),
                                        node.node.node_id))
            for key in ORDERED_FIGURES:
                g.figures[key] += int(ordered.get(key) or 0)
    for g in groups.values():
        g.holders.sort(key=lambda h: h.partition)
    return [groups[k] for k in sorted(groups)]


def ordering_of(topic: str, placed: TopicPartitions | None, live: ClusterStats | None,
                rescale: Rescale | None = None) -> Ordering:
    """`placed`: the topic's placement as read now (None: it has none, so one partition); `rescale`: its key
    mapping read now (keys map to all placed partitions without one)."""
    physical = len(placed.partitions) if placed is not None and placed.partitions else 1
    partitions = rescale.mapping.partitions if rescale is not None else physical
    return Ordering(LOGIC_PARTITIONS, partitions, mapping(partitions, placed, physical), assignments(topic, live),
                    rescale)
