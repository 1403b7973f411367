"""Prometheus figures of the audit chain, served at the control plane's /metrics (control_plane.metrics).

A whole verification (`manage.py audit_verify`) re-hashes every record: too slow for a scrape. At scrape time
the chain's *anchor* is checked instead: the latest signed checkpoint must carry a good signature and name a
record that is still in the table with the hash it had (a rewrite or truncation of the log behind the
checkpoint's head shows as 0)."""

from __future__ import annotations

import time
from datetime import datetime

from prometheus_client.core import GaugeMetricFamily

from apps.audit.checkpoint import CheckpointKeyMissing, read_checkpoints, read_head
from apps.audit.models import AuditRecord


class AuditCollector:
    def collect(self):
        head_id, _, count = read_head()
        records = GaugeMetricFamily("switchyard_audit_records", "Records in the audit log")
        records.add_metric([], count)
        yield records
        anchored = GaugeMetricFamily("switchyard_audit_chain_anchored", "1 when the latest signed checkpoint is "
                                     "intact and its head record is in the log with the same hash, else 0")
        age = GaugeMetricFamily("switchyard_audit_checkpoint_age_seconds", "Seconds since the latest checkpoint "
                                "(-1: none yet)")
        try:
            stored = read_checkpoints()
        except CheckpointKeyMissing:
            anchored.add_metric([], 0)
            age.add_metric([], -1)
            yield anchored
            yield age
            return
        latest = stored.valid[-1] if stored.valid else None
        ok = not stored.forged
        if latest is not None and latest.head_id is not None:
            ok = ok and AuditRecord.objects.filter(pk=latest.head_id, hash=latest.head_hash).exists()
            ok = ok and count >= latest.count
        anchored.add_metric([], 1 if ok else 0)
        age.add_metric([], time.time() - datetime.fromisoformat(latest.written_at).timestamp() if latest else -1)
        yield anchored
        yield age
