"""The periodic resume of re-drives whose worker died, as a django-celery-beat PeriodicTask an SRE can edit."""

from django.db import migrations

NAME = "Resume stalled dead-letter re-drives"


def create(apps, schema_editor):
    IntervalSchedule = apps.get_model("django_celery_beat", "IntervalSchedule")
    PeriodicTask = apps.get_model("django_celery_beat", "PeriodicTask")
    if PeriodicTask.objects.filter(name=NAME).exists():
        return
    interval, _ = IntervalSchedule.objects.get_or_create(every=30, period="seconds")
    PeriodicTask.objects.create(
        name=NAME, task="transactions.resume_stalled_redrives", interval=interval, kwargs="{}",
        description="Queue again the re-drives left running by a worker that stopped beating (its lease "
                    "expired) or left queued too long; the run carries on where it stopped, re-driving "
                    "nothing twice.",
    )


def remove(apps, schema_editor):
    apps.get_model("django_celery_beat", "PeriodicTask").objects.filter(name=NAME).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("transactions", "0003_redrive_heartbeat"),
        ("django_celery_beat", "0019_alter_periodictasks_options"),
    ]

    operations = [migrations.RunPython(create, remove)]
