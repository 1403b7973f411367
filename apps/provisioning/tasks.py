"""Celery tasks: thin wrappers that take ids and call the provisioning modules.

They are bound to the project's app (not `shared_task`): Celery's "current app" is per thread, and
a web request thread that queues a push must reach the project's Redis, not a default broker.

A push that finds ZooKeeper away, or loses a deadlock in the database (the attempt was rolled back), is
retried by Celery with exponential backoff (`autoretry_for`, `retry_backoff`): from
SWITCHYARD_PROVISION_BACKOFF_BASE seconds, doubling up to SWITCHYARD_PROVISION_BACKOFF_MAX, for
SWITCHYARD_PROVISION_MAX_ATTEMPTS attempts in all. The last attempt marks what ZooKeeper did not take
failed instead of raising (the periodic reconcile re-drives it); a database error on the last attempt is
raised, and the periodic reconcile re-drives that too.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import OperationalError

from apps.audit.context import action_context
from apps.clusters.choices import ClusterStatus
from apps.clusters.models import Cluster
from apps.clusters.zookeeper import ZooKeeperUnreachable
from apps.provisioning import provision
from apps.provisioning.actions import PROVISION_APPLICATION_TASK, PROVISION_OBJECTS_TASK, RECONCILE_TASK
from apps.provisioning.reconcile import reconcile, stale_units
from control_plane import actors
from control_plane.celery import app

log = logging.getLogger(__name__)

RETRIED = {
    "autoretry_for": (ZooKeeperUnreachable, OperationalError),
    "retry_backoff": settings.SWITCHYARD_PROVISION_BACKOFF_BASE,
    "retry_backoff_max": settings.SWITCHYARD_PROVISION_BACKOFF_MAX,
    "retry_jitter": False,  # the delays double exactly, as documented
    "max_retries": settings.SWITCHYARD_PROVISION_MAX_ATTEMPTS - 1,
    "acks_late": True,
}


def _last_attempt(task) -> bool:
    return task.max_retries is not None and task.request.retries >= task.max_retries


@app.task(bind=True, name=PROVISION_APPLICATION_TASK, **RETRIED)
def provision_application(self, kind: str, application_id: int):
    """Push what an approved application created (retried while ZooKeeper is away)."""
    with action_context("task", self.request.id):
        return provision.provision_application(kind, application_id, final=_last_attempt(self))


@app.task(bind=True, name=PROVISION_OBJECTS_TASK, **RETRIED)
def provision_objects(self, cluster_id: int, units: list):
    with action_context("task", self.request.id):
        provision.provision_objects(cluster_id, units, final=_last_attempt(self))


@app.task(bind=True, name=RECONCILE_TASK)
def reconcile_all(self, repair: bool = False):
    """The periodic sweep: compare every active cluster (repairing those whose `repair_drift` is on), then
    re-drive objects left pending or failed."""
    summary = {}
    with action_context("task", self.request.id):
        for cluster in Cluster.objects.filter(status=ClusterStatus.ACTIVE):
            run = reconcile(cluster, repair=repair or cluster.repair_drift,  # the cluster's setting: desired state wins
                            actor=actors.RECONCILE)
            units = stale_units(cluster, older_than=timedelta(minutes=5))
            if units and run.reachable:
                provision_objects.delay(cluster.pk, [[k, i] for k, i in units])
            summary[cluster.name] = {"reachable": run.reachable, "drift": run.drift_count, "redriven": len(units)}
    return summary


@app.task(bind=True, name="provisioning.reconcile_cluster")
def reconcile_cluster(self, cluster_id: int, repair: bool = False, actor_id: int | None = None):
    actor = get_user_model().objects.filter(pk=actor_id, is_active=True).first() if actor_id else actors.RECONCILE
    if actor is None:  # the requesting user is gone or disabled: nobody to act for
        log.warning("reconcile of cluster %s skipped: its requester %s is no longer an active user", cluster_id, actor_id)
        return None
    with action_context("task", self.request.id):
        cluster = Cluster.objects.filter(pk=cluster_id).first()
        if cluster is not None:
            return reconcile(cluster, repair=repair, actor=actor).pk
