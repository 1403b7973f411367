"""Where a topic's partitions live: the control plane writes `/placement/<topic>` (docs/zookeeper-layout.md,
issue 20) when it provisions a topic of more than one partition or replica.

The replicas are spread over the brokers registered in the cluster's `/brokers` when the topic is pushed
(`broker_core.layout.rescale`, balanced by count; a placement already there keeps its replicas, and a new one
gets a higher epoch). A topic of one partition and one replica gets no placement, unless it is ordered: every
broker holds it, as before layout 3. The placement is written before the topic's document, so no broker takes a message for a
partition it will not hold; with too few brokers registered nothing is written and the push is retried.
Each partition of two or more replicas also gets `/partition-state/<topic>/<p>` (no leader elected yet), created
once before the placement: from then on the brokers elect its leader there by compare-and-set.

A change of the partition count (issue 21 item 2) never removes a placed partition: the placement's `mapping`
says how many of them keys map to, and its version goes up (`layout.rescale`). `/drained/<topic>/v<version>` is
created before a placement of that version, so the brokers can write their drain markers under it; it records the
groups bound then (`{"groups": [..]}`), those the version waits for. On an ordered topic a new version is written
only once the current one is drained (each of those groups still bound has the marker of every old partition
losing keys, apps/clusters/rescale.py); until then nothing is written and the push is retried (`StillDraining`).
"""

from __future__ import annotations

from apps.clusters.rescale import awaited, progress, version_doc
from broker_core.layout import LAYOUT, decode, encode, fits, initial_partition_state, mapping_of, rescale


class TooFewBrokers(Exception):
    """The topic's replication factor needs more brokers than the cluster has registered now."""


class StillDraining(Exception):
    """An ordered topic's next key mapping waits until its groups finished what the current one moved."""


def wanted(topic) -> bool:
    """Whether the topic is placed on partitions (else every broker holds it). An ordered topic always is: one
    broker leads each partition, so all of a key's messages are stored in one log (unplaced, every broker would
    take the key's messages in its own partition 0) and its first split has a mapping to drain."""
    return topic.ordered or (topic.partition_count, topic.replicas) != (1, 1)


def _placement(session, topic) -> tuple[dict | None, dict | None]:
    """(the placement the topic should have now, None when the one in ZooKeeper is right or none is wanted;
    the one in ZooKeeper now or None). Raises TooFewBrokers, or StillDraining for an ordered topic whose current
    rescale is not drained yet."""
    node = session.read(LAYOUT.placement(topic.name))
    previous = decode(node.data) if node is not None else None
    if previous is None and not wanted(topic):
        return None, None
    if previous is not None and fits(previous, topic.partition_count, topic.replicas):
        return None, previous
    brokers = session.children(LAYOUT.BROKERS)
    try:
        doc = rescale(topic.name, topic.partition_count, topic.replicas, brokers, previous=previous)
    except ValueError as exc:
        raise TooFewBrokers(str(exc)) from exc
    if topic.ordered and previous is not None and doc.get("mapping") != previous.get("mapping"):
        _require_drained(session, topic.name, previous)
    return doc, previous


def _require_drained(session, name: str, current: dict) -> None:
    """Raise StillDraining unless every group the current mapping waits for (`awaited`) finished its moves."""
    version = mapping_of(current).version
    groups = markers = []
    if version:
        node = session.read(LAYOUT.drained(name, version))
        groups = awaited(session.children(LAYOUT.topic_bindings(name)), version_doc(node.data) if node else None)
        markers = session.children(LAYOUT.drained(name, version)) if groups else []
    state = progress(current, ordered=True, groups=groups, markers=markers)
    if not state.drained:
        raise StillDraining(f"topic {name} is still draining mapping version {version} ({state.mapping.previous} → "
                            f"{state.mapping.partitions} partitions): {state.owed_text()}; its next mapping is "
                            "written once the brokers mark those drained")


def write(session, topic) -> dict | None:
    """Write the topic's placement if it is missing or no longer fits; returns what was written."""
    doc, previous = _placement(session, topic)
    placed = doc or previous  # a placement that stands may still miss its partition states or drain node
    for part in (placed or {}).get("partitions", []):  # the brokers elect each leader there (never reset here)
        path = LAYOUT.partition_state(topic.name, part["id"])
        if len(part["replicas"]) > 1 and session.read(path) is None:
            session.put(path, encode(initial_partition_state(part["replicas"])))
    version = int(((placed or {}).get("mapping") or {}).get("version") or 0)
    if version and session.read(LAYOUT.drained(topic.name, version)) is None:  # where brokers mark what drained
        groups = session.children(LAYOUT.topic_bindings(topic.name))  # what this version waits for
        session.put(LAYOUT.drained(topic.name, version), encode({"groups": groups}))
    if doc is not None:
        session.put(LAYOUT.placement(topic.name), encode(doc))
    return doc


def remove(session, name: str) -> None:
    """A topic the cluster no longer holds: its placement, the brokers' partition states and drain markers go."""
    session.delete(LAYOUT.placement(name))
    for partition in session.children(f"{LAYOUT.PARTITION_STATE}/{name}"):
        session.delete(f"{LAYOUT.PARTITION_STATE}/{name}/{partition}")
    session.delete_empty([f"{LAYOUT.PARTITION_STATE}/{name}"])
    drained = f"{LAYOUT.DRAINED}/{name}"
    for version in session.children(drained):
        for marker in session.children(f"{drained}/{version}"):
            session.delete(f"{drained}/{version}/{marker}")
        session.delete(f"{drained}/{version}")
    session.delete_empty([drained])
