"""The broker's view of what the control plane provisioned: topics, bindings, apps and grants.

Filled from ZooKeeper by `membership.ZkWatcher` (always on the event loop's thread); the node
listens for changes to apply them live. Documents follow docs/zookeeper-layout.md; a document that
cannot be read is treated as absent and logged, so a bad node never takes the broker down.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from broker_core.auth import SecretHash
from broker_core.cluster.selector import compile_selector
from broker_core.layout import Mapping, mapping_of, placement_replicas

log = logging.getLogger("broker_core.cluster_state")

MODES = ("clustering", "broadcast")


@dataclass(frozen=True)
class Backoff:
    initial_ms: int = 1000
    max_ms: int = 60_000
    multiplier: float = 2.0

    def delay_ms(self, attempt: int) -> int:
        """Delay before delivery attempt `attempt + 1`, after `attempt` failed ones."""
        delay = self.initial_ms * (self.multiplier ** max(0, attempt - 1))
        return int(min(delay, self.max_ms))


@dataclass(frozen=True)
class Binding:
    topic: str
    group: str
    app_id: str
    mode: str = "clustering"
    delivery_limit: int = 16
    ttl_s: float = 0
    backoff: Backoff = field(default_factory=Backoff)
    max_in_flight: int = 0
    selector: dict = field(default_factory=dict)
    revision: int = 0
    # ordered topics (issue 21): what a message that reached the delivery limit does to its key: "block" (it is
    # delivered again, after the backoff, until acknowledged; the key waits) or "dead_letter" (the key goes on)
    on_failure: str = "block"
    matches: Callable[[str], bool] = field(default=compile_selector(None), compare=False, repr=False)

    @classmethod
    def from_doc(cls, topic: str, group: str, doc: dict) -> Binding:
        mode = doc.get("mode") or "clustering"
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}")
        backoff = doc.get("backoff") or {}
        selector = doc.get("selector") or {}
        return cls(
            topic=topic,
            group=group,
            app_id=str(doc["app_id"]),
            mode=mode,
            delivery_limit=int(doc.get("delivery_limit") or 0),
            ttl_s=float(doc.get("ttl_s") or 0),
            backoff=Backoff(
                initial_ms=int(backoff.get("initial_ms", 1000)),
                max_ms=int(backoff.get("max_ms", 60_000)),
                multiplier=float(backoff.get("multiplier", 2.0)),
            ),
            max_in_flight=int(doc.get("max_in_flight") or 0),
            selector=selector,
            revision=int(doc.get("revision") or 0),
            on_failure=_on_failure(doc.get("on_failure")),
            matches=compile_selector(selector),
        )


ON_FAILURE = ("block", "dead_letter")


def _on_failure(value) -> str:
    if value in (None, ""):
        return "block"
    if value not in ON_FAILURE:
        raise ValueError(f"on_failure must be one of {ON_FAILURE}")
    return str(value)


@dataclass(frozen=True)
class App:
    app_id: str
    secrets: tuple[SecretHash, ...]  # every secret accepted now or until its expiry (a rotation's overlap)
    active: bool = True
    team: str = ""

    @classmethod
    def from_doc(cls, app_id: str, doc: dict) -> App:
        if "secrets" in doc:  # layout 2
            entries = doc["secrets"]
            if not isinstance(entries, list) or not entries:
                raise ValueError("secrets must be a non-empty list")
            secrets = tuple(SecretHash(str(e["hash"]), None if e.get("expires_at") is None else float(e["expires_at"]))
                            for e in entries)
        else:  # layout 1: one hash, no expiry
            secrets = (SecretHash(str(doc["secret_hash"])),)
        return cls(app_id=app_id, secrets=secrets, active=bool(doc.get("active", True)),
                   team=str(doc.get("team") or ""))

    def doc(self) -> dict:
        return {"secrets": [{"hash": s.hash, "expires_at": s.expires_at} for s in self.secrets],
                "active": self.active, "team": self.team}


TOPIC_STATUSES = ("active", "retired")


@dataclass(frozen=True)
class TopicConfig:
    name: str
    message_types: tuple[str, ...] = ()
    storage: str | None = None
    max_message_bytes: int = 0
    transactional: bool = False  # accepts prepared (transaction) messages
    ordered: bool = False  # messages of one key in publish order (issue 21); refuses delayed messages
    status: str = "active"  # "retired": no new messages; the backlog is still delivered
    retention_s: float = 0  # messages older than this are dropped (0: kept until every group is done)
    partitions: int = 1  # layout 3; absent: one partition
    replication_factor: int = 1
    revision: int = 0
    doc: dict = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_doc(cls, name: str, doc: dict) -> TopicConfig:
        status = doc.get("status") or "active"
        if status not in TOPIC_STATUSES:
            raise ValueError(f"status must be one of {TOPIC_STATUSES}")
        return cls(name=name, message_types=tuple(doc.get("message_types") or ()), storage=doc.get("storage"),
                   max_message_bytes=int(doc.get("max_message_bytes") or 0),
                   transactional=doc.get("transactional") is True, ordered=doc.get("ordered") is True,
                   status=status,
                   retention_s=float(doc.get("retention_s") or 0), partitions=int(doc.get("partitions") or 1),
                   replication_factor=int(doc.get("replication_factor") or 1),
                   revision=int(doc.get("revision") or 0), doc=doc)

    @property
    def retired(self) -> bool:
        return self.status == "retired"


class ClusterState:
    """Plain dictionaries plus change listeners. Mutated only through `apply`."""

    def __init__(self) -> None:
        self.topics: dict[str, TopicConfig] = {}
        self.bindings: dict[str, dict[str, Binding]] = {}
        self.apps: dict[str, App] = {}
        self.grants: dict[str, set[str]] = {}
        # topic -> partition id -> replicas (first: preferred leader), from /placement/<topic> (layout 3)
        self.placements: dict[str, dict[int, tuple[str, ...]]] = {}
        self.mappings: dict[str, Mapping] = {}  # topic -> how many of its partitions keys map to (layout.Mapping)
        self.brokers: dict[str, dict] = {}  # node id -> its /brokers document (where a partition's leader listens)
        # (topic, partition) -> its /partition-state document (leader, leader_epoch, isr; "version": the node's)
        self.partition_states: dict[tuple[str, int], dict] = {}
        self.ready = False  # the first full read from ZooKeeper has been applied
        self.meta: dict | None = None  # the cluster's /meta document, once read
        # (kind, key) of nodes that exist but cannot be read: treated as absent, but not as removed
        self.unreadable: set[tuple[str, tuple[str, ...]]] = set()
        self.on_binding: list[Callable[[str, str, Binding | None], None]] = []
        self.on_app: list[Callable[[str, App | None], None]] = []
        self.on_topic: list[Callable[[str, TopicConfig | None], None]] = []
        self.on_placement: list[Callable[[str], None]] = []
        self.on_leadership: list[Callable[[str], None]] = []  # a partition state of the topic, or a broker, changed
        # a node was removed from ZooKeeper (not merely unreadable): (kind, key), after the change listeners
        self.on_removed: list[Callable[[str, tuple[str, ...]], None]] = []
        self.on_any: list[Callable[[], None]] = []  # after every change, whatever its kind
        self._unconfirmed: set[tuple[str, tuple[str, ...]]] = set()  # loaded from a snapshot, not yet seen in ZK

    # -- reads

    def binding(self, topic: str, group: str) -> Binding | None:
        return self.bindings.get(topic, {}).get(group)

    def topic_bindings(self, topic: str) -> dict[str, Binding]:
        return self.bindings.get(topic, {})

    def may_publish(self, topic: str, app_id: str) -> bool:
        return app_id in self.grants.get(topic, ())

    def partitions_of(self, topic: str, node_id: str) -> list[int]:
        """The partitions of the topic placed on this node. A topic with no placement (written before layout 3,
        or not placed yet) is one partition, 0, held by every broker, as before."""
        placed = self.placements.get(topic)
        if placed is None:
            return [0]
        return sorted(pid for pid, replicas in placed.items() if node_id in replicas)

    def leader_of(self, topic: str, partition: int) -> str | None:
        """The node that takes publishes for the partition (None: any broker, the topic has no placement)."""
        placed = self.placements.get(topic)
        if placed is None:
            return None
        replicas = placed.get(partition)
        if not replicas:
            return ""
        state = self.partition_states.get((topic, partition))
        if state is None:
            return replicas[0]  # no partition state: the placement's first replica
        if state["leader_epoch"] and state["leader"] in replicas:
            return state["leader"]  # elected (issue 20): /partition-state
        return ""  # not elected yet

    def partition_state(self, topic: str, partition: int) -> dict | None:
        return self.partition_states.get((topic, partition))

    def mapped_partitions(self, topic: str) -> int:
        """How many partitions the topic's keys map to now (a placed topic's merged-away partitions are not)."""
        mapping = self.mappings.get(topic)
        return mapping.partitions if mapping is not None else len(self.placements.get(topic) or ()) or 1

    # -- writes (from the ZooKeeper watcher, on the loop thread)

    def apply(self, kind: str, key: tuple[str, ...], doc: dict | None, unreadable: bool = False) -> None:
        """A node's document (None: the node is gone, or with `unreadable` it exists but cannot be read)."""
        self._unconfirmed.discard((kind, key))
        try:
            getattr(self, f"_apply_{kind}")(*key, doc)
        except (KeyError, TypeError, ValueError) as exc:
            log.error("ignoring unreadable %s %s: %s (%s)", kind, "/".join(key), doc, exc)
            unreadable = True
            getattr(self, f"_apply_{kind}")(*key, None)
        if unreadable:
            self.unreadable.add((kind, key))
        else:
            self.unreadable.discard((kind, key))
            if doc is None:
                for removed in self.on_removed:
                    removed(kind, key)
        for listener in self.on_any:
            listener()

    def set_meta(self, doc: dict | None) -> None:
        self.meta = doc

    def _apply_topic(self, name: str, doc: dict | None) -> None:
        topic = TopicConfig.from_doc(name, doc) if doc is not None else None
        if topic is None:
            self.topics.pop(name, None)
        else:
            self.topics[name] = topic
        for listener in self.on_topic:
            listener(name, topic)

    def _apply_broker(self, node_id: str, doc: dict | None) -> None:
        if doc is None:
            self.brokers.pop(node_id, None)
        else:
            self.brokers[node_id] = {"host": str(doc["host"]), "port": int(doc["port"])}
        for topic in {t for t, _ in self.partition_states}:
            for listener in self.on_leadership:
                listener(topic)

    def _apply_pstate(self, topic: str, partition: str, doc: dict | None) -> None:
        key = (topic, int(partition))
        if doc is None:
            self.partition_states.pop(key, None)
        else:
            self.partition_states[key] = {"leader": doc.get("leader") and str(doc["leader"]),
                                          "leader_epoch": int(doc.get("leader_epoch") or 0),
                                          "isr": [str(r) for r in doc.get("isr") or []],
                                          "epoch_start_seq": int(doc.get("epoch_start_seq") or 0),
                                          "version": int(doc.get("version", -1))}
        for listener in self.on_leadership:
            listener(topic)

    def _apply_placement(self, topic: str, doc: dict | None) -> None:
        placed = placement_replicas(doc) if doc is not None else None
        mapping = mapping_of(doc) if doc is not None else None
        if placed == self.placements.get(topic) and mapping == self.mappings.get(topic):
            return
        if placed is None:
            self.placements.pop(topic, None)
            self.mappings.pop(topic, None)
        else:
            self.placements[topic], self.mappings[topic] = placed, mapping
        for listener in self.on_placement:
            listener(topic)

    def _apply_binding(self, topic: str, group: str, doc: dict | None) -> None:
        binding = Binding.from_doc(topic, group, doc) if doc is not None else None
        current = self.bindings.get(topic, {}).get(group)
        if binding == current:
            return
        if binding is None:
            self.bindings.get(topic, {}).pop(group, None)
        else:
            self.bindings.setdefault(topic, {})[group] = binding
        log.info("binding %s/%s %s", topic, group, "removed" if binding is None else f"revision {binding.revision}")
        for listener in self.on_binding:
            listener(topic, group, binding)

    def _apply_app(self, app_id: str, doc: dict | None) -> None:
        app = App.from_doc(app_id, doc) if doc is not None else None
        if app is None:
            self.apps.pop(app_id, None)
        else:
            self.apps[app_id] = app
        for listener in self.on_app:
            listener(app_id, app)

    def _apply_grant(self, topic: str, app_id: str, doc: dict | None) -> None:
        if doc is not None and doc.get("produce", True):
            self.grants.setdefault(topic, set()).add(app_id)
        else:
            self.grants.get(topic, set()).discard(app_id)

    # -- a copy on disk, so a broker restarted while ZooKeeper is down still knows its clients

    def snapshot(self) -> dict:
        return {
            "topics": {name: t.doc for name, t in self.topics.items()},
            "bindings": {t: {g: _binding_doc(b) for g, b in gs.items()} for t, gs in self.bindings.items()},
            "apps": {a: app.doc() for a, app in self.apps.items()},
            "grants": {t: sorted(apps) for t, apps in self.grants.items()},
            "placements": {t: {"partitions": [{"id": pid, "replicas": list(r)} for pid, r in placed.items()],
                               **_mapping_doc(self.mappings.get(t))}
                           for t, placed in self.placements.items()},
        }

    def zk_synced(self) -> None:
        """ZooKeeper has been read in full: what came only from the snapshot is gone there."""
        for kind, key in sorted(self._unconfirmed):
            log.info("%s %s is no longer in ZooKeeper", kind, "/".join(key))
            self.apply(kind, key, None)
        self.ready = True

    def load_snapshot(self, snap: dict) -> None:
        for name, doc in snap.get("topics", {}).items():
            self.apply("topic", (name,), doc)
        for topic, groups in snap.get("bindings", {}).items():
            for group, doc in groups.items():
                self.apply("binding", (topic, group), doc)
        for topic, doc in snap.get("placements", {}).items():
            self.apply("placement", (topic,), doc)
        for app_id, doc in snap.get("apps", {}).items():
            self.apply("app", (app_id,), doc)
        for topic, apps in snap.get("grants", {}).items():
            for app_id in apps:
                self.apply("grant", (topic, app_id), {"produce": True})
        self._unconfirmed = {("topic", (n,)) for n in self.topics} | {("app", (a,)) for a in self.apps} \
            | {("binding", (t, g)) for t, gs in self.bindings.items() for g in gs} \
            | {("grant", (t, a)) for t, apps in self.grants.items() for a in apps} \
            | {("placement", (t,)) for t in self.placements}


def _binding_doc(b: Binding) -> dict:
    return {
        "topic": b.topic, "group": b.group, "app_id": b.app_id, "mode": b.mode,
        "delivery_limit": b.delivery_limit, "ttl_s": b.ttl_s, "selector": b.selector,
        "backoff": {"initial_ms": b.backoff.initial_ms, "max_ms": b.backoff.max_ms,
                    "multiplier": b.backoff.multiplier},
        "max_in_flight": b.max_in_flight, "revision": b.revision,
    }


def _mapping_doc(mapping: Mapping | None) -> dict:
    if mapping is None or not mapping.version:
        return {}
    return {"mapping": {"version": mapping.version, "partitions": mapping.partitions, "previous": mapping.previous}}
