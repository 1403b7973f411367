"""Item 3, done when: with a real Prometheus and Alertmanager, stopping every consumer of a group fires the
no-consumer alarm — its webhook receives it within 2 minutes and the SMTP sink gets the e-mail — the console
shows it firing, and it resolves when a consumer returns (webhook, e-mail and the console's history)."""

from __future__ import annotations

import urllib.request

import pytest

from tests.alerts.conftest import prometheus_query, wait_for
from tests.broker.helpers import RawConsumer
from tests.integration.conftest import CONSUMER_APP, TOPIC

pytestmark = pytest.mark.django_db(transaction=True)

ALERT = "SwitchyardNoConsumers"


def consumers_seen(prometheus: str, cluster: str) -> list[str]:
    found = prometheus_query(prometheus, f'switchyard_group_consumers{{cluster="{cluster}", group="shipping"}}')
    return [r["value"][1] for r in found]


def rule_loaded(prometheus: str, rule_id: int) -> bool:
    import json

    with urllib.request.urlopen(f"{prometheus}/api/v1/rules", timeout=5) as response:
        groups = json.loads(response.read())["data"]["groups"]
    return any(r.get("labels", {}).get("rule_id") == str(rule_id) for g in groups for r in g["rules"])


def test_stopping_every_consumer_fires_the_alarm_and_a_returning_consumer_resolves_it(
        governed, monitoring, alert_settings, webhook, smtp_sink, api_for, celery_worker, page, live_server):
    from apps.alerts import tasks
    from apps.alerts.models import AlertEvent
    from apps.audit.models import AuditRecord
    from tests.support.browser import login

    cp, people, prometheus = governed.cp, governed.people, monitoring["prometheus"]
    broker = governed.cluster.broker()
    assert tasks.write_targets.delay().get(timeout=30) >= 1  # the worker tells Prometheus where the broker is
    consumer = RawConsumer(broker.address, CONSUMER_APP, governed.consumer_secret, TOPIC, "shipping")
    consumer.start()
    wait_for(lambda: consumers_seen(prometheus, cp.name) == ["1"], 60, "Prometheus to see the group's consumer")

    created = api_for(people.sre).post("/api/v1/monitoring/alert-rules/", {
        "name": "shipping has no consumer", "kind": "no_consumers", "cluster": cp.name, "topic": f"{TOPIC}@dev",
        "group": "shipping", "for_seconds": 2, "webhook_urls": [webhook.url], "emails": ["oncall@example.com"],
    }, format="json")
    assert created.status_code == 201, created.content
    rule = created.json()
    assert (rule["threshold"], rule["created_by"]) == (1.0, people.sre.username)
    assert AuditRecord.objects.filter(action="alert_rule.create", object_id=str(rule["id"]),
                                      actor_name=people.sre.username).count() == 1
    wait_for(lambda: rule_loaded(prometheus, rule["id"]), 30, "Prometheus to load the rule")
    assert webhook.statuses(ALERT) == []  # a consumer is connected: nothing fires

    consumer.close()  # every consumer of the group gone
    wait_for(lambda: "firing" in webhook.statuses(ALERT), 120, "the webhook to receive the firing alarm")
    [firing] = [a for body in webhook.received for a in body["alerts"] if a["status"] == "firing"][:1]
    assert {k: firing["labels"].get(k) for k in ("rule_id", "cluster", "topic", "group", "kind")} == {
        "rule_id": str(rule["id"]), "cluster": cp.name, "topic": TOPIC, "group": "shipping", "kind": "no_consumers"}
    mail = wait_for(lambda: [m for m in smtp_sink.messages if ALERT in m[1] and "oncall@example.com" in m[0]], 60,
                    "the e-mail in the SMTP sink")
    assert "shipping has no consumer" in mail[0][1]

    # the console shows it firing (read from Alertmanager)
    login(page, live_server.url, people.sre.username)
    page.goto(f"{live_server.url}/alerts/")
    firing_row = page.get_by_test_id("firing-alerts").locator("tbody tr", has_text="shipping has no consumer")
    firing_row.wait_for()
    assert ALERT in firing_row.inner_text() and "group=shipping" in firing_row.inner_text()

    returning = RawConsumer(broker.address, CONSUMER_APP, governed.consumer_secret, TOPIC, "shipping")
    returning.start()  # a consumer is back
    try:
        wait_for(lambda: "resolved" in webhook.statuses(ALERT), 120, "the webhook to receive the resolution")
        wait_for(lambda: [m for m in smtp_sink.messages if "RESOLVED" in m[1].upper() and ALERT in m[1]], 60,
                 "the resolution e-mail")
        # the console's history, from Alertmanager's notifications to the control plane
        event = wait_for(lambda: AlertEvent.objects.filter(rule_id=rule["id"], status="resolved").first(), 60,
                         "the resolved alert in the history")
        assert (event.alertname, event.cluster, event.labels["group"]) == (ALERT, cp.name, "shipping")
        assert event.ends_at is not None and event.ends_at > event.starts_at
    finally:
        returning.close()
