"""Push approved objects into a cluster's ZooKeeper, read them back, and record what landed.

Tasks call these with ids; ZooKeeperUnreachable goes back to the task, which Celery retries with
exponential backoff (apps.provisioning.tasks); on the task's last attempt (`final`) what did not land is
marked failed instead. Each object is written atomically (zk.Session.put).
"""

from __future__ import annotations

import logging

from kazoo.exceptions import KazooException

from apps.bindings.models import BindingApplication, GrantApplication
from apps.clusters.models import Cluster
from apps.clusters.zookeeper import ZooKeeperUnreachable
from apps.governance import actions as workflow
from apps.governance.workflow import MATERIALIZED, State, application_model
from apps.lifecycle.settle import settle_waiting
from apps.provisioning import actions, partitions
from apps.provisioning.desired import (
    META,
    Desired,
    desired_one,
    load,
    load_any,
    meta_doc,
    path_of,
    successor,
    wanted_on,
)
from apps.provisioning.models import ObjectKind, SyncState, SyncStatus
from apps.provisioning.status import observe
from apps.provisioning.units import units_of
from apps.provisioning.zk import Session, WriteConflict
from apps.topics.models import TopicApplication
from broker_core.layout import LAYOUT
from control_plane import actors

log = logging.getLogger(__name__)


class ProvisioningError(Exception):
    """ZooKeeper answered but refused the write; retrying will not help without a change."""


def _plan(cluster: Cluster, units: list[tuple[str, int]]) -> tuple[list[Desired], list[tuple[str, int, str]],
                                                                   set[str]]:
    """What to write on `cluster` (units it should hold), what it should no longer hold (kind, id, path) —
    removed, retired or deleted, or on a cluster the topic moved away from — and which of those paths another
    object holds now (a group bound again, a grant asked again, a topic name taken again): kept."""
    desired: list[Desired] = []
    removed: list[tuple[str, int, str]] = []
    taken: set[str] = set()
    known = {(r.kind, r.object_id): r.path for r in SyncState.objects.filter(cluster=cluster).filter(
        kind__in={k for k, _ in units}, object_id__in={i for _, i in units})}
    for kind, object_id in units:
        obj = load(kind, object_id)
        if wanted_on(kind, obj, cluster.pk):
            desired.append(desired_one(kind, obj))
            continue
        row = load_any(kind, object_id)
        path = known.get((kind, object_id)) or (path_of(kind, row) if row is not None else None)
        if path is not None:
            removed.append((kind, object_id, path))
            if row is not None and successor(kind, row, cluster.pk) is not None:
                taken.add(path)  # its node now belongs to another object: forgotten, not deleted
    return desired, removed, taken


def push(cluster: Cluster, units: list[tuple[str, int]]) -> list:
    """Write each unit (kind, id) the cluster should hold and delete those it should no longer hold, read the
    written ones back, record the result. Returns observations (of the written ones)."""
    desired, removed, taken = _plan(cluster, units)
    session = Session(cluster.zk_connect, cluster.zk_chroot)
    meta = Desired(META, cluster.pk, LAYOUT.META, meta_doc(cluster), cluster)
    try:
        session.ensure_skeleton()
        session.put(meta.path, meta.data)
        for d in desired:
            if d.kind == ObjectKind.TOPIC:
                partitions.write(session, d.obj)  # before the topic: no broker takes a partition it will not hold
            session.put(d.path, d.data)
        nodes = session.read_many([d.path for d in desired])
        gone = [(kind, object_id, path) for kind, object_id, path in reversed(removed)
                if path not in taken and session.delete(path)]
        for kind, _, path in gone:
            if kind == ObjectKind.TOPIC:
                partitions.remove(session, path.rsplit("/", 1)[-1])
        session.delete_empty(_containers(removed))
    except (WriteConflict, KazooException, partitions.TooFewBrokers, partitions.StillDraining) as exc:
        if isinstance(exc, WriteConflict | partitions.TooFewBrokers | partitions.StillDraining):
            raise ZooKeeperUnreachable(str(exc)) from exc  # retry later, like an outage
        raise ProvisioningError(f"ZooKeeper refused the write: {type(exc).__name__} {exc}") from exc
    records = {(r.kind, r.object_id): r for r in SyncState.objects.filter(cluster=cluster)
               .filter(kind__in={d.kind for d in desired}, object_id__in={d.object_id for d in desired})}
    observed = [(d, observe(d, nodes[d.path], records.get((d.kind, d.object_id)))) for d in desired]
    actions.record_observations(cluster, observed, attempt=True, actor=actors.PROVISIONING)
    if removed:
        actions.record_removals(cluster, removed, deleted={(k, i) for k, i, _ in gone}, actor=actors.PROVISIONING)
    return observed


