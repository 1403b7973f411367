"""The periodic writing of Prometheus' broker targets and publishing of the alarm rules, as django-celery-beat
PeriodicTasks an SRE can edit."""

from django.db import migrations

from control_plane.beat_schedule import interval_task


class Migration(migrations.Migration):
    dependencies = [
        ("alerts", "0001_initial"),
        ("django_celery_beat", "0019_alter_periodictasks_options"),
    ]

    operations = [
        interval_task("Write Prometheus broker targets", "alerts.write_targets", every=15, period="seconds",
                      description="Write the live brokers of every active cluster (ZooKeeper membership) into the "
                                  "file Prometheus discovers its broker targets from."),
        interval_task("Publish alarm rules", "alerts.publish", every=5, period="minutes",
                      description="Render the alarm rules into Prometheus' rule file and Alertmanager's "
                                  "configuration and reload both (also done at once after each rule change)."),
    ]
