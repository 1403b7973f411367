"""End to end with real services: messages through a real broker (tracing on), the index job on real Spark
into PostgreSQL, then each message's REST record and rendered page show exactly its steps, in order."""

import re
import threading

import pytest
from django.db import connection

from apps.tracing.models import TracedMessage
from apps.tracing.runner import jdbc_password, jdbc_url
from broker_core.client import Consumer, Producer
from spark_jobs import trace_index
from tests.broker.conftest import APP, cluster, wait_for, zk, zk_hosts  # noqa: F401  (the broker fixtures)
from tests.broker.helpers import Received
from tests.broker.tx_helpers import TOKEN, admin
from tests.tracing.pages import RenderedLane, rendered_message

pytestmark = pytest.mark.django_db(transaction=True)


def database() -> dict:
    """Where the job loads the lookup tables: the test database, the password given apart from the URL."""
    return {"jdbc_url": jdbc_url(), "jdbc_password": jdbc_password()}

HOST = re.compile(r"^127\.0\.0\.1:\d+$")
P, S = ("published", None, None), ("stored", None, None)
BODIES = {"e2e-ack": b"fine", "e2e-retry": b"flaky", "e2e-poison": b"poison", "e2e-redrive": b"later",
          "e2e-fanout": b"to both", "e2e-rollback": b"card declined", "e2e-commit": b"card ok"}


def attempts(group, *outcomes, first=1):
    """delivered/outcome pairs of consecutive attempts of one group."""
    return [step for n, outcome in enumerate(outcomes, start=first)
            for step in (("delivered", group, n), (outcome, group, n))]


