"""Write apps, topics, bindings and grants straight into a cluster's ZooKeeper, in the layout the
brokers read (docs/zookeeper-layout.md).

For tests, the benchmark and the demo seed only: in a real deployment the control plane is the one
writer of these nodes, through its approval workflow and audit log. Given an `AclPolicy` (and a client
authenticated as the control plane), every node it creates carries the ACL the layout prescribes
(broker_core.cluster.zk_acl), as the control plane's own writes do.
"""

from __future__ import annotations

import json
import time

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError
from kazoo.security import OPEN_ACL_UNSAFE

from broker_core.auth import hash_secret
from broker_core.cluster.zk_acl import AclPolicy
from broker_core.layout import LAYOUT, LAYOUT_VERSION, encode, initial_partition_state, rescale


class Provisioner:
    def __init__(self, zk: KazooClient, chroot: str, cluster: str = "", policy: AclPolicy | None = None):
        self.zk = zk
        self.root = chroot.rstrip("/")
        self.cluster = cluster or self.root.rsplit("/", 1)[-1]
        self.policy = policy

    def _acl(self, relative: str):
        return self.policy.for_path(relative) if self.policy else OPEN_ACL_UNSAFE

    def _ensure(self, relative: str) -> None:
        """The chroot's ancestors, the chroot and the containers down to `relative`, each with its ACL."""
        parts = (self.root + relative).strip("/").split("/")
        depth_of_root = len(self.root.strip("/").split("/"))
        for i in range(1, len(parts) + 1):
            path = "/" + "/".join(parts[:i])
            rel = "" if i <= depth_of_root else path[len(self.root):]
            if self.zk.exists(path) is None:
                try:
                    self.zk.create(path, b"", acl=self._acl(rel))
                except NodeExistsError:
                    pass

    def skeleton(self) -> None:
        """The chroot and `/brokers`, so brokers (which may not create them on a secured cluster) can register."""
        self._ensure(LAYOUT.BROKERS)

    def _put(self, relative: str, doc: dict) -> None:
        path = self.root + relative
        data = encode(doc)
        self._ensure(relative.rsplit("/", 1)[0])
        try:
            self.zk.create(path, data, acl=self._acl(relative))
        except NodeExistsError:
            self.zk.set(path, data)

    def exists(self, relative: str) -> bool:
        return self.zk.exists(self.root + relative) is not None

    def meta(self, *, default_partitions: int = 1, default_replication_factor: int = 1, min_insync: int = 1) -> None:
        self._put(LAYOUT.META, {"layout_version": LAYOUT_VERSION, "cluster": self.cluster,
                                "default_partitions": default_partitions,
                                "default_replication_factor": default_replication_factor, "min_insync": min_insync})

    def app(self, app_id: str, secret: str, *, team: str = "demo", active: bool = True, revision: int = 1,
            old_secret: str | None = None, old_valid_for_s: float = 0, secret_hash: str | None = None) -> None:
        """An app document (layout 2). With `old_secret`, that one stays accepted for `old_valid_for_s`
        more seconds, as after a rotation with an overlap. `secret_hash` stores a hash made elsewhere
        (a legacy PBKDF2 one, say) instead of hashing `secret`."""
        secrets = [{"hash": secret_hash or hash_secret(secret), "expires_at": None}]
        if old_secret is not None:
            secrets.append({"hash": hash_secret(old_secret), "expires_at": round(time.time() + old_valid_for_s, 3)})
        self._put(LAYOUT.app(app_id), {"app_id": app_id, "team": team, "active": active, "revision": revision,
                                       "secrets": secrets})

    def topic(self, name: str, *, message_types: list[str] | None = None, storage: str | None = None,
              max_message_bytes: int = 0, transactional: bool = False, tx_check: dict | None = None,
              retention_s: int = 0, status: str | None = None, revision: int = 1, ordered: bool = False,
              partitions: int | None = None, replication_factor: int | None = None) -> None:
        """A topic document; `transactional=True` lets it take prepared messages, `tx_check` sets its
        back-check timing (default: RocketMQ's 6 s first check, then every 30 s, at most 15 checks);
        `status="retired"` retires it (new messages refused); `retention_s` 0 keeps messages until delivered."""
        check = {"delay_s": 6, "interval_s": 30, "max_checks": 15} if transactional else \
            {"delay_s": 60, "interval_s": 60, "max_checks": 5}
        doc = {"name": name, "message_types": message_types or [], "ordered": ordered,
               "transactional": transactional, "retention_s": retention_s, "max_message_bytes": max_message_bytes,
               "tx_check": {**check, **(tx_check or {})}, "revision": revision}
        if storage:
            doc["storage"] = storage
        if partitions is not None:
            doc["partitions"] = partitions
        if replication_factor is not None:
            doc["replication_factor"] = replication_factor
        if status:
            doc["status"] = status
        self._put(LAYOUT.topic(name), doc)

    def binding(self, topic: str, group: str, app_id: str, *, mode: str = "clustering", selector: str = "*",
                selector_kind: str = "wildcard", delivery_limit: int = 16, ttl_s: float = 0,
                backoff_initial_ms: int = 1000, backoff_max_ms: int = 60_000, backoff_multiplier: float = 2.0,
                max_in_flight: int = 0, revision: int = 1, on_failure: str | None = None) -> None:
        doc = {
            "topic": topic, "group": group, "app_id": app_id, "mode": mode,
            "selector": {"kind": selector_kind, "pattern": selector},
            "delivery_limit": delivery_limit, "ttl_s": ttl_s,
            "backoff": {"initial_ms": backoff_initial_ms, "max_ms": backoff_max_ms,
                        "multiplier": backoff_multiplier},
            "max_in_flight": max_in_flight, "revision": revision,
        }
        if on_failure is not None:  # ordered topics: "block" (the default) or "dead_letter"
            doc["on_failure"] = on_failure
        self._put(LAYOUT.binding(topic, group), doc)

    def grant(self, topic: str, app_id: str, revision: int = 1) -> None:
        self._put(LAYOUT.grant(topic, app_id), {"topic": topic, "app_id": app_id, "produce": True,
                                                "revision": revision})

    def route(self, topic: str, doc: dict) -> None:
        """A topic's route document (docs/routing.md), as the control plane writes it into each cluster holding
        the topic."""
        self._put(LAYOUT.route(topic), doc)

    def placement(self, topic: str, partitions: int, replication_factor: int = 1, brokers: list[str] | None = None,
                  *, epoch: int | None = None) -> dict:
        """The topic's `/placement/<topic>` over `brokers` (default: the brokers registered now), as the control
        plane computes it (`layout.rescale`: a previous placement's replicas stay, and its partitions; keys map to
        `partitions` of them); returns the document."""
        if brokers is None:
            brokers = self.zk.get_children(self.root + LAYOUT.BROKERS)
        previous = None
        if self.exists(LAYOUT.placement(topic)):
            previous = json.loads(self.zk.get(self.root + LAYOUT.placement(topic))[0])
        doc = rescale(topic, partitions, replication_factor, brokers, previous=previous)
        if epoch:
            doc["epoch"] = epoch
        version = (doc.get("mapping") or {}).get("version")
        if version and not self.exists(LAYOUT.drained(topic, version)):  # where the brokers mark what drained
            self._put(LAYOUT.drained(topic, version), {})
        for part in doc["partitions"]:  # before the placement, like the control plane; never over a broker's
            if len(part["replicas"]) > 1 and not self.exists(LAYOUT.partition_state(topic, part["id"])):
                self._put(LAYOUT.partition_state(topic, part["id"]), initial_partition_state(part["replicas"]))
        self._put(LAYOUT.placement(topic), doc)
        return doc

    def delete(self, relative: str) -> None:
        self.zk.delete(self.root + relative, recursive=True)
