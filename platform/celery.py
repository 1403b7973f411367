"""The Celery application of the control plane (Redis is its broker)."""

import logging
import os
from logging.config import dictConfig

from celery import Celery
from celery.signals import setup_logging
from django.conf import settings
from django.db import transaction

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "control_plane.settings")

app = Celery("switchyard")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

log = logging.getLogger("control_plane.celery")


def send_on_commit(name: str, *args) -> None:
    """Queue the task registered as `name` once the current transaction commits. By name, so that actions
    never import the tasks modules (which call them). Redis down: logged; each queue's periodic sweep
    re-drives what is left (pending provisioning, a queued re-drive, a move without a worker)."""
    def send():
        try:
            app.send_task(name, args=list(args))
        except Exception:
            log.exception("could not queue %s%r; its periodic sweep will re-drive it", name, args)

    transaction.on_commit(send)


@setup_logging.connect
def _use_project_logging(loglevel=None, **kwargs):
    """Workers log through settings.LOGGING (structured JSON lines, alerts with their fields), not Celery's
    own format, which drops a record's extra fields; `-l` still sets the level."""
    dictConfig(settings.LOGGING)
    if loglevel:
        logging.getLogger().setLevel(loglevel)
