"""Item 1: Prometheus scrapes every live broker (targets the control plane writes from ZooKeeper membership) and
the control plane's own /metrics, which only the monitoring token may read."""

from __future__ import annotations

import json

import pytest
from django.test import Client

from tests.alerts.conftest import prometheus_query, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def test_only_the_monitoring_token_reads_metrics(settings, people, make_user):
    from tests.support.stack import monitoring_token

    client = Client()
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer not-the-token").status_code == 401
    assert client.get("/metrics", HTTP_AUTHORIZATION=f"Token {monitoring_token()}").status_code == 401
    client.force_login(people.sre)  # a signed-in person is not Prometheus
    assert client.get("/metrics").status_code == 401
    assert Client().post("/alerts/notify", data="{}", content_type="application/json").status_code == 401
    settings.SWITCHYARD_MONITORING_TOKEN = ""  # no token configured: nobody
    assert Client().get("/metrics", HTTP_AUTHORIZATION="Bearer ").status_code == 403


def test_control_plane_figures(people, make_cluster, topic_fields):
    from prometheus_client.parser import text_string_to_metric_families

    from apps.topics import actions
    from tests.support.stack import monitoring_token

    cluster = make_cluster()
    for name in ("payments.pending-one", "payments.pending-two"):
        actions.create_topic_application(actor=people.dev, **topic_fields(cluster, name=name))
    response = Client().get("/metrics", HTTP_AUTHORIZATION=f"Bearer {monitoring_token()}")
    assert response.status_code == 200
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(response.content.decode()) for s in family.samples}
    assert samples[("switchyard_applications", (("kind", "topic"), ("state", "pending")))] == 2
    assert samples[("switchyard_applications", (("kind", "topic"), ("state", "active")))] == 0
    assert samples[("switchyard_applications", (("kind", "binding"), ("state", "pending")))] == 0
    assert samples[("switchyard_provisioning_waiting", (("kind", "topic"),))] == 0
    assert samples[("switchyard_provisioning_lag_seconds", (("kind", "topic"),))] == 0
    assert samples[("switchyard_zookeeper_drift_objects", (("cluster", cluster.name),))] == 0
    assert samples[("switchyard_audit_records", ())] >= 3  # the cluster and the two applications
    assert ("switchyard_audit_chain_anchored", ()) in samples


def test_prometheus_scrapes_brokers_and_control_plane(governed, monitoring, alert_settings):
    from apps.alerts import tasks

    broker = governed.cluster.broker()
    # the Celery worker writes the targets file from the cluster's ZooKeeper membership
    assert tasks.write_targets.delay().get(timeout=30) >= 1
    targets = json.loads((monitoring["dir"] / "targets" / "brokers.json").read_text())
    assert {"targets": [f"127.0.0.1:{broker.metrics_port}"],
            "labels": {"cluster": governed.cp.name, "node": broker.node_id}} in targets

    def up(job):
        return {(r["metric"].get("cluster"), r["metric"].get("node")): r["value"][1]
                for r in prometheus_query(monitoring["prometheus"], f'up{{job="{job}"}}')}

    wait_for(lambda: up("switchyard-brokers").get((governed.cp.name, broker.node_id)) == "1", 30,
             "Prometheus scraping the broker")
    wait_for(lambda: list(up("switchyard-control-plane").values()) == ["1"], 30, "Prometheus scraping the control plane")
    # a broker figure under the control plane's cluster name, and one of the control plane's own
    connected = wait_for(lambda: prometheus_query(
        monitoring["prometheus"], f'switchyard_broker_zookeeper_connected{{cluster="{governed.cp.name}"}}'),
        30, "the broker's own figures in Prometheus")
    # the target's labels (the control plane's names) win; the broker's own cluster name is kept beside them
    assert [(r["metric"]["node"], r["metric"]["exported_cluster"], r["value"][1]) for r in connected] == [
        (broker.node_id, governed.cluster.name, "1")]
    active = wait_for(lambda: prometheus_query(monitoring["prometheus"],
                                               'switchyard_applications{kind="binding", state="active"}'), 30,
                      "the control plane's figures in Prometheus")
    assert float(active[0]["value"][1]) >= 1
