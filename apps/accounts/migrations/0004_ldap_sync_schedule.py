"""The LDAP sync, as a django-celery-beat PeriodicTask: every 15 minutes (it does nothing while LDAP is not
configured). Change its interval in the admin (Periodic tasks)."""

from django.db import migrations

from control_plane.beat_schedule import interval_task


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0003_sso_identities_and_group_mapping"),
        ("django_celery_beat", "0019_alter_periodictasks_options"),
    ]

    operations = [interval_task(
        "Sync LDAP users", "accounts.sync_ldap_users", every=15, period="minutes",
        description="Read every LDAP user Switchyard knows again: map changed groups to roles and teams, deactivate "
                    "users the directory no longer has (their API tokens are revoked).",
    )]
