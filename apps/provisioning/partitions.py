"""Where a topic's partitions live: the control plane writes `/placement/<topic>` (docs/zookeeper-layout.md,
issue 20) when it provisions a topic of more than one partition or replica.

The replicas are spread over the brokers registered in the cluster's `/brokers` when the topic is pushed
(`broker_core.layout.place`, balanced by count; a placement already there keeps its replicas, and a new one
gets a higher epoch). A topic of one partition and one replica gets no placement: every broker holds it, as
before layout 3. The placement is written before the topic's document, so no broker takes a message for a
partition it will not hold; with too few brokers registered nothing is written and the push is retried.
Each partition of two or more replicas also gets `/partition-state/<topic>/<p>` (no leader elected yet), created
once before the placement: from then on the brokers elect its leader there by compare-and-set.
"""

from __future__ import annotations

from broker_core.layout import LAYOUT, decode, encode, initial_partition_state, place


class TooFewBrokers(Exception):
    """The topic's replication factor needs more brokers than the cluster has registered now."""


def wanted(topic) -> bool:
    """Whether the topic is placed on partitions (else every broker holds it)."""
    return (topic.partition_count, topic.replicas) != (1, 1)


def placement_doc(session, topic) -> dict | None:
    """The placement the topic should have now (None: the one in ZooKeeper is right, or none is wanted)."""
    if not wanted(topic):
        return None
    node = session.read(LAYOUT.placement(topic.name))
    previous = decode(node.data) if node is not None else None
    if previous is not None and _fits(previous, topic.partition_count, topic.replicas):
        return None
    brokers = session.children(LAYOUT.BROKERS)
    try:
        return place(topic.name, topic.partition_count, topic.replicas, brokers,
                     epoch=int(previous.get("epoch", 0)) + 1 if previous else 1, previous=previous)
    except ValueError as exc:
        raise TooFewBrokers(str(exc)) from exc


def write(session, topic) -> dict | None:
    """Write the topic's placement if it is missing or no longer fits; returns what was written."""
    doc = placement_doc(session, topic)
    placed = doc
    if placed is None and wanted(topic):  # the placement stands: its partition states may still be missing
        node = session.read(LAYOUT.placement(topic.name))
        placed = decode(node.data) if node is not None else None
    for part in (placed or {}).get("partitions", []):  # the brokers elect each leader there (never reset here)
        path = LAYOUT.partition_state(topic.name, part["id"])
        if len(part["replicas"]) > 1 and session.read(path) is None:
            session.put(path, encode(initial_partition_state(part["replicas"])))
    if doc is not None:
        session.put(LAYOUT.placement(topic.name), encode(doc))
    return doc


def remove(session, name: str) -> None:
    """A topic the cluster no longer holds: its placement and the brokers' partition states go."""
    session.delete(LAYOUT.placement(name))
    for partition in session.children(f"{LAYOUT.PARTITION_STATE}/{name}"):
        session.delete(f"{LAYOUT.PARTITION_STATE}/{name}/{partition}")
    session.delete_empty([f"{LAYOUT.PARTITION_STATE}/{name}"])


def _fits(doc: dict, partitions: int, replicas: int) -> bool:
    parts = doc.get("partitions") or []
    return len(parts) == partitions and all(len(p.get("replicas") or []) == replicas for p in parts)
