"""The periodic reconcile, as a django-celery-beat PeriodicTask an SRE can edit while it runs."""

import json

from django.db import migrations

NAME = "Reconcile every cluster with ZooKeeper"


def create(apps, schema_editor):
    IntervalSchedule = apps.get_model("django_celery_beat", "IntervalSchedule")
    PeriodicTask = apps.get_model("django_celery_beat", "PeriodicTask")
    if PeriodicTask.objects.filter(name=NAME).exists():
        return
    interval, _ = IntervalSchedule.objects.get_or_create(every=60, period="seconds")
    PeriodicTask.objects.create(
        name=NAME, task="provisioning.reconcile_all", interval=interval, kwargs=json.dumps({"repair": False}),
        description="Compare every cluster's desired objects with ZooKeeper, record drift, "
                    "re-drive what is still pending.",
    )


def remove(apps, schema_editor):
    apps.get_model("django_celery_beat", "PeriodicTask").objects.filter(name=NAME).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("provisioning", "0001_initial"),
        ("django_celery_beat", "0019_alter_periodictasks_options"),
    ]

    operations = [migrations.RunPython(create, remove)]
