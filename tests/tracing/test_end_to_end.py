"""End to end with real services: messages through a real broker (tracing on), the index job on real Spark
into PostgreSQL, then each message's REST record and page show exactly its steps, in order."""

import pytest
from django.db import connection

from apps.tracing.models import TracedMessage
from apps.tracing.runner import jdbc_url
from broker_core.client import Consumer, Producer
from spark_jobs import trace_index
from tests.broker.conftest import APP, cluster, wait_for, zk, zk_hosts  # noqa: F401  (the broker fixtures)
from tests.broker.helpers import Received

pytestmark = pytest.mark.django_db(transaction=True)


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
    broker = cluster.broker("--trace")

    def refuse(m):  # nack: the retried one on its first two attempts, the poisoned one always
        return m.business_id == "e2e-poison" or (m.business_id == "e2e-retry" and m.attempt <= 2)

    got = Received()
    consumers = [Consumer("orders", "billing", got.handler("orders", fail=refuse), **cluster.client_kwargs()),
                 Consumer("fanout", "billing", got.handler("fanout-billing"), **cluster.client_kwargs()),
                 Consumer("fanout", "audit", got.handler("fanout-audit"), **cluster.client_kwargs())]
    for c in consumers:
        c.start()
    try:
        with Producer(**cluster.client_kwargs()) as producer:
            acked = producer.send("orders", b"fine", business_id="e2e-ack", key="cust-1")
            retried = producer.send("orders", b"flaky", business_id="e2e-retry", key="cust-2")
            poisoned = producer.send("orders", b"poison", business_id="e2e-poison", key="cust-3")
            fanned = producer.send("fanout", b"to both", business_id="e2e-fanout")
            rolled_back = []

            def declined(message_id):
                rolled_back.append(message_id)
                raise ValueError("the local transaction failed")

            with pytest.raises(ValueError):
                producer.send_transactional("payments", b"card declined", declined, business_id="e2e-rollback")
        wait_for(lambda: broker.group_stats("orders", "billing").get("acked") == 2
                 and broker.group_stats("orders", "billing").get("dead_lettered") == 1
                 and broker.group_stats("fanout", "billing").get("acked") == 1
                 and broker.group_stats("fanout", "audit").get("acked") == 1, 20, "every message to end")
    finally:
        for c in consumers:
            c.stop()
    broker.stop()  # SIGTERM: the trace writer writes what it holds and closes its file

    result = trace_index.run(spark, [str(broker.data_dir)], str(tmp_path / "index"), jdbc_url=jdbc_url(),
                             progress=lambda *a, **k: None)
    assert result["messages"] == 5
    again = trace_index.run(spark, [str(broker.data_dir)], str(tmp_path / "index"), jdbc_url=jdbc_url(),
                            progress=lambda *a, **k: None)
    assert again["new_files"] == 0

    api = api_for(make_user("aud-e2e", "auditor"))
    expected = {
        acked: ("acked", [("published", None, None), ("stored", None, None),
                          ("delivered", "billing", 1), ("acked", "billing", 1)]),
        retried: ("acked", [("published", None, None), ("stored", None, None),
                            ("delivered", "billing", 1), ("nacked", "billing", 1),
                            ("delivered", "billing", 2), ("nacked", "billing", 2),
                            ("delivered", "billing", 3), ("acked", "billing", 3)]),
        poisoned: ("dead_lettered", [("published", None, None), ("stored", None, None),
                                     ("delivered", "billing", 1), ("nacked", "billing", 1),
                                     ("delivered", "billing", 2), ("nacked", "billing", 2),
                                     ("delivered", "billing", 3), ("nacked", "billing", 3),
                                     ("dead_lettered", "billing", 3)]),
    }
    for message_id, (state, steps) in expected.items():
        record = api.get(f"/api/v1/traces/messages/{message_id}/").json()
        assert record["final_state"] == state, record
        assert [(e["event"], e["group"], e["attempt"]) for e in record["timeline"]] == steps, message_id
        assert record["topic"] == "orders" and record["app_id"] == APP and record["broker"] == broker.node_id

    # the rolled-back transaction: prepared, then rolled back by its producer, never delivered
    [declined_id] = rolled_back
    record = api.get(f"/api/v1/traces/messages/{declined_id}/").json()
    assert (record["topic"], record["final_state"], record["business_id"]) == ("payments", "rolled_back",
                                                                               "e2e-rollback")
    assert [(e["event"], e["group"]) for e in record["timeline"]] == [("prepared", None), ("rolled_back", None)]
    assert record["groups"] == []

    fan = api.get(f"/api/v1/traces/messages/{fanned}/").json()
    assert (fan["final_state"], fan["final_states"]) == ("acked", ["acked"])
    assert sorted((g["group"], g["state"], g["attempts"]) for g in fan["groups"]) == [
        ("audit", "acked", 1), ("billing", "acked", 1)]
    assert [e["event"] for e in fan["timeline"][:2]] == ["published", "stored"]
    by_group = {g: [(e["event"], e["attempt"]) for e in fan["timeline"] if e["group"] == g]
                for g in ("audit", "billing")}
    assert by_group == {"audit": [("delivered", 1), ("acked", 1)], "billing": [("delivered", 1), ("acked", 1)]}

    # the business id finds it, and its page shows the same steps
    assert [m["message_id"] for m in api.get("/api/v1/traces/messages/", {"business_id": "e2e-retry"}).json()
            ["results"]] == [retried]
    client.force_login(make_user("aud-web", "auditor"))
    page = client.get(f"/tracing/messages/{retried}/")
    assert [e.event for e in page.context["events"]] == [s[0] for s in expected[retried][1]]
    assert b'data-lane="billing"' in page.content and b'data-outcome="acked"' in page.content
    assert TracedMessage.objects.count() == 5
    connection.close()
