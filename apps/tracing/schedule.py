"""The trace index schedule: one django-celery-beat PeriodicTask that Celery beat's DatabaseScheduler reads live.

The task is created by the migration 0002_index_schedule; reading the schedule never writes. Only an SRE's
change (actions.update_index_schedule) creates it again if someone deleted it.
"""

from __future__ import annotations

from dataclasses import dataclass

from django_celery_beat.models import IntervalSchedule, PeriodicTask

TASK_NAME = "trace-index-build"
TASK = "apps.tracing.tasks.scheduled_trace_index_build"
DEFAULT_EVERY_MINUTES = 10
DESCRIPTION = "Build the message tracing index from new trace files"


@dataclass
class IndexSchedule:
    every_minutes: int | None  # None: there is no such task, so beat builds nothing
    enabled: bool
    last_run_at: object = None

    def as_dict(self) -> dict:
        return {"every_minutes": self.every_minutes, "enabled": self.enabled}


def periodic_task() -> PeriodicTask | None:
    return PeriodicTask.objects.filter(name=TASK_NAME).select_related("interval").first()


def read_schedule() -> IndexSchedule:
    task = periodic_task()
    if task is None:
        return IndexSchedule(every_minutes=None, enabled=False)
    every = task.interval.every if task.interval and task.interval.period == IntervalSchedule.MINUTES else 0
    return IndexSchedule(every_minutes=every, enabled=task.enabled, last_run_at=task.last_run_at)


def write_schedule(every_minutes: int, enabled: bool) -> IndexSchedule:
    interval, _ = IntervalSchedule.objects.get_or_create(every=every_minutes, period=IntervalSchedule.MINUTES)
    task = periodic_task() or PeriodicTask(name=TASK_NAME, task=TASK, description=DESCRIPTION)
    task.interval = interval
    task.crontab = None
    task.enabled = enabled
    task.save()  # PeriodicTask.save bumps PeriodicTasks.last_update: beat reloads its schedule
    return read_schedule()
