"""The periodic sweep of retired topics, as a django-celery-beat PeriodicTask an SRE can edit while it runs."""

from django.db import migrations

from control_plane.beat_schedule import interval_task


class Migration(migrations.Migration):
    dependencies = [
        ("lifecycle", "0001_initial"),
        ("django_celery_beat", "0019_alter_periodictasks_options"),
    ]

    operations = [interval_task(
        "End retired topics", "lifecycle.sweep_retired", every=60, period="seconds",
        description="Read the brokers' backlog of every retired topic's bindings, retire the drained ones, and "
                    "delete the topics with no binding left once their retention after retirement has passed.",
    )]
