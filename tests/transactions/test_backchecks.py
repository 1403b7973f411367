"""Transaction messages through a real broker, the real SDK, and back-checks driven by the real Celery
worker: commit, rollback, a killed producer answered by its restarted check listener (at once, or unknown
first and commit on a later check), an app answered through its HTTP check URL, an app whose check URL is
down, and nobody answering (rolled back after the last check, unresolved, alerted in the worker's log and at
the control plane's /metrics)."""

import json
import socket
import time
import urllib.request

import pytest
from django.db import connection

from apps.audit.models import AuditRecord
from apps.transactions.models import PreparedMessage
from broker_core.client import Consumer, Producer
from devstack.waiting import wait_for
from tests.broker.conftest import APP, SECRET, cluster, zk, zk_hosts  # noqa: F401  (the broker fixtures)
from tests.broker.helpers import Received
from tests.conftest import admin_token
from tests.transactions.helpers import (
    CheckServer,
    control_plane_cluster,
    drive_sweeps,
    prepare_and_die,
    transactional_topic,
)

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def tx(cluster, people, celery_worker, settings):  # noqa: F811
    """A broker cluster with a transactional topic `orders` (check after 1 s, every 1 s, 3 checks), its
    control-plane twin, an app row for the producing app, one broker with the admin API, a consumer."""
    from types import SimpleNamespace

    from apps.topics import actions

    settings.SWITCHYARD_BROKER_ADMIN_TOKEN = admin_token()
    cluster.standard("orders")
    cluster.pv.binding("orders", "billing", APP)
    cp = control_plane_cluster(people.admin, cluster)
    topic = transactional_topic(cp, cluster, "orders")
    app, _ = actions.create_app(actor=people.dev, app_id=APP, team=people.dev.teams.get())
    app = actions.set_app_check_hosts(actor=people.lead, app=app, hosts=["127.0.0.1"])  # the check servers
    broker = cluster.broker(admin_token=admin_token())
    got = Received()
    consumer = Consumer("orders", "billing", got.handler("billing"), **cluster.client_kwargs())
    consumer.start()
    yield SimpleNamespace(cluster=cluster, cp=cp, topic=topic, app=app, broker=broker, got=got, people=people)
    consumer.stop()
    connection.close()


def delivered(tx, message_id) -> bool:
    return message_id in tx.got.ids("billing")


def test_commit_is_delivered_and_rollback_never(tx):
    with Producer(**tx.cluster.client_kwargs()) as producer:
        ran = []
        committed = producer.send_transactional("orders", b"paid", ran.append, message_type="paid",
                                                business_id="tx-ok")
        assert ran == [committed.message_id] and committed.state == "committed"

        def fail(message_id):
            raise RuntimeError("the local transaction failed")

        with pytest.raises(RuntimeError):
            producer.send_transactional("orders", b"not paid", fail, message_type="paid", business_id="tx-no")
        marker = producer.send("orders", b"after", message_type="paid", business_id="tx-marker")
    wait_for(lambda: delivered(tx, committed.message_id) and delivered(tx, marker), 20, "commit and marker")
    time.sleep(1)
    assert {m for m in tx.got.ids("billing")} == {committed.message_id, marker}