def test_traced_paths_through_a_real_broker(cluster, spark, make_user, api_for, client, tmp_path):  # noqa: F811
    cluster.standard("orders")
    cluster.pv.binding("orders", "billing", APP, delivery_limit=3, backoff_initial_ms=50, backoff_multiplier=1.0)
    cluster.pv.topic("fanout")
    cluster.pv.grant("fanout", APP)
    cluster.pv.binding("fanout", "billing", APP)
    cluster.pv.binding("fanout", "audit", APP)
    cluster.pv.topic("payments", transactional=True)
    cluster.pv.grant("payments", APP)
    cluster.pv.binding("payments", "billing", APP)
    broker = cluster.broker("--trace", admin_token=TOKEN)

    may_pass = threading.Event()  # set once e2e-redrive sits in the dead-letter queue

    def refuse(m):  # nack: the retried one on its first two attempts, the poisoned one always
        return (m.business_id == "e2e-poison" or (m.business_id == "e2e-retry" and m.attempt <= 2)
                or (m.business_id == "e2e-redrive" and not may_pass.is_set()))

    got = Received()
    consumers = [Consumer("orders", "billing", got.handler("orders", fail=refuse), client_id="orders-billing",
                          **cluster.client_kwargs()),
                 Consumer("fanout", "billing", got.handler("fanout-billing"), client_id="fanout-billing",
                          **cluster.client_kwargs()),
                 Consumer("fanout", "audit", got.handler("fanout-audit"), client_id="fanout-audit",
                          **cluster.client_kwargs()),
                 Consumer("payments", "billing", got.handler("payments"), client_id="payments-billing",
                          **cluster.client_kwargs())]
    orders = lambda: broker.group_stats("orders", "billing")  # noqa: E731
    for c in consumers:
        c.start()
    try:
        with Producer(**cluster.client_kwargs()) as producer:
            def send(topic, business_id, key):
                return producer.send(topic, BODIES[business_id], business_id=business_id, key=key,
                                     message_type="order.created")

            acked = send("orders", "e2e-ack", "cust-1")
            retried = send("orders", "e2e-retry", "cust-2")
            poisoned = send("orders", "e2e-poison", "cust-3")
            redriven = send("orders", "e2e-redrive", "cust-4")
            fanned = send("fanout", "e2e-fanout", "cust-5")
            rolled_back = []

            def declined(message_id):
                rolled_back.append(message_id)
                raise ValueError("the local transaction failed")

            with pytest.raises(ValueError):
                producer.send_transactional("payments", BODIES["e2e-rollback"], declined, business_id="e2e-rollback",
                                            key="cust-6", message_type="payment.taken")
            committed = producer.send_transactional("payments", BODIES["e2e-commit"], lambda message_id: None,
                                                    business_id="e2e-commit", key="cust-7",
                                                    message_type="payment.taken")
            assert committed.state == "committed"
        wait_for(lambda: orders().get("acked") == 2 and orders().get("dead_lettered") == 2
                 and broker.group_stats("fanout", "billing").get("acked") == 1
                 and broker.group_stats("fanout", "audit").get("acked") == 1
                 and broker.group_stats("payments", "billing").get("acked") == 1, 20, "every message to end")
        may_pass.set()
        status, answer = admin(broker, "POST", "/admin/dlq/redrive",
                               {"topic": "orders", "group": "billing", "message_ids": [redriven]})
        assert (status, answer) == (200, {"redriven": [redriven], "skipped": []})
        wait_for(lambda: orders().get("acked") == 3, 20, "the re-driven message to be acked")
    finally:
        for c in consumers:
            c.stop()
    broker.stop()  # SIGTERM: the trace writer writes what it holds and closes its file

    result = trace_index.run(spark, [str(broker.data_dir)], str(tmp_path / "index"), **database(),
                             progress=lambda *a, **k: None)
    assert result["messages"] == 7
    again = trace_index.run(spark, [str(broker.data_dir)], str(tmp_path / "index"), **database(),
                            progress=lambda *a, **k: None)
    assert again["new_files"] == 0

    billing = "billing"
    # per message: topic, business id, key, transaction state, final state, its steps, and its picture
    # (lanes top to bottom: name, where it ended, each attempt's bar (attempt, outcome), the marks)
    expected = {
        acked: ("orders", "e2e-ack", "cust-1", None, "acked", [P, S, *attempts(billing, "acked")],
                [RenderedLane("producer", "stored", [], ["published", "stored"]),
                 RenderedLane("billing", "acked", [("1", "acked")], ["acked"])]),
        retried: ("orders", "e2e-retry", "cust-2", None, "acked",
                  [P, S, *attempts(billing, "nacked", "nacked", "acked")],
                  [RenderedLane("producer", "stored", [], ["published", "stored"]),
                   RenderedLane("billing", "acked", [("1", "nacked"), ("2", "nacked"), ("3", "acked")], ["acked"])]),
        poisoned: ("orders", "e2e-poison", "cust-3", None, "dead_lettered",
                   [P, S, *attempts(billing, "nacked", "nacked", "nacked"), ("dead_lettered", billing, 3)],
                   [RenderedLane("producer", "stored", [], ["published", "stored"]),
                    RenderedLane("billing", "dead_lettered", [("1", "nacked"), ("2", "nacked"), ("3", "nacked")],
                                 ["dead_lettered"])]),
        redriven: ("orders", "e2e-redrive", "cust-4", None, "acked",
                   [P, S, *attempts(billing, "nacked", "nacked", "nacked"), ("dead_lettered", billing, 3),
                    ("redriven", billing, None), *attempts(billing, "acked")],
                   [RenderedLane("producer", "stored", [], ["published", "stored"]),
                    RenderedLane("billing", "acked",
                                 [("1", "nacked"), ("2", "nacked"), ("3", "nacked"), ("1", "acked")],
                                 ["dead_lettered", "redriven", "acked"])]),
        fanned: ("fanout", "e2e-fanout", "cust-5", None, "acked", None,  # two groups: checked per group below
                 [RenderedLane("producer", "stored", [], ["published", "stored"]),
                  RenderedLane("audit", "acked", [("1", "acked")], ["acked"]),
                  RenderedLane("billing", "acked", [("1", "acked")], ["acked"])]),
        rolled_back[0]: ("payments", "e2e-rollback", "cust-6", "rolled_back", "rolled_back",
                         [("prepared", None, None), ("rolled_back", None, None)],
                         [RenderedLane("producer", "rolled_back", [], ["prepared", "rolled_back"])]),
        committed.message_id: ("payments", "e2e-commit", "cust-7", "committed", "acked",
                               [("prepared", None, None), ("committed", None, None), *attempts(billing, "acked")],
                               [RenderedLane("producer", "committed", [], ["prepared", "committed"]),
                                RenderedLane("billing", "acked", [("1", "acked")], ["acked"])]),
    }
    api = api_for(make_user("aud-e2e", "auditor"))
    client.force_login(make_user("aud-web", "auditor"))
    for message_id, (topic, business_id, key, tx_state, state, steps, lanes) in expected.items():
        record = api.get(f"/api/v1/traces/messages/{message_id}/").json()
        timeline = record["timeline"]
        got_steps = [(e["event"], e["group"], e["attempt"]) for e in timeline]
        if steps is None:  # two groups: their steps interleave as they happened; each group's are in order
            assert got_steps[:2] == [P, S]
            for group in ("audit", "billing"):
                assert [s for s in got_steps if s[1] == group] == attempts(group, "acked"), group
            steps = got_steps
        assert got_steps == steps, business_id
        assert (record["topic"], record["business_id"], record["key"], record["transaction_state"],
                record["final_state"]) == (topic, business_id, key, tx_state, state)
        assert (record["message_type"], record["app_id"], record["broker"], record["size"]) == (
            "payment.taken" if topic == "payments" else "order.created", APP, broker.node_id, len(BODIES[business_id]))

        # what the broker recorded of each step: who produced it from where, who consumed which attempt
        first = timeline[0]
        assert (first["event"], first["app_id"]) in (("published", APP), ("prepared", APP)), business_id
        assert HOST.match(first["client_host"]) and record["producer_host"] == first["client_host"]
        for e in timeline:
            if e["event"] in ("delivered", "acked", "nacked"):
                assert re.match(rf"^{topic}-{e['group']}#\d+$", e["consumer"]) and HOST.match(e["client_host"]), e
                assert e["attempt"] >= 1
            if e["event"] in ("committed", "rolled_back"):
                assert (e["app_id"], e["detail"]) == (APP, "reason=producer from_check=false")
            if e["event"] == "redriven":
                assert e["detail"] == "dead letter (delivery limit of 3 reached)"

        page = client.get(f"/tracing/messages/{message_id}/")
        assert page.status_code == 200
        shown = rendered_message(page.content.decode())
        assert shown.final_state == state
        assert shown.steps == steps, business_id
        assert [(r[5], r[6]) for r in shown.rows] == [
            (" ".join(filter(None, [e["consumer"], e["client_host"]])), broker.node_id) for e in timeline]
        assert shown.produced_by == f"{APP} from {first['client_host']}, {len(BODIES[business_id])} bytes"
        assert shown.lanes == lanes, business_id

    assert [m["message_id"] for m in api.get("/api/v1/traces/messages/", {"business_id": "e2e-retry"}).json()
            ["results"]] == [retried]
    assert TracedMessage.objects.count() == 7
    connection.close()
