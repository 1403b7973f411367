"""What has landed where, for a move's steps to wait on: a topic's objects synced on a cluster, its route
at a version on the clusters that hold it, and what of it is left in a cluster's ZooKeeper.

Sync states are the provisioning side's record of what it read back from ZooKeeper (never assumed); only
`leftovers` reads ZooKeeper itself, to confirm the source holds nothing of the topic any more.
"""

from __future__ import annotations

from apps.bindings.choices import BindingStatus
from apps.bindings.models import Binding, ProducerGrant
from apps.provisioning.desired import load, path_of, revision_of, topic_units, wanted_on
from apps.provisioning.models import ObjectKind, SyncState, SyncStatus
from apps.provisioning.zk import Session
from apps.topics.models import Topic
from broker_core.layout import LAYOUT

SHOWN = 10  # paths named in a step's figures


def objects_on(topic: Topic, cluster) -> dict:
    """How many of the topic's objects (apps, topic, bindings, grants, route) the cluster should hold, and how
    many have landed there at their current revision."""
    wanted: dict[tuple[str, int], tuple[int, str]] = {}
    for kind, object_id in topic_units(topic):
        obj = load(kind, object_id)
        if wanted_on(kind, obj, cluster.pk):
            wanted[(kind, object_id)] = (revision_of(kind, obj), path_of(kind, obj))
    states = {(s.kind, s.object_id): s for s in SyncState.objects.filter(
        cluster=cluster, kind__in={k for k, _ in wanted}, object_id__in={i for _, i in wanted})}
    pending, failed, errors = [], [], []
    for key, (revision, path) in wanted.items():
        state = states.get(key)
        if state is not None and state.state == SyncStatus.SYNCED and state.landed_revision == revision:
            continue
        (failed if state is not None and state.state == SyncStatus.FAILED else pending).append(path)
        if state is not None and state.error:
            errors.append(f"{path}: {state.error[:200]}")
    return {"objects": len(wanted), "landed": len(wanted) - len(pending) - len(failed),
            "pending": pending[:SHOWN], "failed": failed[:SHOWN], "errors": errors[:3]}


def served_by(topic: Topic) -> tuple[set[str], set[str]]:
    """The apps granted to publish on the topic and the groups bound to it (active ones): what a broker serving
    the topic must have applied."""
    grants = set(ProducerGrant.objects.filter(topic=topic, status=BindingStatus.ACTIVE).values_list(
        "app__app_id", flat=True))
    groups = set(Binding.objects.filter(topic=topic, status=BindingStatus.ACTIVE).values_list("group", flat=True))
    return grants, groups


def route_landed(topic: Topic, version: int, clusters) -> dict[str, bool]:
    """cluster name → whether its /routes/<topic> node was read back at `version` (or a later one)."""
    states = {s.cluster_id: s for s in SyncState.objects.filter(
        kind=ObjectKind.ROUTE, object_id=topic.pk, cluster__in=[c.pk for c in clusters])}
    out = {}
    for cluster in clusters:
        state = states.get(cluster.pk)
        out[cluster.name] = bool(state is not None and state.landed_revision is not None
                                 and state.landed_revision >= version)
    return out


def leftovers(topic: Topic, cluster) -> list[str]:
    """The nodes of the topic still in the cluster's ZooKeeper (read now): its topic and route nodes, its
    bindings and grants, and the nodes of its apps that nothing else on that cluster uses."""
    session = Session(cluster.zk_connect, cluster.zk_chroot)
    paths = [LAYOUT.topic(topic.name), LAYOUT.route(topic.name)]
    for kind, object_id in topic_units(topic):
        if kind == ObjectKind.APP:
            app = load(kind, object_id)
            if app is not None and not wanted_on(kind, app, cluster.pk):
                paths.append(LAYOUT.app(app.app_id))
    found = [p for p, node in session.read_many(paths).items() if node is not None]
    children = session.children_many([LAYOUT.topic_bindings(topic.name), LAYOUT.topic_grants(topic.name)])
    found += [f"{parent}/{child}" for parent, names in children.items() for child in names]
    return found