def _containers(removed: list[tuple[str, int, str]]) -> list[str]:
    """The per-topic containers (/bindings/<t>, /grants/<t>) of removed topics: deleted when left empty."""
    return [container(path.rsplit("/", 1)[1]) for kind, _, path in removed if kind == ObjectKind.TOPIC
            for container in (LAYOUT.topic_bindings, LAYOUT.topic_grants)]


def provision_application(kind: str, application_id: int, *, final: bool = False) -> str:
    """Push what an approved application created. Returns the application's state afterwards."""
    application = application_model(kind).objects.filter(pk=application_id).first()
    if application is None or application.state not in MATERIALIZED:
        return "gone"
    if application.state == State.ACTIVE and _all_synced(application):
        return State.ACTIVE
    application = workflow.mark_provisioning(application)
    cluster = application.target_cluster()
    units = units_of(application)
    try:
        observed = push(cluster, units)
    except ZooKeeperUnreachable as exc:
        actions.record_failure(cluster, units, str(exc), final=final)
        if final:
            workflow.mark_failed(application, str(exc))
            return State.FAILED
        raise
    except ProvisioningError as exc:
        actions.record_failure(cluster, units, str(exc), final=True)
        workflow.mark_failed(application, str(exc))
        return State.FAILED
    if observed and all(obs.state == SyncStatus.SYNCED for _, obs in observed):
        workflow.mark_active(application)
        return State.ACTIVE
    return application.state


def _all_synced(application) -> bool:
    cluster = application.target_cluster()
    units = units_of(application)
    states = SyncState.objects.filter(cluster=cluster, kind__in={k for k, _ in units},
                                      object_id__in={i for _, i in units})
    return bool(states) and all(s.state == SyncStatus.SYNCED for s in states if (s.kind, s.object_id) in units)


def provision_objects(cluster_id: int, units: list[tuple[str, int]], *, final: bool = False) -> None:
    """Push objects that are not tied to one application (a rotated secret, a re-drive)."""
    cluster = Cluster.objects.filter(pk=cluster_id).first()
    if cluster is None:
        return
    units = [(str(k), int(i)) for k, i in units]
    try:
        push(cluster, units)
    except ZooKeeperUnreachable as exc:
        actions.record_failure(cluster, units, str(exc), final=final)
        if not final:
            raise
    except ProvisioningError as exc:
        actions.record_failure(cluster, units, str(exc), final=True)
        return
    _settle_applications(units)


def _settle_applications(units) -> None:
    """An application waiting on objects that have now all landed becomes active."""
    waiting = [State.APPROVED, State.PROVISIONING, State.FAILED]
    ids = {}
    for kind, object_id in units:
        ids.setdefault(kind, set()).add(object_id)
    candidates = list(TopicApplication.objects.filter(state__in=waiting, topic_id__in=ids.get("topic", ())))
    candidates += BindingApplication.objects.filter(state__in=waiting, binding_id__in=ids.get("binding", ()))
    candidates += GrantApplication.objects.filter(state__in=waiting, grant_id__in=ids.get("grant", ()))
    for application in candidates:
        if _all_synced(application):
            workflow.mark_active(application)
    settle_waiting(units)
