"""The trace index schedule: one django-celery-beat PeriodicTask that Celery beat's DatabaseScheduler reads live."""

from __future__ import annotations

from dataclasses import dataclass

from django_celery_beat.models import IntervalSchedule, PeriodicTask

TASK_NAME = "trace-index-build"
TASK = "apps.tracing.tasks.scheduled_trace_index_build"
DEFAULT_EVERY_MINUTES = 10


@dataclass
class IndexSchedule:
    every_minutes: int
    enabled: bool
    last_run_at: object = None

    def as_dict(self) -> dict:
        return {"every_minutes": self.every_minutes, "enabled": self.enabled}


def periodic_task() -> PeriodicTask:
    """The schedule's task, created with the default interval the first time it is asked for."""
    task = PeriodicTask.objects.filter(name=TASK_NAME).select_related("interval").first()
    if task is None:
        interval, _ = IntervalSchedule.objects.get_or_create(every=DEFAULT_EVERY_MINUTES,
                                                             period=IntervalSchedule.MINUTES)
        task = PeriodicTask.objects.create(name=TASK_NAME, task=TASK, interval=interval, enabled=True,
                                           description="Build the message tracing index from new trace files")
    return task


def read_schedule() -> IndexSchedule:
    task = periodic_task()
    every = task.interval.every if task.interval and task.interval.period == IntervalSchedule.MINUTES else 0
    return IndexSchedule(every_minutes=every, enabled=task.enabled, last_run_at=task.last_run_at)


def write_schedule(every_minutes: int, enabled: bool) -> IndexSchedule:
    task = periodic_task()
    interval, _ = IntervalSchedule.objects.get_or_create(every=every_minutes, period=IntervalSchedule.MINUTES)
    task.interval = interval
    task.crontab = None
    task.enabled = enabled
    task.save()  # PeriodicTask.save bumps PeriodicTasks.last_update: beat reloads its schedule
    return read_schedule()
