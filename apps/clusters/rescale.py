"""A topic's key mapping and the progress of its last rescale (issue 21 item 2, docs/ordered-topics.md).

`/placement/<topic>` says how many of its placed partitions keys map to (`mapping`: version, partitions, previous;
`broker_core.layout`). On an ordered topic, version v waits for the brokers' drain markers
`/drained/<topic>/v<v>/<old partition>-<group>`: one per old partition some of whose keys map elsewhere now
(`Mapping.losing()`) and per group that was bound when the control plane wrote version v (it records them in
`/drained/<topic>/v<v>`, `{"groups": [..]}`) and still is (`/bindings/<topic>/<group>`). A group bound later
starts empty, so it owes nothing of the old mapping and is not awaited (the brokers stop marking once every group
they hold drained); a group unbound since gets no marker and is not awaited either. A version node without
`groups` awaits every group bound now. `progress` is pure (it is given what was read); `read_rescale` reads it
from a cluster's ZooKeeper now, for the topic page, REST and the policy (rule `rescale-drained`). Provisioning
reads through its own session (apps/provisioning/partitions.py) and judges with the same `progress`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kazoo.exceptions import NoNodeError

from apps.clusters.zookeeper import ZooKeeperUnreachable, zk_client
from broker_core.layout import LAYOUT, Mapping, decode, drain_marker, mapping_of


@dataclass
class GroupDrain:
    group: str
    drained: list[int] = field(default_factory=list)  # old partitions whose marker exists
    owed: list[int] = field(default_factory=list)  # those whose marker is still awaited


@dataclass
class Rescale:
    mapping: Mapping
    placed: int  # the physical partitions placed (never fewer than keys map to)
    losing: list[int]  # the old partitions of this version some of whose keys map elsewhere now
    groups: list[GroupDrain]
    ordered: bool

    @property
    def drained(self) -> bool:
        """Whether the next version may be written: nothing owed (always so for a topic that is not ordered)."""
        return not self.ordered or all(not g.owed for g in self.groups)

    def owed_text(self) -> str:
        """What is still owed, in words: `group shipping owes old partitions 0, 1; group audit owes 1`."""
        owed = [g for g in self.groups if g.owed]
        return "; ".join(f"group {g.group} owes old partition{'s' if len(g.owed) > 1 else ''} "
                         f"{', '.join(str(p) for p in g.owed)}" for g in owed)

    def as_dict(self) -> dict:
        return {"version": self.mapping.version, "partitions": self.mapping.partitions,
                "previous": self.mapping.previous, "placed": self.placed, "ordered": self.ordered,
                "losing": self.losing, "drained": self.drained,
                "groups": [{"group": g.group, "drained": g.drained, "owed": g.owed} for g in self.groups]}


def awaited(bound: list[str], version_doc: dict | None) -> list[str]:
    """The groups whose markers a version waits for: those bound now that its node recorded (all bound now when
    it recorded none)."""
    recorded = (version_doc or {}).get("groups")
    if not isinstance(recorded, list):
        return sorted(bound)
    return sorted(set(bound) & {str(g) for g in recorded})


def progress(placement: dict, *, ordered: bool, groups: list[str], markers: list[str]) -> Rescale:
    """The mapping of `placement` (a `/placement/<topic>` document) and, for an ordered topic, per group of
    `groups` (`awaited`) which losing old partitions have a marker among `markers` (the children of its version's
    node). Raises ValueError (or KeyError, TypeError) for a malformed placement."""
    mapping = mapping_of(placement)
    losing = mapping.losing() if mapping.version else []
    have = set(markers)
    drains = [GroupDrain(g, [p for p in losing if drain_marker(p, g) in have],
                         [p for p in losing if drain_marker(p, g) not in have])
              for g in sorted(groups)] if ordered and losing else []
    return Rescale(mapping, len(placement["partitions"]), losing, drains, ordered)


def read_rescale(cluster, topic: str, *, ordered: bool, timeout: float | None = None) -> Rescale | None:
    """The topic's mapping and drain progress in `cluster`'s ZooKeeper now; None when it has no placement (one
    partition, every broker) or a malformed one. Raises ZooKeeperUnreachable."""
    chroot = cluster.zk_chroot
    with zk_client(cluster.zk_connect, timeout) as zk:
        try:
            data, _ = zk.get(chroot + LAYOUT.placement(topic))
        except NoNodeError:
            return None
        try:
            placement = decode(data)
            version = mapping_of(placement).version
        except (ValueError, KeyError, TypeError):
            return None
        groups = markers = []
        if ordered and version:
            groups = awaited(_children(zk, chroot + LAYOUT.topic_bindings(topic)),
                             _doc(zk, chroot + LAYOUT.drained(topic, version)))
            markers = _children(zk, chroot + LAYOUT.drained(topic, version)) if groups else []
    return progress(placement, ordered=ordered, groups=groups, markers=markers)


def read_rescale_or_none(cluster, topic: str, *, ordered: bool) -> Rescale | None:
    """`read_rescale`, None when ZooKeeper does not answer (the page says the figures are unknown)."""
    try:
        return read_rescale(cluster, topic, ordered=ordered)
    except ZooKeeperUnreachable:
        return None


def version_doc(data: bytes | None) -> dict | None:
    """A `/drained/<topic>/v<version>` node's document (None: unreadable, or no node)."""
    try:
        doc = decode(data)
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None


def _doc(zk, path: str) -> dict | None:
    try:
        return version_doc(zk.get(path)[0])
    except NoNodeError:
        return None


def _children(zk, path: str) -> list[str]:
    try:
        return sorted(zk.get_children(path))
    except NoNodeError:
        return []
