"""The lease columns of a row that a Celery task advances one step at a time (control_plane.stepped_tasks):
topic moves and rebalances inherit them."""

from __future__ import annotations

from django.db import models


class LeasedRow(models.Model):
    # the worker that advanced it last was alive then; an old one (and no lease) means it needs a kick
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    # a task holds the row until then (one conditional UPDATE takes it): never two at once
    lease_until = models.DateTimeField(null=True, blank=True)
    lease_owner = models.CharField(max_length=64, blank=True)

    class Meta:
        abstract = True
