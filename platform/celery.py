"""The Celery application of the control plane (Redis is its broker)."""

import logging
import os

from celery import Celery
from celery.signals import setup_logging

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "control_plane.settings")

app = Celery("switchyard")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@setup_logging.connect
def _use_project_logging(loglevel=None, **kwargs):
    """Workers log through settings.LOGGING (structured JSON lines, alerts with their fields), not Celery's
    own format, which drops a record's extra fields; `-l` still sets the level."""
    from logging.config import dictConfig

    from django.conf import settings

    dictConfig(settings.LOGGING)
    if loglevel:
        logging.getLogger().setLevel(loglevel)
