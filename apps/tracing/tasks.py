"""Celery tasks of the tracing section: thin, they take ids and call the runner.

Bound to the project's app (not `shared_task`), like the other sections' tasks: in a web process nothing
makes the project's app the current one, so a shared task queued from a view went to Celery's default
broker (amqp on localhost) and the request failed with a 500.
"""

from __future__ import annotations

import logging

from apps.audit.context import action_context
from control_plane.celery import app

log = logging.getLogger("apps.tracing.tasks")


@app.task(name="apps.tracing.tasks.build_trace_index", acks_late=False)
def build_trace_index(run_id: int) -> str:
    from apps.tracing.runner import run_index_build

    with action_context("task"):
        return run_index_build(run_id).state


@app.task(name="apps.tracing.tasks.scheduled_trace_index_build", acks_late=False)
def scheduled_trace_index_build() -> str:
    """Beat's entry: queue a build unless one is already queued or running (then this tick is skipped)."""
    from django.db import transaction

    from apps.tracing.actions import active_run, lock_runs
    from apps.tracing.choices import RunTrigger
    from apps.tracing.models import IndexRun
    from apps.tracing.runner import run_index_build

    with action_context("task"), transaction.atomic():
        lock_runs()
        if active_run() is not None:
            log.info("scheduled trace index build skipped: one is under way")
            return "skipped"
        run = IndexRun.objects.create(trigger=RunTrigger.SCHEDULE)
    with action_context("task"):
        return run_index_build(run.pk).state
