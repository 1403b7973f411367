"""Celery tasks of the alarms: thin, they call apps.alerts.publish (beat entries made by a data migration)."""

from __future__ import annotations

from apps.alerts import publish as publishing
from control_plane.celery import app

TARGETS_TASK = "alerts.write_targets"
PUBLISH_TASK = publishing.PUBLISH_TASK


@app.task(name=TARGETS_TASK)
def write_targets() -> int:
    """Periodic: the brokers Prometheus scrapes, from each active cluster's ZooKeeper membership."""
    return publishing.write_targets()


@app.task(name=PUBLISH_TASK, autoretry_for=(publishing.PublishFailed, OSError), retry_backoff=2,
          retry_backoff_max=60, retry_jitter=False, max_retries=10)
def publish() -> int:
    """Periodic and after a change: the alarm rules into Prometheus and Alertmanager."""
    return publishing.publish_config()
