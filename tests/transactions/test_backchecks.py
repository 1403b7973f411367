"""Transaction messages through a real broker, the real SDK, and back-checks driven by the real Celery
worker: commit, rollback, a killed producer answered by its restarted check listener, an app answered
through its HTTP check URL, and nobody answering (rolled back after the last check, unresolved)."""

import time

import pytest
from django.db import connection

from apps.audit.models import AuditRecord
from apps.transactions.models import PreparedMessage
from broker_core.client import Consumer, Producer
from tests.broker.conftest import APP, SECRET, cluster, zk, zk_hosts  # noqa: F401  (the broker fixtures)
from tests.broker.helpers import Received
from tests.conftest import admin_token
from tests.governance.conftest import wait_for
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
    broker = cluster.broker("--admin-token", admin_token())
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
    record = AuditRecord.objects.filter(action="tx.resolve").last()
    assert record.source == "task" and record.after["by_source"]["check"] == {commit_id: "commit",
                                                                             rollback_id: "rollback"}


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


def test_nobody_answers_rolled_back_after_the_max_and_unresolved(tx, api_for):
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
