"""The periodic back-check sweep, as a django-celery-beat PeriodicTask an SRE can edit while it runs."""

from django.db import migrations

NAME = "Back-check prepared transaction messages"


def create(apps, schema_editor):
    IntervalSchedule = apps.get_model("django_celery_beat", "IntervalSchedule")
    PeriodicTask = apps.get_model("django_celery_beat", "PeriodicTask")
    if PeriodicTask.objects.filter(name=NAME).exists():
        return
    interval, _ = IntervalSchedule.objects.get_or_create(every=5, period="seconds")
    PeriodicTask.objects.create(
        name=NAME, task="transactions.sweep_all", interval=interval, kwargs="{}",
        description="List every live broker's prepared messages older than the smallest check delay, record "
                    "them, and queue back-checks of the due ones in batches.",
    )


def remove(apps, schema_editor):
    apps.get_model("django_celery_beat", "PeriodicTask").objects.filter(name=NAME).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("transactions", "0001_initial"),
        ("django_celery_beat", "0019_alter_periodictasks_options"),
    ]

    operations = [migrations.RunPython(create, remove)]
