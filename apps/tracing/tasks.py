"""Celery tasks of the tracing section: thin, they take ids and call actions and the runner.

Bound to the project's app (not `shared_task`), like the other sections' tasks: in a web process nothing
makes the project's app the current one, so a shared task queued from a view went to Celery's default
broker (amqp on localhost) and the request failed with a 500.
"""

from __future__ import annotations

import logging

from apps.audit.context import action_context
from apps.tracing.actions import BUILD_TASK, claim_scheduled_build
from apps.tracing.runner import run_index_build
from apps.tracing.schedule import TASK as SCHEDULED_TASK
from control_plane.celery import app

log = logging.getLogger("apps.tracing.tasks")


@app.task(name=BUILD_TASK, acks_late=False)
def build_trace_index(run_id: int) -> str:
    with action_context("task"):
        return run_index_build(run_id).state


@app.task(name=SCHEDULED_TASK, acks_late=False)
def scheduled_trace_index_build() -> str:
    """Beat's entry: build now unless a build is already queued or running (then this tick is skipped)."""
    with action_context("task"):
        run = claim_scheduled_build()
        if run is None:
            log.info("scheduled trace index build skipped: one is under way")
            return "skipped"
        return run_index_build(run.pk).state