def test_killed_producer_is_answered_by_its_restarted_check_listener(tx):
    commit_id, rollback_id = prepare_and_die(tx.cluster, "orders", 2, APP, SECRET)
    decide = {commit_id: "commit", rollback_id: "rollback"}
    asked = []

    def listener(check):
        asked.append(check.message_id)
        return decide.get(check.message_id, "unknown")

    with Producer(**tx.cluster.client_kwargs(check_listener=listener)) as producer:
        producer.send("orders", b"hello", message_type="paid")  # connected with its listener
        drive_sweeps(lambda: PreparedMessage.objects.filter(message_id__in=[commit_id, rollback_id])
                     .exclude(state="prepared").count() == 2, 60, what="both resolved by the check")
    wait_for(lambda: delivered(tx, commit_id), 20, "the committed message delivered")
    rows = {m.message_id: m for m in PreparedMessage.objects.filter(message_id__in=[commit_id, rollback_id])}
    assert (rows[commit_id].state, rows[commit_id].resolution_source) == ("committed", "check")
    assert (rows[rollback_id].state, rows[rollback_id].resolution_source) == ("rolled_back", "check")
    assert [(c.via, c.answer) for c in rows[commit_id].checks.all()] == [("connection", "commit")]
    assert [(c.via, c.answer) for c in rows[rollback_id].checks.all()] == [("connection", "rollback")]
    assert set(asked) >= {commit_id, rollback_id}
    time.sleep(1.5)
    assert not delivered(tx, rollback_id)
    # the sweeps' audit records (one per sweep that resolved something: the two may be resolved in two sweeps)
    audited = [(mid, record.source, answer) for record in AuditRecord.objects.filter(action="tx.resolve")
               for mid, answer in record.after["by_source"].get("check", {}).items() if mid in decide]
    assert sorted(audited) == sorted([(commit_id, "task", "commit"), (rollback_id, "task", "rollback")])


def test_app_without_connection_is_asked_through_its_http_check_url(tx, api_for):
    with CheckServer(lambda payload: "commit") as server:
        assert api_for(tx.people.dev).post(f"/api/v1/apps/{APP}/check-url/", {"check_url": server.url},
                                           format="json").status_code == 200
        [message_id] = prepare_and_die(tx.cluster, "orders", 1, APP, SECRET)
        drive_sweeps(lambda: PreparedMessage.objects.filter(message_id=message_id, state="committed").exists(),
                     60, what="committed through the check URL")
    wait_for(lambda: delivered(tx, message_id), 20, "delivered")
    row = PreparedMessage.objects.get(message_id=message_id)
    assert [(c.via, c.answer, c.connection) for c in row.checks.all()] == [("http", "commit", server.url)]
    assert server.asked[0]["message_id"] == message_id and server.asked[0]["app_id"] == APP
    assert server.asked[0]["topic"] == "orders" and server.asked[0]["business_id"] == "dying-0"


def test_nobody_answers_rolled_back_after_the_max_and_unresolved(tx, api_for, live_server, trace_dirs):
    [message_id] = prepare_and_die(tx.cluster, "orders", 1, APP, SECRET)
    drive_sweeps(lambda: PreparedMessage.objects.filter(message_id=message_id, state="unresolved").exists(),
                 60, what="unresolved after three checks")
    row = PreparedMessage.objects.get(message_id=message_id)
    assert (row.resolution, row.resolution_source, row.checks_done) == ("rollback", "exhausted", 3)
    checks = list(row.checks.all())
    assert [(c.via, c.answer) for c in checks] == [("none", "unknown")] * 3
    assert "no HTTP check URL" in checks[0].error
    # waits between checks: 1 s then 2 s (doubling), at least
    gaps = [(b.at - a.at).total_seconds() for a, b in zip(checks, checks[1:], strict=False)]
    assert gaps[0] >= 0.9 and gaps[1] >= 1.9, gaps

    api = api_for(tx.people.auditor)
    listed = api.get("/api/v1/tx/messages/", {"state": "unresolved"}).json()["results"]
    assert [m["message_id"] for m in listed] == [message_id]
    detail = api.get(f"/api/v1/tx/messages/{listed[0]['id']}/").json()
    assert len(detail["checks"]) == 3 and detail["resolution_source"] == "exhausted"
    [summary] = api.get("/api/v1/tx/messages/summary/", {"topic": "orders"}).json()
    assert (summary["unresolved"], summary["backlog"], summary["checks_done"]) == (1, 0, 3)
    assert AuditRecord.objects.filter(action="tx.resolve").last().after["by_source"]["exhausted"] == {
        message_id: "rollback"}
    time.sleep(1)
    assert not delivered(tx, message_id)
    # another team's developer does not see it
    assert api_for(tx.people.consumer).get("/api/v1/tx/messages/summary/").json() == []

    # the worker's log: one structured ERROR record naming the message
    log_path = trace_dirs["state"] / "celery-worker.log"

    def alerts():
        return [json.loads(line) for line in log_path.read_text(errors="replace").splitlines()
                if message_id in line and "tx_unresolved" in line]

    [record] = wait_for(alerts, 10, "the alert in the worker's log")
    assert (record["level"], record["alert"], record["cluster"], record["topic"], record["app_id"]) == (
        "error", "tx_unresolved", tx.cp.name, "orders", APP)
    assert (record["business_id"], record["checks_done"]) == ("dying-0", 3)

    # the control plane's /metrics, scraped over HTTP
    from prometheus_client.parser import text_string_to_metric_families

    from tests.support.stack import monitoring_token

    scrape = urllib.request.Request(f"{live_server.url}/metrics",
                                    headers={"Authorization": f"Bearer {monitoring_token()}"})
    with urllib.request.urlopen(scrape, timeout=10) as response:
        assert response.status == 200
        text = response.read().decode()
    samples = {(s.name, s.labels.get("cluster"), s.labels.get("topic")): s.value
               for family in text_string_to_metric_families(text) for s in family.samples}
    assert samples[("switchyard_tx_unresolved_total", tx.cp.name, "orders")] == 1
    assert ("switchyard_tx_prepared_backlog", tx.cp.name, "orders") not in samples


