"""The broker-down alarm end to end: a real broker scraped by a real Prometheus, a real Alertmanager and Celery
worker. Stopping the cluster's only broker fires the alarm (the webhook receiver gets it), both while its target is
still listed (up = 0) and once the worker has dropped it from the targets (no series at all); starting the broker
again resolves it."""

from __future__ import annotations

import pytest

from tests.alerts.conftest import prometheus_query, wait_for
from tests.alerts.test_no_consumer_alarm import rule_loaded

pytestmark = pytest.mark.django_db(transaction=True)

ALERT = "SwitchyardBrokerDown"


def brokers_up(prometheus: str, cluster: str) -> list[str]:
    found = prometheus_query(prometheus, f'up{{job="switchyard-brokers", cluster="{cluster}"}}')
    return [r["value"][1] for r in found]


def test_stopping_the_only_broker_fires_broker_down_and_its_return_resolves_it(
        governed, monitoring, alert_settings, webhook, api_for, celery_worker):
    from apps.alerts import tasks

    cp, people, prometheus = governed.cp, governed.people, monitoring["prometheus"]
    broker = governed.cluster.broker()
    assert tasks.write_targets.delay().get(timeout=30) >= 1
    wait_for(lambda: brokers_up(prometheus, cp.name) == ["1"], 60, "Prometheus to scrape the broker")

    created = api_for(people.sre).post("/api/v1/monitoring/alert-rules/", {
        "name": "no broker left", "kind": "broker_down", "cluster": cp.name, "for_seconds": 2,
        "webhook_urls": [webhook.url]}, format="json")
    assert created.status_code == 201, created.content
    rule = created.json()
    assert rule["threshold"] == 1.0  # fewer than one live broker
    wait_for(lambda: rule_loaded(prometheus, rule["id"]), 30, "Prometheus to load the rule")
    assert webhook.statuses(ALERT) == []  # the broker is up: nothing fires

    broker.stop()  # its target is still listed: Prometheus' scrape fails, up = 0
    wait_for(lambda: brokers_up(prometheus, cp.name) == ["0"], 30, "Prometheus to find the broker down")
    wait_for(lambda: "firing" in webhook.statuses(ALERT), 120, "the webhook to receive the broker-down alarm")
    firing = [a for body in webhook.received for a in body["alerts"] if a["status"] == "firing"][0]
    assert {k: firing["labels"].get(k) for k in ("alertname", "rule_id", "rule", "kind", "cluster")} == {
        "alertname": ALERT, "rule_id": str(rule["id"]), "rule": "no broker left", "kind": "broker_down",
        "cluster": cp.name}
    assert "topic" not in firing["labels"] and firing["annotations"]["value"] == "0"

    # the worker drops the stopped broker from the targets (it left ZooKeeper): no series at all, still firing
    wait_for(lambda: tasks.write_targets.delay().get(timeout=30) == 0, 30, "the broker to leave the targets")
    wait_for(lambda: brokers_up(prometheus, cp.name) == [], 30, "Prometheus to drop the broker's target")
    assert "resolved" not in webhook.statuses(ALERT)

    broker.start()  # back: registered again, listed again, scraped again
    assert tasks.write_targets.delay().get(timeout=30) == 1
    wait_for(lambda: brokers_up(prometheus, cp.name) == ["1"], 60, "Prometheus to scrape the broker again")
    wait_for(lambda: "resolved" in webhook.statuses(ALERT), 120, "the webhook to receive the resolution")
    resolved = [a for body in webhook.received for a in body["alerts"] if a["status"] == "resolved"][0]
    assert resolved["labels"]["rule_id"] == str(rule["id"]) and resolved["endsAt"] > resolved["startsAt"]
