"""The audit checkpoint, as a django-celery-beat PeriodicTask: every 30 s, so there is one at least every minute."""

from django.db import migrations

NAME = "Checkpoint the audit chain's head"


def create(apps, schema_editor):
    IntervalSchedule = apps.get_model("django_celery_beat", "IntervalSchedule")
    PeriodicTask = apps.get_model("django_celery_beat", "PeriodicTask")
    if PeriodicTask.objects.filter(name=NAME).exists():
        return
    interval, _ = IntervalSchedule.objects.get_or_create(every=30, period="seconds")
    PeriodicTask.objects.create(
        name=NAME, task="audit.write_checkpoint", interval=interval, kwargs="{}",
        description="Sign the audit chain's head (last id, hash, count) with the checkpoint key and write it outside "
                    "the database, so `manage.py audit_verify` finds deleted newest records and truncation.",
    )


def remove(apps, schema_editor):
    apps.get_model("django_celery_beat", "PeriodicTask").objects.filter(name=NAME).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("audit", "0003_runtime_role"),
        ("django_celery_beat", "0019_alter_periodictasks_options"),
    ]

    operations = [migrations.RunPython(create, remove)]
