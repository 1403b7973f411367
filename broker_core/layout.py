"""The ZooKeeper layout shared by the control plane (writer) and the brokers (readers).

Paths are relative to a cluster's chroot. The layout is versioned: see docs/zookeeper-layout.md.
Every data node is UTF-8 JSON. This module does no I/O.
"""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass

LAYOUT_VERSION = 3

MAX_PARTITIONS = 64
MAX_REPLICATION_FACTOR = 3

# Ordered topics (issue 21, docs/ordered-topics.md): a key hashes to one of LOGIC_PARTITIONS logic partitions,
# fixed for the topic's life; a logic partition maps to a physical partition by `logic % partitions`.
LOGIC_PARTITIONS = 1024


def logic_partition(key: str) -> int:
    """The logic partition of an order key: crc32 of its UTF-8 bytes, modulo LOGIC_PARTITIONS."""
    return zlib.crc32(key.encode()) % LOGIC_PARTITIONS


def physical_partition(key: str, partitions: int) -> int:
    """The physical partition a key's messages go to under a mapping of `partitions` partitions (the SDK chooses
    it, the broker checks it): one pure function, so producer and broker always agree."""
    return logic_partition(key) % partitions


@dataclass(frozen=True)
class Layout:
    META: str = "/meta"
    BROKERS: str = "/brokers"
    TOPICS: str = "/topics"
    BINDINGS: str = "/bindings"
    APPS: str = "/apps"
    GRANTS: str = "/grants"
    ROUTES: str = "/routes"  # where a topic's clients send and subscribe (docs/routing.md); readable by anyone
    PLACEMENT: str = "/placement"  # which brokers hold each partition of a topic (control plane; world: read)
    PARTITION_STATE: str = "/partition-state"  # each partition's leader, epoch and ISR (brokers; world: read)
    DRAINED: str = "/drained"  # an ordered topic's rescale: which old partitions each group finished (brokers)

    def broker(self, node_id: str) -> str:
        return f"{self.BROKERS}/{node_id}"

    def topic(self, topic: str) -> str:
        return f"{self.TOPICS}/{topic}"

    def topic_bindings(self, topic: str) -> str:
        return f"{self.BINDINGS}/{topic}"

    def binding(self, topic: str, group: str) -> str:
        return f"{self.BINDINGS}/{topic}/{group}"

    def app(self, app_id: str) -> str:
        return f"{self.APPS}/{app_id}"

    def topic_grants(self, topic: str) -> str:
        return f"{self.GRANTS}/{topic}"

    def grant(self, topic: str, app_id: str) -> str:
        return f"{self.GRANTS}/{topic}/{app_id}"

    def route(self, topic: str) -> str:
        return f"{self.ROUTES}/{topic}"

    def placement(self, topic: str) -> str:
        return f"{self.PLACEMENT}/{topic}"

    def partition_state(self, topic: str, partition: int) -> str:
        return f"{self.PARTITION_STATE}/{topic}/{partition}"

    def drained(self, topic: str, version: int) -> str:
        """The markers of mapping version `version` of an ordered topic (see `drain_marker`)."""
        return f"{self.DRAINED}/{topic}/v{version}"


LAYOUT = Layout()


def encode(doc: dict) -> bytes:
    """Canonical JSON: sorted keys, so equal documents are equal bytes (drift checks compare them)."""
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def decode(data: bytes | None) -> dict:
    return json.loads(data) if data else {}


# -- placement (layout 3): which brokers hold each partition of a topic ----------------------------


def place(topic: str, partitions: int, replication_factor: int, brokers: list[str], *, epoch: int = 1,
          previous: dict | None = None) -> dict:
    """A `/placement/<topic>` document: each partition's replicas over `brokers` (node ids), balanced by count.

    Replicas a previous placement gave a partition stay where they are while their broker is still listed (a
    new placement moves as little as it can); the others go to the brokers holding the fewest replicas (the
    fewest leaders first for a partition's first replica), ties broken by node id, so the result is
    deterministic. Raises ValueError when there are fewer brokers than the replication factor."""
    if not 1 <= partitions <= MAX_PARTITIONS:
        raise ValueError(f"partitions must be 1..{MAX_PARTITIONS}, not {partitions}")
    if not 1 <= replication_factor <= MAX_REPLICATION_FACTOR:
        raise ValueError(f"replication_factor must be 1..{MAX_REPLICATION_FACTOR}, not {replication_factor}")
    nodes = sorted(set(brokers))
    if len(nodes) < replication_factor:
        raise ValueError(f"topic {topic!r} needs {replication_factor} brokers for its replication factor; "
                         f"{len(nodes)} are registered")
    before = {part["id"]: [r for r in part["replicas"] if r in nodes]
              for part in (previous or {}).get("partitions", [])}
    load = {n: 0 for n in nodes}
    leads = {n: 0 for n in nodes}
    plan = []
    for pid in range(partitions):
        replicas = before.get(pid, [])[:replication_factor]
        plan.append(replicas)
        for i, r in enumerate(replicas):
            load[r] += 1
            leads[r] += i == 0
    for replicas in plan:
        while len(replicas) < replication_factor:
            first = not replicas
            node = min((n for n in nodes if n not in replicas),
                       key=lambda n: (leads[n] if first else 0, load[n], n))
            replicas.append(node)
            load[node] += 1
            leads[node] += first
    return {"topic": topic, "epoch": epoch, "partitions": [{"id": i, "replicas": r} for i, r in enumerate(plan)]}


