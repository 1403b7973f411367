"""Celery tasks of the transactions section: thin, they take ids and call backcheck / redrive."""

from __future__ import annotations

import logging
from datetime import datetime

from apps.audit.context import action_context
from apps.clusters.choices import ClusterStatus
from apps.clusters.models import Cluster
from apps.transactions import redrive
from apps.transactions.actions import REDRIVE_TASK
from apps.transactions.backcheck import run_check_round, sweep_cluster
from apps.transactions.broker_admin import BrokerEndpoint
from control_plane.celery import app

log = logging.getLogger("apps.transactions.tasks")

SWEEP_TASK = "transactions.sweep_all"


@app.task(bind=True, name=SWEEP_TASK, acks_late=False)
def sweep_all(self) -> dict:
    """The periodic sweep (django-celery-beat): every active cluster, every live broker."""
    with action_context("task", self.request.id):
        return {c.name: sweep_cluster(c, _dispatch) for c in Cluster.objects.filter(status=ClusterStatus.ACTIVE)}


def _dispatch(cluster_id: int, endpoint, pks: list[int], claim: datetime) -> None:
    check_batch.delay(cluster_id, endpoint.node_id, endpoint.host, endpoint.metrics_port, pks, claim.isoformat())


@app.task(bind=True, name="transactions.check_batch", acks_late=True)
def check_batch(self, cluster_id: int, node_id: str, host: str, metrics_port: int, pks: list[int],
                claim: str) -> dict:
    """One round of back-checks for a batch of claimed messages on one broker."""
    with action_context("task", self.request.id):
        cluster = Cluster.objects.get(pk=cluster_id)
        return run_check_round(cluster, BrokerEndpoint(node_id, host, metrics_port), pks,
                               datetime.fromisoformat(claim))


# Acked when it ends: a worker lost mid-run leaves the task to be delivered again, and the run resumes (a
# second delivery of a run that is going or done changes nothing).
@app.task(bind=True, name=REDRIVE_TASK, acks_late=True, reject_on_worker_lost=True)
def run_redrive(self, redrive_id: int) -> str:
    with action_context("task", self.request.id):
        return redrive.run(redrive_id).state


@app.task(name="transactions.resume_stalled_redrives")
def resume_stalled_redrives() -> list[int]:
    """Periodic (django-celery-beat): queue again the runs whose worker stopped beating."""
    pks = redrive.stalled()
    for pk in pks:
        run_redrive.delay(pk)
    return pks
