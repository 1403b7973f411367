"""The governance audit log: append-only and hash-chained."""

from __future__ import annotations

import hashlib
import json

from django.conf import settings
from django.db import models

GENESIS_HASH = "0" * 64


class AuditRecordQuerySet(models.QuerySet):
    def update(self, **kwargs):
        raise AuditLogIsAppendOnly("audit records cannot be updated")

    def delete(self):
        raise AuditLogIsAppendOnly("audit records cannot be deleted")


class AuditLogIsAppendOnly(Exception):
    pass


class AuditRecord(models.Model):
    """One governance change: who did what to which object, before and after."""

    timestamp = models.DateTimeField(db_index=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.DO_NOTHING,
        db_constraint=False, related_name="+",
    )
    actor_name = models.CharField(max_length=150)
    action = models.CharField(max_length=64, db_index=True)
    object_type = models.CharField(max_length=64, db_index=True)
    object_id = models.CharField(max_length=64, db_index=True)
    object_repr = models.CharField(max_length=200, blank=True)
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)
    request_id = models.CharField(max_length=64, db_index=True)
    source = models.CharField(max_length=16)
    prev_hash = models.CharField(max_length=64)
    hash = models.CharField(max_length=64, unique=True)

    objects = AuditRecordQuerySet.as_manager()

    class Meta:
        ordering = ["id"]
        indexes = [models.Index(fields=["object_type", "object_id"])]

    def __str__(self) -> str:
        return f"#{self.pk} {self.actor_name} {self.action} {self.object_type}:{self.object_id}"

    def save(self, *args, **kwargs):
        if self.pk is not None and not kwargs.get("force_insert"):
            raise AuditLogIsAppendOnly("audit records cannot be updated")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise AuditLogIsAppendOnly("audit records cannot be deleted")

    def payload(self) -> dict:
        """The fields the hash covers, in a canonical form."""
        return {
            "id": self.pk,
            "timestamp": self.timestamp.isoformat(timespec="microseconds"),
            "actor_id": self.actor_id,
            "actor_name": self.actor_name,
            "action": self.action,
            "object_type": self.object_type,
            "object_id": self.object_id,
            "object_repr": self.object_repr,
            "before": self.before,
            "after": self.after,
            "request_id": self.request_id,
            "source": self.source,
            "prev_hash": self.prev_hash,
        }

    def compute_hash(self) -> str:
        blob = json.dumps(self.payload(), sort_keys=True, separators=(",", ":"), default=str)
        return hashlib.sha256(blob.encode()).hexdigest()
