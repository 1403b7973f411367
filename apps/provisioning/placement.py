"""Which clusters hold and serve a topic: the SRE's (or a move's) changes of a topic's placements.

A topic is served by `Topic.cluster` (producers send there). While it moves, other clusters hold it too
(`Placement` rows); consumers subscribe on those with `consume`. Each change here is atomic and audited,
grows the topic's `route_version`, and pushes the topic's objects and its `/routes/<topic>` node to every
cluster concerned — a cluster that stops holding the topic has its nodes deleted (docs/routing.md).
"""

from __future__ import annotations

from django.db import transaction

from apps.audit.recorder import audited, record
from apps.clusters.models import Cluster
from apps.provisioning import actions
from apps.provisioning.desired import HELD, holder_ids, route_doc, topic_units
from apps.provisioning.models import Placement
from apps.topics.models import Topic
from control_plane.errors import ActionError, require_perm

PERM = "provisioning.move_topic"


def holders(topic: Topic) -> list[Cluster]:
    """The clusters that hold `topic`: the serving one first."""
    ids = holder_ids(topic)
    by_id = Cluster.objects.in_bulk(ids)
    return [by_id[i] for i in ids]


def _locked(topic: Topic) -> Topic:
    return Topic.objects.select_for_update(of=("self",)).select_related("cluster").get(pk=topic.pk)


def _check(topic: Topic, cluster: Cluster) -> None:
    if topic.status not in HELD:
        raise ActionError(f"Topic {topic.name} is {topic.get_status_display().lower()}; it cannot be placed.")
    if cluster.environment != topic.environment:
        raise ActionError(f"Cluster {cluster.name} serves {cluster.get_environment_display()}, topic {topic.name} "
                          f"lives in {topic.get_environment_display()}: choose a cluster of the topic's environment.",
                          field="cluster")


def _changed(actor, topic: Topic, verb: str, before: dict, also: tuple[int, ...] = ()) -> Topic:
    """Grow the route version, audit the change, push the topic's objects where they are (or were)."""
    topic.route_version += 1
    topic.save(update_fields=["route_version", "cluster", "updated_at"])
    topic = Topic.objects.select_related("cluster").prefetch_related("placements__cluster").get(pk=topic.pk)
    after = route_doc(topic)
    record(actor=actor, action=f"topic.{verb}", obj=topic, before=before, after=after)
    actions.schedule_on_holders(topic, topic_units(topic), also=also)
    return topic


def _route(topic: Topic) -> dict:
    return route_doc(Topic.objects.select_related("cluster").prefetch_related("placements__cluster").get(pk=topic.pk))


@audited
@transaction.atomic
def place(*, actor, topic: Topic, cluster: Cluster, consume: bool = False) -> Topic:
    """`cluster` holds the topic too (its objects are provisioned there); with `consume` consumers subscribe
    there as well. Placing the serving cluster is refused; placing again changes `consume`."""
    require_perm(actor, PERM)
    topic = _locked(topic)
    _check(topic, cluster)
    if cluster.pk == topic.cluster_id:
        raise ActionError(f"Cluster {cluster.name} already serves topic {topic.name}.", field="cluster")
    before = _route(topic)
    placement, created = Placement.objects.get_or_create(topic=topic, cluster=cluster,
                                                         defaults={"consume": consume})
    if not created and placement.consume == consume:
        return topic  # nothing changes: no new route version
    if not created:
        placement.consume = consume
        placement.save(update_fields=["consume", "updated_at"])
    return _changed(actor, topic, "placed", before)


@audited
@transaction.atomic
def unplace(*, actor, topic: Topic, cluster: Cluster) -> Topic:
    """`cluster` no longer holds the topic: its nodes there (topic, bindings, grants, route, apps used by
    nothing else there) are deleted; the brokers then delete the topic's data. The serving cluster cannot be
    unplaced (move the topic first)."""
    require_perm(actor, PERM)
    topic = _locked(topic)
    if cluster.pk == topic.cluster_id:
        raise ActionError(f"Cluster {cluster.name} serves topic {topic.name}; make another cluster serve it first.",
                          field="cluster")
    before = _route(topic)
    deleted, _ = Placement.objects.filter(topic=topic, cluster=cluster).delete()
    if not deleted:
        return topic
    return _changed(actor, topic, "unplaced", before, also=(cluster.pk,))


@audited
@transaction.atomic
def serve_from(*, actor, topic: Topic, cluster: Cluster) -> Topic:
    """Producers send to `cluster` from now on. The cluster serving the topic until now keeps holding it as
    a placement whose consumers still subscribe there (until it is drained and unplaced)."""
    require_perm(actor, PERM)
    topic = _locked(topic)
    _check(topic, cluster)
    if cluster.pk == topic.cluster_id:
        return topic
    before = _route(topic)
    previous = topic.cluster
    Placement.objects.filter(topic=topic, cluster=cluster).delete()
    Placement.objects.update_or_create(topic=topic, cluster=previous, defaults={"consume": True})
    topic.cluster = cluster
    return _changed(actor, topic, "served_from", before)
