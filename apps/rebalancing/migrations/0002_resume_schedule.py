"""The periodic resume of rebalances whose worker died, as a django-celery-beat PeriodicTask an SRE can edit."""

import json

from django.db import migrations

from control_plane.beat_schedule import interval_task


class Migration(migrations.Migration):
    dependencies = [
        ("rebalancing", "0001_initial"),
        ("django_celery_beat", "0019_alter_periodictasks_options"),
    ]

    operations = [interval_task(
        "Resume stalled rebalances", "rebalancing.resume_stalled", every=15, period="seconds",
        kwargs=json.dumps({"stale_after_s": 30}),
        description="Queue again the rebalances whose worker stopped beating for stale_after_s seconds (killed, or "
                    "its next run lost with it) and whose lease expired; the rebalance carries on from its step.",
    )]
