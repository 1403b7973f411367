"""JSON-safe snapshots of model instances for the before/after of audit records."""

from __future__ import annotations

import datetime
import decimal
import uuid

from django.db import models

# Fields never written into the audit log (secrets stay out of it; hashes too).
REDACTED = {"password", "secret_hash", "previous_secret_hash"}


def _plain(value):
    if isinstance(value, datetime.datetime | datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, decimal.Decimal | uuid.UUID):
        return str(value)
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return value


def snapshot(obj: models.Model | None) -> dict | None:
    if obj is None:
        return None
    out = {}
    for field in obj._meta.concrete_fields:
        if field.name in REDACTED:
            continue
        out[field.attname] = _plain(field.value_from_object(obj))
    for field in obj._meta.many_to_many:
        if obj.pk is not None:
            out[field.name] = sorted(o.pk for o in field.value_from_object(obj))
    return out
