"""The periodic back-check sweep, as a django-celery-beat PeriodicTask an SRE can edit while it runs."""

from django.db import migrations

from control_plane.beat_schedule import interval_task


class Migration(migrations.Migration):
    dependencies = [
        ("transactions", "0001_initial"),
        ("django_celery_beat", "0019_alter_periodictasks_options"),
    ]

    operations = [interval_task(
        "Back-check prepared transaction messages", "transactions.sweep_all", every=5, period="seconds",
        description="List every live broker's prepared messages older than the smallest check delay, record "
                    "them, and queue back-checks of the due ones in batches.",
    )]
