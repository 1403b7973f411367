"""The scheduled trace index build, as a django-celery-beat PeriodicTask an SRE can edit while beat runs.

Created here so that beat builds the index on a fresh install; reading the schedule never creates it.
"""

from django.db import migrations

NAME = "trace-index-build"  # apps.tracing.schedule.TASK_NAME
TASK = "apps.tracing.tasks.scheduled_trace_index_build"
EVERY_MINUTES = 10


def create(apps, schema_editor):
    IntervalSchedule = apps.get_model("django_celery_beat", "IntervalSchedule")
    PeriodicTask = apps.get_model("django_celery_beat", "PeriodicTask")
    if PeriodicTask.objects.filter(name=NAME).exists():
        return
    interval, _ = IntervalSchedule.objects.get_or_create(every=EVERY_MINUTES, period="minutes")
    PeriodicTask.objects.create(name=NAME, task=TASK, interval=interval, enabled=True, kwargs="{}",
                                description="Build the message tracing index from new trace files")


def remove(apps, schema_editor):
    apps.get_model("django_celery_beat", "PeriodicTask").objects.filter(name=NAME).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("tracing", "0001_initial"),
        ("django_celery_beat", "0019_alter_periodictasks_options"),
    ]

    operations = [migrations.RunPython(create, remove)]
