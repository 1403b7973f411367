"""The audit log as CSV (streamed)."""

import json

from apps.tracing.export import csv_response

HEADER = ["id", "timestamp", "actor", "action", "object_type", "object_id", "object", "source", "request_id",
          "before", "after", "hash"]


def _json(value) -> str:
    return "" if value is None else json.dumps(value, sort_keys=True)


def export_audit(queryset):
    return csv_response("audit-log.csv", HEADER, queryset.iterator(chunk_size=2000), lambda r: [
        r.pk, r.timestamp.isoformat(), r.actor_name, r.action, r.object_type, r.object_id, r.object_repr,
        r.source, r.request_id, _json(r.before), _json(r.after), r.hash])
