"""The sweep of expired API tokens, as a django-celery-beat PeriodicTask: every hour. Authentication refuses an
expired token at once; the sweep deletes it, with an audit record, so it leaves the token lists."""

from django.db import migrations

from control_plane.beat_schedule import interval_task


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0004_ldap_sync_schedule"),
        ("django_celery_beat", "0019_alter_periodictasks_options"),
    ]

    operations = [interval_task(
        "Delete expired API tokens", "accounts.delete_expired_tokens", every=1, period="hours",
        description="Delete every API token past its expiry (authentication already refuses them), one audit "
                    "record each, so expired tokens leave the token lists.",
    )]
