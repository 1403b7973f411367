"""Which cluster serves a topic in an environment, and how to reach it (for the SDK)."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.http import Http404

from apps.clusters.choices import Environment
from apps.provisioning.desired import HELD, route_doc
from apps.provisioning.models import ObjectKind, SyncState, SyncStatus
from apps.topics.models import Topic
from broker_core.layout import LAYOUT_VERSION


def route_of(topic: Topic, sync_state: str | None = None) -> dict:
    """docs/routing.md's document plus, for older SDKs, the serving cluster's ZooKeeper and the topic's
    settings. `sync_state`: the topic's node as last read back from the serving cluster (pending until it
    has landed)."""
    cluster = topic.cluster
    if sync_state is None:
        record = SyncState.objects.filter(kind=ObjectKind.TOPIC, object_id=topic.pk, cluster=cluster).first()
        sync_state = record.state if record else SyncStatus.PENDING
    return {
        **route_doc(topic),
        "status": topic.status,
        "cluster": cluster.name,
        "zk_connect": cluster.zk_connect,
        "zk_chroot": cluster.zk_chroot,
        "zk_hosts": cluster.zk_hosts,
        "layout_version": LAYOUT_VERSION,
        "revision": topic.revision,
        "ordered": topic.ordered,
        "transactional": topic.transactional,
        "message_types": list(topic.message_types),
        "sync_state": str(sync_state),
    }


def _environment(value: str | None) -> str:
    if not value:
        raise ValidationError({"environment": "Say which environment: " + ", ".join(Environment.values) + "."})
    if value not in Environment.values:
        raise ValidationError({"environment": f"Unknown environment {value!r}; use one of "
                                              + ", ".join(Environment.values) + "."})
    return value


def route(topic_name: str, environment: str | None) -> dict:
    environment = _environment(environment)
    topic = (Topic.objects.filter(name=topic_name, environment=environment, status__in=HELD)
             .select_related("cluster").prefetch_related("placements__cluster").first())
    if topic is None:
        raise Http404(f"No topic {topic_name} in {environment} (or it was deleted): check the name and the "
                      "environment, or apply for the topic.")
    return route_of(topic)


def routes(environment: str | None) -> list[dict]:
    environment = _environment(environment)
    topics = list(Topic.objects.filter(environment=environment, status__in=HELD)
                  .select_related("cluster").prefetch_related("placements__cluster").order_by("name"))
    states = {(s.object_id, s.cluster_id): s.state
              for s in SyncState.objects.filter(kind=ObjectKind.TOPIC, object_id__in=[t.pk for t in topics])}
    return [route_of(t, states.get((t.pk, t.cluster_id), SyncStatus.PENDING)) for t in topics]
