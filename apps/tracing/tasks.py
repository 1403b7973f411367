"""Celery tasks of the tracing section: thin, they take ids and call the runner."""

from __future__ import annotations

import logging

from celery import shared_task

from apps.audit.context import action_context

log = logging.getLogger("apps.tracing.tasks")


@shared_task(name="apps.tracing.tasks.build_trace_index", acks_late=False)
def build_trace_index(run_id: int) -> str:
    from apps.tracing.runner import run_index_build

    with action_context("task"):
        return run_index_build(run_id).state


@shared_task(name="apps.tracing.tasks.scheduled_trace_index_build", acks_late=False)
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
