"""Writes of the tracing section: start an index build, change its schedule. Atomic, permission-checked, audited.

The trace index itself is written only by the Spark job; auditors hold no permission used here. A build is
queued on commit by its task's name (tasks import this module, never the other way round).
"""

from __future__ import annotations

import logging
from datetime import timedelta

from django.core.exceptions import ValidationError
from django.db import connection, transaction
from django.utils import timezone

from apps.audit.recorder import record
from apps.tracing import schedule
from apps.tracing.choices import RunState, RunTrigger
from apps.tracing.models import IndexRun
from control_plane.celery import app
from control_plane.errors import ActionError, require_perm

MIN_EVERY_MINUTES, MAX_EVERY_MINUTES = 1, 24 * 60
STALE_AFTER = timedelta(hours=3)
log = logging.getLogger("apps.tracing.actions")
_RUNS_LOCK_KEY = 0x5357_5452_554E  # one decision at a time about starting a run
BUILD_TASK = "apps.tracing.tasks.build_trace_index"


def active_run() -> IndexRun | None:
    """The run under way, if any. One that has not finished after STALE_AFTER is marked failed (its
    worker died with it), so it cannot block every later build."""
    stale = IndexRun.objects.filter(state__in=[RunState.QUEUED, RunState.RUNNING],
                                    created_at__lt=timezone.now() - STALE_AFTER)
    for run in stale:
        IndexRun.objects.filter(pk=run.pk).update(
            state=RunState.FAILED, finished_at=timezone.now(), stage="abandoned",
            error=f"no result after {STALE_AFTER}; its worker probably stopped")
        log.warning("index run abandoned", extra={"run_id": run.pk})
    return IndexRun.objects.filter(state__in=[RunState.QUEUED, RunState.RUNNING]).first()


def lock_runs() -> None:
    """Serialise "is a run under way? then start one" so two requests cannot both start one."""
    with connection.cursor() as cur:
        cur.execute("SELECT pg_advisory_xact_lock(%s)", [_RUNS_LOCK_KEY])


@transaction.atomic
def request_index_build(*, actor, trigger: str = RunTrigger.MANUAL) -> IndexRun:
    """Queue a build now; refused while another is queued or running (they would only wait on each other)."""
    require_perm(actor, "tracing.start_indexrun")
    lock_runs()
    busy = active_run()
    if busy is not None:
        raise ActionError(f"index run #{busy.pk} is {busy.state}; wait for it to finish")
    run = IndexRun.objects.create(trigger=trigger, requested_by=actor if getattr(actor, "pk", None) else None)
    record(actor=actor, action="trace_index.build", obj=run, after={"trigger": trigger})
    transaction.on_commit(lambda: app.send_task(BUILD_TASK, args=[run.pk]))
    return run


@transaction.atomic
def claim_scheduled_build() -> IndexRun | None:
    """A schedule tick's run, to be built by the caller; None while another is queued or running (the
    tick is skipped)."""
    lock_runs()
    if active_run() is not None:
        return None
    return IndexRun.objects.create(trigger=RunTrigger.SCHEDULE)


@transaction.atomic
def update_index_schedule(*, actor, every_minutes: int, enabled: bool) -> schedule.IndexSchedule:
    require_perm(actor, "tracing.change_index_schedule")
    if not MIN_EVERY_MINUTES <= int(every_minutes) <= MAX_EVERY_MINUTES:
        raise ValidationError({"every_minutes": f"Give a whole number of minutes from {MIN_EVERY_MINUTES} "
                                                f"to {MAX_EVERY_MINUTES}."})
    before = schedule.read_schedule()
    after = schedule.write_schedule(int(every_minutes), bool(enabled))
    record(actor=actor, action="trace_index.schedule", object_type="tracing.schedule",
           object_id=schedule.TASK_NAME, object_repr="trace index schedule",
           before=before.as_dict(), after=after.as_dict())
    return after
