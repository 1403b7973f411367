"""The audit log as CSV (streamed). Every export first writes a checkpoint of the chain's head: what an auditor
took away can later be matched with what the table still holds."""

import json
import logging

from apps.audit.checkpoint import CheckpointKeyMissing, write_checkpoint
from apps.tracing.export import csv_response

log = logging.getLogger("apps.audit.export")

HEADER = ["id", "timestamp", "actor", "action", "object_type", "object_id", "object", "source", "request_id",
          "before", "after", "hash"]


def _json(value) -> str:
    return "" if value is None else json.dumps(value, sort_keys=True)


def export_audit(queryset):
    try:
        point = write_checkpoint("export")
        log.info("audit checkpoint written for an export", extra={"head_id": point.head_id, "count": point.count})
    except CheckpointKeyMissing as exc:
        log.error("audit export without a checkpoint", extra={"error": str(exc)})
    return csv_response("audit-log.csv", HEADER, queryset.iterator(chunk_size=2000), lambda r: [
        r.pk, r.timestamp.isoformat(), r.actor_name, r.action, r.object_type, r.object_id, r.object_repr,
        r.source, r.request_id, _json(r.before), _json(r.after), r.hash])
