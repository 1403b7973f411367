"""What ZooKeeper should hold, computed from the database (the source of truth).

The documents follow docs/zookeeper-layout.md; paths come from broker_core.layout, shared with the
brokers that read them. Nothing here does I/O with ZooKeeper.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Q

from apps.bindings.choices import BindingStatus, OnFailure
from apps.bindings.models import Binding, ProducerGrant
from apps.provisioning.models import ObjectKind, Placement
from apps.topics.choices import TopicStatus
from apps.topics.models import App, Topic
from broker_core.layout import LAYOUT, LAYOUT_VERSION, encode

META = "meta"
# A topic's data stays on its clusters until it is deleted: retired topics still drain their bindings.
HELD = (TopicStatus.ACTIVE, TopicStatus.RETIRED)


def meta_doc(cluster) -> dict:
    return {"layout_version": LAYOUT_VERSION, "cluster": cluster.name,
            "default_partitions": cluster.default_partitions,
            "default_replication_factor": cluster.default_replication_factor, "min_insync": cluster.min_insync}


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
    } | ({"status": TopicStatus.RETIRED.value} if topic.status == TopicStatus.RETIRED else {}) | (
        # layout 3: written when it is not one partition of one replica (brokers read absent fields as 1)
        {"partitions": topic.partition_count, "replication_factor": topic.replicas}
        if (topic.partition_count, topic.replicas) != (1, 1) else {})


def holder_ids(topic: Topic) -> list[int]:
    """The clusters that hold `topic`: the one serving it first, then those it moves to or from."""
    extra = [p.cluster_id for p in topic.placements.all()]  # .all(): prefetched by the callers that list
    return [topic.cluster_id, *sorted(c for c in extra if c != topic.cluster_id)]


def route_doc(topic: Topic) -> dict:
    """docs/routing.md: where the topic's producers send and its consumers subscribe."""
    placements = {p.cluster_id: p for p in topic.placements.all()}
    clusters = {topic.cluster_id: topic.cluster, **{p.cluster_id: p.cluster for p in placements.values()}}
    consume = [topic.cluster_id, *sorted(c for c, p in placements.items() if p.consume and c != topic.cluster_id)]
    return {
        "topic": topic.name,
        "environment": topic.environment,
        "version": topic.route_version,
        "produce": topic.cluster.name,
        "consume": [clusters[c].name for c in consume],
        "clusters": {c.name: c.zk_hosts for c in clusters.values()},
    }


def binding_doc(binding: Binding) -> dict:
    return _binding_doc(binding.topic.name, binding.app.app_id, {f: getattr(binding, f) for f in BINDING_FIELDS})


# The binding's own fields its document carries (reconcile reads them as plain values, not models).
BINDING_FIELDS = ("group", "selector_kind", "selector_pattern", "mode", "delivery_limit", "ttl_s",
                  "backoff_initial_ms", "backoff_max_ms", "backoff_multiplier", "max_in_flight", "on_failure", "revision")


