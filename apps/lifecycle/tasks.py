"""Celery tasks of the lifecycle: thin, they call apps/lifecycle/retirement.py."""

from __future__ import annotations

from apps.audit.context import action_context
from apps.lifecycle import retirement
from control_plane import actors
from control_plane.celery import app

SWEEP_TASK = "lifecycle.sweep_retired"


@app.task(bind=True, name=SWEEP_TASK, acks_late=False)
def sweep_retired(self) -> dict:
    """The periodic sweep (django-celery-beat): retire drained bindings of retired topics, delete the topics
    whose bindings are gone and whose retention after retirement has passed."""
    with action_context("task", self.request.id):
        return retirement.sweep(actor=actors.RETIREMENT)
