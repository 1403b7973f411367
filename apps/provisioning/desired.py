"""What ZooKeeper should hold, computed from the database (the source of truth).

The documents follow docs/zookeeper-layout.md; paths come from broker_core.layout, shared with the
brokers that read them. Nothing here does I/O with ZooKeeper.
"""

from __future__ import annotations

from dataclasses import dataclass

from apps.bindings.choices import BindingStatus
from apps.bindings.models import Binding, ProducerGrant
from apps.provisioning.models import ObjectKind
from apps.topics.choices import TopicStatus
from apps.topics.models import App, Topic
from broker_core.layout import LAYOUT, LAYOUT_VERSION, encode

META = "meta"


def meta_doc(cluster) -> dict:
    return {"layout_version": LAYOUT_VERSION, "cluster": cluster.name}


def topic_doc(topic: Topic) -> dict:
    return {
        "name": topic.name,
        "message_types": list(topic.message_types),
        "ordered": topic.ordered,
        "transactional": topic.transactional,
        "retention_s": topic.retention_s,
        "storage": topic.storage_level,
        "max_message_bytes": topic.max_message_bytes,
        # the topic's back-check timing, written for every topic (brokers ignore it on plain ones)
        "tx_check": topic.tx_check,
        "revision": topic.revision,
    }


def binding_doc(binding: Binding) -> dict:
    return _binding_doc(binding.topic.name, binding.app.app_id, {f: getattr(binding, f) for f in BINDING_FIELDS})


# The binding's own fields its document carries (reconcile reads them as plain values, not models).
BINDING_FIELDS = ("group", "selector_kind", "selector_pattern", "mode", "delivery_limit", "ttl_s",
                  "backoff_initial_ms", "backoff_max_ms", "backoff_multiplier", "max_in_flight", "revision")


def _binding_doc(topic: str, app_id: str, f: dict) -> dict:
    return {
        "topic": topic,
        "group": f["group"],
        "app_id": app_id,
        "selector": {"kind": f["selector_kind"], "pattern": f["selector_pattern"]},
        "mode": f["mode"],
        "delivery_limit": f["delivery_limit"],
        "ttl_s": f["ttl_s"],
        "backoff": {"initial_ms": f["backoff_initial_ms"], "max_ms": f["backoff_max_ms"],
                    "multiplier": float(f["backoff_multiplier"])},
        "max_in_flight": f["max_in_flight"],
        "revision": f["revision"],
    }


def app_doc(app: App) -> dict:
    """Layout 2: every accepted secret hash, the one before a rotation with its deadline (Unix seconds)."""
    secrets = [{"hash": app.secret_hash, "expires_at": None}]
    if app.previous_secret_hash and app.previous_secret_valid_until:
        secrets.append({"hash": app.previous_secret_hash,
                        "expires_at": int(app.previous_secret_valid_until.timestamp())})
    return {"app_id": app.app_id, "team": app.team.name, "secrets": secrets, "active": app.active,
            "revision": app.revision}


def grant_doc(grant: ProducerGrant) -> dict:
    return {"topic": grant.topic.name, "app_id": grant.app.app_id, "produce": True, "revision": grant.revision}


def path_of(kind: str, obj) -> str:
    if kind == ObjectKind.TOPIC:
        return LAYOUT.topic(obj.name)
    if kind == ObjectKind.BINDING:
        return LAYOUT.binding(obj.topic.name, obj.group)
    if kind == ObjectKind.APP:
        return LAYOUT.app(obj.app_id)
    if kind == ObjectKind.GRANT:
        return LAYOUT.grant(obj.topic.name, obj.app.app_id)
    if kind == META:
        return LAYOUT.META
    raise ValueError(f"unknown object kind {kind!r}")


DOC = {ObjectKind.TOPIC: topic_doc, ObjectKind.BINDING: binding_doc, ObjectKind.APP: app_doc,
       ObjectKind.GRANT: grant_doc, META: meta_doc}


@dataclass
class Desired:
    kind: str
    object_id: int
    path: str
    doc: dict
    obj: object = None

    @property
    def revision(self) -> int:
        return int(self.doc.get("revision") or self.doc.get("layout_version") or 0)

    @property
    def data(self) -> bytes:
        return encode(self.doc)


def load(kind: str, object_id: int):
    """The live object of that kind, with what its document needs; None when it is gone or retired."""
    if kind == ObjectKind.TOPIC:
        return Topic.objects.filter(pk=object_id, status=TopicStatus.ACTIVE).select_related("cluster").first()
    if kind == ObjectKind.BINDING:
        return (Binding.objects.filter(pk=object_id, status=BindingStatus.ACTIVE)
                .select_related("topic__cluster", "app").first())
    if kind == ObjectKind.GRANT:
        return (ProducerGrant.objects.filter(pk=object_id, status=BindingStatus.ACTIVE)
                .select_related("topic__cluster", "app").first())
    if kind == ObjectKind.APP:
        return App.objects.filter(pk=object_id).select_related("team").first()
    raise ValueError(f"unknown object kind {kind!r}")


def desired_one(kind: str, obj) -> Desired:
    return Desired(kind, obj.pk, path_of(kind, obj), DOC[kind](obj), obj)


def clusters_of_app(app: App) -> list[int]:
    """The clusters whose ZooKeeper should know the app: where it is bound or granted."""
    via_bindings = Binding.objects.filter(app=app, status=BindingStatus.ACTIVE).values_list("topic__cluster_id",
                                                                                            flat=True)
    via_grants = ProducerGrant.objects.filter(app=app, status=BindingStatus.ACTIVE).values_list(
        "topic__cluster_id", flat=True)
    return sorted(set(via_bindings) | set(via_grants))


def desired_for_cluster(cluster) -> dict[str, Desired]:
    """Every object the cluster's ZooKeeper should hold, by path (relative to the chroot)."""
    out: dict[str, Desired] = {}
    meta = Desired(META, cluster.pk, LAYOUT.META, meta_doc(cluster), cluster)
    out[meta.path] = meta
    for topic in Topic.objects.filter(cluster=cluster, status=TopicStatus.ACTIVE):
        d = desired_one(ObjectKind.TOPIC, topic)
        out[d.path] = d
    app_ids: set[int] = set()
    # Plain rows, not model instances: a cluster may hold tens of thousands of bindings.
    rows = (Binding.objects.filter(topic__cluster=cluster, status=BindingStatus.ACTIVE)
            .values_list("pk", "topic__name", "app_id", "app__app_id", *BINDING_FIELDS))
    for pk, topic, app_pk, app_id, *values in rows.iterator(chunk_size=5000):
        fields = dict(zip(BINDING_FIELDS, values, strict=True))
        d = Desired(ObjectKind.BINDING, pk, LAYOUT.binding(topic, fields["group"]), _binding_doc(topic, app_id, fields))
        out[d.path] = d
        app_ids.add(app_pk)
    for grant in ProducerGrant.objects.filter(topic__cluster=cluster, status=BindingStatus.ACTIVE).select_related(
            "topic", "app"):
        d = desired_one(ObjectKind.GRANT, grant)
        out[d.path] = d
        app_ids.add(grant.app_id)
    for app in App.objects.filter(pk__in=app_ids).select_related("team"):
        d = desired_one(ObjectKind.APP, app)
        out[d.path] = d
    return out