def placement_replicas(doc: dict) -> dict[int, tuple[str, ...]]:
    """Partition id -> its replicas (the first is the preferred leader) of a `/placement/<topic>` document.
    Raises ValueError (or KeyError, TypeError) for a malformed one."""
    parts = {}
    for part in doc["partitions"]:
        pid, replicas = int(part["id"]), tuple(str(r) for r in part["replicas"])
        if not 0 <= pid < MAX_PARTITIONS or not replicas:
            raise ValueError(f"partition {pid}: id out of range or no replica")
        parts[pid] = replicas
    return parts


# -- the key mapping (layout 3): how many of the placed partitions keys map to, and the drain barrier ----------
#
# A placement's partitions are the physical ones (never fewer than before: a merged-away partition keeps what it
# holds until its groups finish it). `mapping` says how many of them keys map to now (`partitions`), which
# version of the mapping that is, and how many they mapped to before (`previous`). A placement without `mapping`
# maps keys to all of its partitions (version 0). On an ordered topic, a key whose partition changed at version v
# (`Mapping.old_partition`) is not delivered to a group from its new partition before the broker leading its old
# one wrote `/drained/<topic>/v<v>/<old partition>-<group>` (`drain_marker`): that group finished everything its
# old partition stored before the broker applied version v. The control plane writes version v+1 only once every
# bound group's markers of version v are there (docs/ordered-topics.md).


@dataclass(frozen=True)
class Mapping:
    version: int
    partitions: int  # the partitions keys map to now: 0 .. partitions-1
    previous: int  # those they mapped to before this version

    def old_partition(self, key: str) -> int | None:
        """The partition the key mapped to before this version, when that is another one than now (None: the
        same, or no rescale)."""
        if self.previous == self.partitions:
            return None
        logic = logic_partition(key)
        old = logic % self.previous
        return old if old != logic % self.partitions else None

    def losing(self) -> list[int]:
        """The old partitions some of whose keys map elsewhere now: their groups' drain markers are awaited."""
        return partitions_losing_keys(self.previous, self.partitions)


def partitions_losing_keys(previous: int, partitions: int) -> list[int]:
    """The partitions of `previous` some of whose logic partitions map to another partition under `partitions`."""
    if previous == partitions:
        return []
    return sorted({lp % previous for lp in range(LOGIC_PARTITIONS) if lp % previous != lp % partitions})


def drain_marker(partition: int, group: str) -> str:
    """The name of a drain marker under `Layout.drained(topic, version)`: `<old partition>-<group>`."""
    return f"{partition}-{group}"


def mapping_of(doc: dict) -> Mapping:
    """The key mapping of a `/placement/<topic>` document. Raises ValueError (or KeyError, TypeError) for a
    malformed one."""
    placed = len(doc["partitions"])
    m = doc.get("mapping")
    if not m:
        return Mapping(0, placed, placed)
    mapping = Mapping(int(m["version"]), int(m["partitions"]), int(m["previous"]))
    if not (mapping.version >= 1 and 1 <= mapping.partitions <= placed and 1 <= mapping.previous <= placed):
        raise ValueError(f"mapping {m!r} does not fit {placed} placed partitions")
    return mapping


def rescale(topic: str, partitions: int, replication_factor: int, brokers: list[str], *,
            previous: dict | None = None) -> dict:
    """The placement of a topic whose keys map to `partitions` partitions: `place` over at least as many
    physical partitions as `previous` had (a partition merged away stays placed until it is empty), with the
    mapping's next version when the number keys map to changes, else the previous mapping kept."""
    placed = max(partitions, len(previous["partitions"]) if previous else 0)
    doc = place(topic, placed, replication_factor, brokers,
                epoch=int(previous.get("epoch", 0)) + 1 if previous else 1, previous=previous)
    before = mapping_of(previous) if previous else Mapping(0, partitions, partitions)
    if before.partitions != partitions:
        doc["mapping"] = {"version": before.version + 1, "partitions": partitions, "previous": before.partitions}
    elif before.version:
        doc["mapping"] = dict(previous["mapping"])
    return doc


def fits(doc: dict, partitions: int, replication_factor: int) -> bool:
    """Whether a placement maps keys to `partitions` partitions, each with `replication_factor` replicas."""
    parts = doc.get("partitions") or []
    try:
        mapped = mapping_of(doc).partitions
    except (ValueError, KeyError, TypeError):
        return False
    return mapped == partitions and all(len(p.get("replicas") or []) == replication_factor for p in parts)


# -- partition state (layout 3): each replicated partition's leader, leader epoch and in-sync replicas -------------


def initial_partition_state(replicas: list[str] | tuple[str, ...]) -> dict:
    """The `/partition-state/<topic>/<p>` document the control plane creates with a placement: no leader elected
    yet (epoch 0; every replica holds the same nothing, so all are in sync). The brokers then elect by
    compare-and-set (broker_core/replication/election.py), raising `leader_epoch` at each election."""
    return {"leader": str(replicas[0]), "leader_epoch": 0, "isr": [str(r) for r in replicas]}


def partition_state(leader: str, epoch: int, isr: list[str], start_seq: int) -> dict:
    """A partition state a broker writes: `leader` leads from `leader_epoch` on; `isr` may take over from it;
    `epoch_start_seq` is the leader's next seq when its epoch began."""
    return {"leader": leader, "leader_epoch": epoch, "isr": sorted(set(isr)), "epoch_start_seq": start_seq}
