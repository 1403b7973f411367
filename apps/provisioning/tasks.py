"""Celery tasks: thin wrappers that take ids and call the provisioning modules.

They are bound to the project's app (not `shared_task`): Celery's "current app" is per thread, and
a web request thread that queues a push must reach the project's Redis, not a default broker.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from django.db import OperationalError

from apps.audit.context import action_context
from apps.clusters.zookeeper import ZooKeeperUnreachable
from control_plane import actors
from control_plane.celery import app

log = logging.getLogger(__name__)


def _retry(task, exc: Exception, what: str):
    """Retry after the backoff. ZooKeeper being away is retried until the push gives up itself (it then marks
    the objects failed); a database error (a deadlock, a serialization failure, a lost connection) rolled the
    attempt back, so it is retried too, up to the same number of attempts."""
    from apps.provisioning import provision

    if isinstance(exc, OperationalError) and task.request.retries + 1 >= provision.max_attempts():
        log.error("provisioning %s: %s; giving up after %d attempts (the periodic reconcile re-drives it)", what,
                  exc, task.request.retries + 1)
        raise exc
    delay = provision.backoff(task.request.retries)
    log.warning("provisioning %s: %s; retry %d in %.1fs", what, exc, task.request.retries + 1, delay)
    return task.retry(exc=exc, countdown=delay)


@app.task(bind=True, name="provisioning.provision_application", max_retries=None, acks_late=True)
def provision_application(self, kind: str, application_id: int):
    """Push what an approved application created; retry with exponential backoff while ZooKeeper is away or
    an attempt lost a deadlock in the database."""
    from apps.provisioning import provision

    with action_context("task", self.request.id):
        try:
            return provision.provision_application(kind, application_id, retries=self.request.retries)
        except (ZooKeeperUnreachable, OperationalError) as exc:
            raise _retry(self, exc, f"{kind} application {application_id}") from exc


@app.task(bind=True, name="provisioning.provision_objects", max_retries=None, acks_late=True)
def provision_objects(self, cluster_id: int, units: list):
    from apps.provisioning import provision

    with action_context("task", self.request.id):
        try:
            provision.provision_objects(cluster_id, units, retries=self.request.retries)
        except (ZooKeeperUnreachable, OperationalError) as exc:
            raise _retry(self, exc, f"{units} on cluster {cluster_id}") from exc


@app.task(bind=True, name="provisioning.reconcile_all")
def reconcile_all(self, repair: bool = False):
    """The periodic sweep: compare every active cluster (repairing those whose `repair_drift` is on), then
    re-drive objects left pending or failed."""
    from apps.clusters.choices import ClusterStatus
    from apps.clusters.models import Cluster
    from apps.provisioning.reconcile import reconcile, stale_units

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
    from django.contrib.auth import get_user_model

    from apps.clusters.models import Cluster
    from apps.provisioning.reconcile import reconcile

    actor = get_user_model().objects.filter(pk=actor_id, is_active=True).first() if actor_id else actors.RECONCILE
    if actor is None:  # the requesting user is gone or disabled: nobody to act for
        log.warning("reconcile of cluster %s skipped: its requester %s is no longer an active user", cluster_id, actor_id)
        return None
    with action_context("task", self.request.id):
        cluster = Cluster.objects.filter(pk=cluster_id).first()
        if cluster is not None:
            return reconcile(cluster, repair=repair, actor=actor).pk