def _binding_doc(topic: str, app_id: str, f: dict) -> dict:
    doc = {
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
    if f["on_failure"] != OnFailure.BLOCK:  # absent means block (docs/zookeeper-layout.md): documents stay as before
        doc["on_failure"] = f["on_failure"]
    return doc


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
    if kind == ObjectKind.ROUTE:
        return LAYOUT.route(obj.name)
    if kind == META:
        return LAYOUT.META
    raise ValueError(f"unknown object kind {kind!r}")


DOC = {ObjectKind.TOPIC: topic_doc, ObjectKind.BINDING: binding_doc, ObjectKind.APP: app_doc,
       ObjectKind.GRANT: grant_doc, ObjectKind.ROUTE: route_doc, META: meta_doc}


@dataclass
class Desired:
    kind: str
    object_id: int
    path: str
    doc: dict
    obj: object = None

    @property
    def revision(self) -> int:
        if self.kind == ObjectKind.ROUTE:
            return int(self.doc["version"])
        return int(self.doc.get("revision") or self.doc.get("layout_version") or 0)

    @property
    def data(self) -> bytes:
        return encode(self.doc)


def load_any(kind: str, object_id: int):
    """The row of that kind whatever its status (for the path of a node to delete); None when it is gone."""
    if kind in (ObjectKind.TOPIC, ObjectKind.ROUTE):
        return Topic.objects.filter(pk=object_id).select_related("cluster").prefetch_related(
            "placements__cluster").first()
    if kind in (ObjectKind.BINDING, ObjectKind.GRANT):
        model = Binding if kind == ObjectKind.BINDING else ProducerGrant
        return model.objects.filter(pk=object_id).select_related("topic__cluster", "app").prefetch_related(
            "topic__placements").first()
    if kind == ObjectKind.APP:
        return App.objects.filter(pk=object_id).select_related("team").first()
    raise ValueError(f"unknown object kind {kind!r}")


def load(kind: str, object_id: int):
    """The object of that kind if some cluster should hold it, with what its document needs; None when it
    is gone, retired (bindings, grants) or deleted (topics)."""
    obj = load_any(kind, object_id)
    if obj is None or kind == ObjectKind.APP:
        return obj
    if kind in (ObjectKind.TOPIC, ObjectKind.ROUTE):
        return obj if obj.status in HELD else None
    return obj if obj.status == BindingStatus.ACTIVE and obj.topic.status in HELD else None


def successor(kind: str, row, cluster_id: int):
    """The live object that now has `row`'s node path on the cluster — a group bound again after its binding was
    removed, an app granted again, a topic name taken again after deletion — or None."""
    if kind in (ObjectKind.TOPIC, ObjectKind.ROUTE):
        others = Topic.objects.filter(name=row.name, environment=row.environment, status__in=HELD)
    elif kind == ObjectKind.BINDING:
        others = Binding.objects.filter(topic__name=row.topic.name, topic__environment=row.topic.environment,
                                        group=row.group, status=BindingStatus.ACTIVE)
    elif kind == ObjectKind.GRANT:
        others = ProducerGrant.objects.filter(topic__name=row.topic.name, topic__environment=row.topic.environment,
                                              app_id=row.app_id, status=BindingStatus.ACTIVE)
    else:
        return None  # app ids are never reused
    for pk in others.exclude(pk=row.pk).values_list("pk", flat=True):
        obj = load(kind, pk)
        if wanted_on(kind, obj, cluster_id):
            return obj
    return None


def wanted_on(kind: str, obj, cluster_id: int) -> bool:
    """Whether `cluster_id` should hold `obj` (as `load` gives it: None is wanted nowhere)."""
    if obj is None:
        return False
    if kind in (ObjectKind.TOPIC, ObjectKind.ROUTE):
        return cluster_id in holder_ids(obj)
    if kind in (ObjectKind.BINDING, ObjectKind.GRANT):
        return cluster_id in holder_ids(obj.topic)
    if kind == ObjectKind.APP:
        return cluster_id in clusters_of_app(obj)
    raise ValueError(f"unknown object kind {kind!r}")


def revision_of(kind: str, obj) -> int:
    return obj.route_version if kind == ObjectKind.ROUTE else obj.revision


def desired_one(kind: str, obj) -> Desired:
    return Desired(kind, obj.pk, path_of(kind, obj), DOC[kind](obj), obj)


def topic_units(topic: Topic) -> list[tuple[str, int]]:
    """Every object of a topic a cluster may hold, in the order they are written: apps, the topic, its
    bindings and grants (whatever their status: a removed one is deleted), the route last."""
    bindings = list(Binding.objects.filter(topic=topic).values_list("pk", "app_id"))
    grants = list(ProducerGrant.objects.filter(topic=topic).values_list("pk", "app_id"))
    apps = sorted({a for _, a in bindings} | {a for _, a in grants})
    return ([(ObjectKind.APP, a) for a in apps] + [(ObjectKind.TOPIC, topic.pk)]
            + [(ObjectKind.BINDING, b) for b, _ in bindings] + [(ObjectKind.GRANT, g) for g, _ in grants]
            + [(ObjectKind.ROUTE, topic.pk)])


def clusters_of_app(app: App) -> list[int]:
    """The clusters whose ZooKeeper should know the app: those holding a topic it is bound to or granted on."""
    topics = set(Binding.objects.filter(app=app, status=BindingStatus.ACTIVE, topic__status__in=HELD)
                 .values_list("topic_id", flat=True))
    topics |= set(ProducerGrant.objects.filter(app=app, status=BindingStatus.ACTIVE, topic__status__in=HELD)
                  .values_list("topic_id", flat=True))
    serving = Topic.objects.filter(pk__in=topics).values_list("cluster_id", flat=True)
    placed = Placement.objects.filter(topic_id__in=topics).values_list("cluster_id", flat=True)
    return sorted(set(serving) | set(placed))


def topics_on(cluster) -> Q:
    """The topics a cluster holds (serving them or as a placement), as a filter on Topic."""
    return Q(status__in=HELD) & (Q(cluster=cluster) | Q(placements__cluster=cluster))


def desired_for_cluster(cluster) -> dict[str, Desired]:
    """Every object the cluster's ZooKeeper should hold, by path (relative to the chroot)."""
    out: dict[str, Desired] = {}
    meta = Desired(META, cluster.pk, LAYOUT.META, meta_doc(cluster), cluster)
    out[meta.path] = meta
    topics = list(Topic.objects.filter(topics_on(cluster)).distinct().select_related("cluster")
                  .prefetch_related("placements__cluster"))
    for topic in topics:
        for kind in (ObjectKind.TOPIC, ObjectKind.ROUTE):
            d = desired_one(kind, topic)
            out[d.path] = d
    topic_ids = [t.pk for t in topics]
    app_ids: set[int] = set()
    # Plain rows, not model instances: a cluster may hold tens of thousands of bindings.
    rows = (Binding.objects.filter(topic_id__in=topic_ids, status=BindingStatus.ACTIVE)
            .values_list("pk", "topic__name", "app_id", "app__app_id", *BINDING_FIELDS))
    for pk, topic, app_pk, app_id, *values in rows.iterator(chunk_size=5000):
        fields = dict(zip(BINDING_FIELDS, values, strict=True))
        d = Desired(ObjectKind.BINDING, pk, LAYOUT.binding(topic, fields["group"]), _binding_doc(topic, app_id, fields))
        out[d.path] = d
        app_ids.add(app_pk)
    for grant in ProducerGrant.objects.filter(topic_id__in=topic_ids, status=BindingStatus.ACTIVE).select_related(
            "topic", "app"):
        d = desired_one(ObjectKind.GRANT, grant)
        out[d.path] = d
        app_ids.add(grant.app_id)
    for app in App.objects.filter(pk__in=app_ids).select_related("team"):
        d = desired_one(ObjectKind.APP, app)
        out[d.path] = d
    return out

