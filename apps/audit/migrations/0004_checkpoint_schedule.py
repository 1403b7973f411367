"""The audit checkpoint, as a django-celery-beat PeriodicTask: every 30 s, so there is one at least every minute."""

from django.db import migrations

from control_plane.beat_schedule import interval_task


class Migration(migrations.Migration):
    dependencies = [
        ("audit", "0003_runtime_role"),
        ("django_celery_beat", "0019_alter_periodictasks_options"),
    ]

    operations = [interval_task(
        "Checkpoint the audit chain's head", "audit.write_checkpoint", every=30, period="seconds",
        description="Sign the audit chain's head (last id, hash, count) with the checkpoint key and write it outside "
                    "the database, so `manage.py audit_verify` finds deleted newest records and truncation.",
    )]
