"""The console's history of alerts: what Alertmanager notified the control plane (its webhook to
/alerts/notify, every alert, firing then resolved). Not a governance change: no audit record."""

from __future__ import annotations

from datetime import datetime

from django.db import transaction

from apps.alerts.choices import AlertStatus
from apps.alerts.models import AlertEvent, AlertRule

MAX_ALERTS = 1000  # per notification


class BadNotification(ValueError):
    pass


def _time(value) -> datetime | None:
    if not isinstance(value, str) or value.startswith("0001-"):  # Alertmanager's zero time: no end yet
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise BadNotification(f"not a time: {value[:40]!r}") from None


@transaction.atomic
def record_notification(payload) -> int:
    """Keep each alert of an Alertmanager webhook payload (version 4); returns how many."""
    if not isinstance(payload, dict) or not isinstance(payload.get("alerts"), list):
        raise BadNotification("not an Alertmanager notification (no alerts list)")
    alerts = payload["alerts"][:MAX_ALERTS]
    for alert in alerts:
        if not isinstance(alert, dict):
            raise BadNotification("an alert is not an object")
        labels = alert.get("labels") if isinstance(alert.get("labels"), dict) else {}
        status = alert.get("status")
        if status not in AlertStatus.values or not isinstance(alert.get("fingerprint"), str):
            raise BadNotification("an alert without status or fingerprint")
        starts_at = _time(alert.get("startsAt"))
        if starts_at is None:
            raise BadNotification("an alert without startsAt")
        rule_id = str(labels.get("rule_id", ""))
        rule = AlertRule.objects.filter(pk=int(rule_id)).first() if rule_id.isdigit() and len(rule_id) < 18 else None
        AlertEvent.objects.update_or_create(
            fingerprint=alert["fingerprint"][:32], starts_at=starts_at,
            defaults={"status": status, "ends_at": _time(alert.get("endsAt")) if status == AlertStatus.RESOLVED else None,
                      "alertname": str(labels.get("alertname", ""))[:200], "rule": rule,
                      "cluster": str(labels.get("cluster", ""))[:200],
                      "labels": {str(k)[:100]: str(v)[:500] for k, v in labels.items()},
                      "annotations": {str(k)[:100]: str(v)[:2000] for k, v in (alert.get("annotations") or {}).items()}})
    return len(alerts)