def test_listener_answering_unknown_then_commit_is_checked_again_and_delivered(tx):
    [message_id] = prepare_and_die(tx.cluster, "orders", 1, APP, SECRET)
    asked = []

    def listener(check):
        asked.append(check.message_id)
        return "unknown" if len(asked) == 1 else "commit"

    with Producer(**tx.cluster.client_kwargs(check_listener=listener)) as producer:
        producer.send("orders", b"hello", message_type="paid")  # connected with its listener
        drive_sweeps(lambda: PreparedMessage.objects.filter(message_id=message_id, state="committed").exists(), 60,
                     what="committed on the second check")
    wait_for(lambda: delivered(tx, message_id), 20, "the committed message delivered")
    row = PreparedMessage.objects.get(message_id=message_id)
    assert (row.resolution, row.resolution_source, row.checks_done) == ("commit", "check", 2)
    checks = list(row.checks.all())
    assert [(c.via, c.answer, c.error) for c in checks] == [("connection", "unknown", ""), ("connection", "commit", "")]
    assert (checks[1].at - checks[0].at).total_seconds() >= 0.9  # the wait after an unknown (interval 1 s)
    assert asked == [message_id, message_id]
    assert tx.got.ids("billing").count(message_id) == 1


def _closed_port() -> int:
    """A port nothing listens on: bound, then released."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_check_url_down_is_recorded_retried_and_rolled_back_as_unresolved(tx, api_for):
    url = f"http://127.0.0.1:{_closed_port()}/tx-check"
    assert api_for(tx.people.dev).post(f"/api/v1/apps/{APP}/check-url/", {"check_url": url},
                                       format="json").status_code == 200
    [message_id] = prepare_and_die(tx.cluster, "orders", 1, APP, SECRET)
    drive_sweeps(lambda: PreparedMessage.objects.filter(message_id=message_id, state="unresolved").exists(), 60,
                 what="unresolved after three checks of a dead URL")
    row = PreparedMessage.objects.get(message_id=message_id)
    assert (row.resolution, row.resolution_source, row.checks_done) == ("rollback", "exhausted", 3)
    checks = list(row.checks.all())
    assert [(c.via, c.answer, c.connection) for c in checks] == [("http", "unknown", url)] * 3
    for check in checks:
        assert check.error.startswith(f"{url} did not answer") and "refused" in check.error, check.error
    assert row.last_error == checks[-1].error
    time.sleep(1)
    assert not delivered(tx, message_id)
