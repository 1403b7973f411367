"""Delivery through a real broker process over TCP: fan-out, modes, acks, retries, dead letters."""

from __future__ import annotations

import json
import signal
import time

import pytest

from broker_core import protocol as p
from broker_core.client import BrokerError, Consumer, Message, Producer
from broker_core.tracing.schema import read_trace_events
from tests.broker.conftest import APP, SECRET, wait_for
from tests.broker.helpers import RawConsumer, Received


def test_fan_out_one_consumer_per_clustering_group_every_consumer_in_broadcast(cluster):
    cluster.standard("orders")
    cluster.pv.binding("orders", "billing", APP, mode="clustering")
    cluster.pv.binding("orders", "audit", APP, mode="broadcast")
    cluster.pv.binding("orders", "paid-only", APP, selector="order.paid", selector_kind="exact")
    cluster.broker()
    got = Received()
    consumers = [Consumer("orders", "billing", got.handler(f"billing-{i}"), **cluster.client_kwargs(credit=5))
                 for i in range(3)]
    consumers += [Consumer("orders", "audit", got.handler(f"audit-{i}"), **cluster.client_kwargs())
                  for i in range(2)]
    consumers += [Consumer("orders", "paid-only", got.handler("paid"), **cluster.client_kwargs())]
    for c in consumers:
        c.start()
    try:
        with Producer(**cluster.client_kwargs()) as producer:
            ids = producer.send_many("orders", [Message(f"order {i}".encode(),
                                                        message_type="order.paid" if i % 3 == 0 else "order.created")
                                                for i in range(60)])
            # single sends too, spread over time so round-robin across consumers shows
            for _ in range(15):
                ids.append(producer.send("orders", b"late", message_type="order.created"))
        billing = [f"billing-{i}" for i in range(3)]
        wait_for(lambda: got.count(*billing) >= len(ids) and got.count("audit-0") >= len(ids)
                 and got.count("audit-1") >= len(ids), 10, "deliveries")
        time.sleep(0.3)  # anything extra would show now
        clustered = [i for name in billing for i in got.ids(name)]
        assert sorted(clustered) == sorted(ids), "each message reaches exactly one consumer of the clustering group"
        assert sum(1 for name in billing if got.ids(name)) >= 2, "the group's consumers share the load"
        assert sorted(got.ids("audit-0")) == sorted(ids) and sorted(got.ids("audit-1")) == sorted(ids)
        paid = [ids[i] for i in range(0, 60, 3)]
        assert sorted(got.ids("paid")) == sorted(paid), "a selector receives only its message type"
    finally:
        for c in consumers:
            c.stop()
    stats = cluster.brokers[0].group_stats("orders", "billing")
    assert stats["acked"] == len(ids) and stats["depth"] == 0 and stats["in_flight"] == 0
    metrics = cluster.brokers[0].http("/metrics").decode()
    assert f'switchyard_group_acked_total{{cluster="{cluster.name}",group="billing",' in metrics
    assert 'switchyard_group_depth{' in metrics and "switchyard_topic_published_total{" in metrics


def test_a_nack_redelivers_after_the_backoff(cluster):
    cluster.standard("orders")
    cluster.pv.binding("orders", "billing", APP, backoff_initial_ms=600, backoff_multiplier=2.0)
    broker = cluster.broker()
    got = Received()
    consumer = Consumer("orders", "billing", got.handler("c", fail=lambda m: m.attempt == 1),
                        **cluster.client_kwargs()).start()
    try:
        with Producer(**cluster.client_kwargs()) as producer:
            message_id = producer.send("orders", b"retry me")
        wait_for(lambda: got.count("c") >= 2, 10, "the redelivery")
        (first_id, first_attempt, t1), (second_id, second_attempt, t2) = got.by_consumer["c"][:2]
        assert first_id == second_id == message_id
        assert (first_attempt, second_attempt) == (1, 2)
        assert t2 - t1 >= 0.55, "redelivered only after the binding's backoff (600 ms)"
        wait_for(lambda: broker.group_stats("orders", "billing").get("acked") == 1, 5, "the ack")
        stats = broker.group_stats("orders", "billing")
        assert stats["nacked"] == 1 and stats["redelivered"] == 1
    finally:
        consumer.stop()


def test_a_nack_delay_is_capped_at_the_bindings_longest_backoff(cluster):
    cluster.standard("orders")
    cluster.pv.binding("orders", "billing", APP, backoff_initial_ms=100, backoff_max_ms=500)
    broker = cluster.broker()
    raw = RawConsumer(broker.address, APP, SECRET, "orders", "billing", ack_timeout_ms=60_000)
    try:
        raw.start()
        with Producer(**cluster.client_kwargs()) as producer:
            message_id = producer.send("orders", b"later, much later")
        wait_for(lambda: len(raw.deliveries) == 1, 5, "the first delivery")
        raw.nack([[raw.deliveries[0][0], 3_600_000, "come back in an hour"]])
        nacked = time.monotonic()
        wait_for(lambda: len(raw.deliveries) == 2, 5, "the redelivery at the binding's longest backoff")
        (_, first_attempt, _, _), (_, second_attempt, _, again) = raw.deliveries
        assert raw.ids() == [message_id, message_id] and (first_attempt, second_attempt) == (1, 2)
        assert again - nacked >= 0.45, "the consumer's delay still applies, up to the binding's 500 ms"
    finally:
        raw.close()


def test_a_consumer_that_never_acks_sends_the_message_to_the_dead_letter_queue(cluster):
    cluster.standard("orders")
    cluster.pv.binding("orders", "billing", APP, delivery_limit=3, backoff_initial_ms=50)
    broker = cluster.broker()
    raw = RawConsumer(broker.address, APP, SECRET, "orders", "billing", ack_timeout_ms=200)
    raw.start()
    try:
        with Producer(**cluster.client_kwargs()) as producer:
            message_id = producer.send("orders", b"never acked", business_id="order-17")
        wait_for(lambda: broker.group_stats("orders", "billing").get("dead_letter_queue") == 1, 10,
                 "the dead letter")
        assert [(f[p.M_ID], attempt) for _, attempt, f, _ in raw.deliveries] == \
            [(message_id, 1), (message_id, 2), (message_id, 3)]
        stats = broker.group_stats("orders", "billing")
        assert stats["timed_out"] == 3 and stats["dead_lettered"] == 1 and stats["depth"] == 0
        # the dead-letter queue can be listed: over HTTP and through the protocol
        listed = json.loads(broker.http("/deadletters?topic=orders&group=billing"))["entries"]
        assert [(e["message_id"], e["business_id"], e["attempts"]) for e in listed] == [(message_id, "order-17", 3)]
        assert "delivery limit of 3" in listed[0]["cause"] and listed[0]["body"] == "never acked"
        answer = raw.request(lambda ref: p.ListDeadLetters(ref, "orders", "billing", 10))
        assert [e["message_id"] for e in answer.entries] == [message_id]
        time.sleep(0.5)
        assert len(raw.deliveries) == 3, "no delivery after the dead letter"
    finally:
        raw.close()


def test_an_expired_ttl_dead_letters(cluster):
    cluster.standard("orders")
    cluster.pv.binding("orders", "billing", APP)
    cluster.pv.binding("orders", "short", APP, ttl_s=0.3)
    broker = cluster.broker()
    with Producer(**cluster.client_kwargs()) as producer:
        expiring = producer.send("orders", b"expires", ttl_ms=300)  # message TTL: every group
        plain = producer.send("orders", b"lives")  # only the binding with a TTL expires it
    wait_for(lambda: broker.group_stats("orders", "billing").get("expired") == 1
             and broker.group_stats("orders", "short").get("expired") == 2, 10, "the expiries")
    entries = json.loads(broker.http("/deadletters?topic=orders&group=short"))["entries"]
    assert sorted(e["message_id"] for e in entries) == sorted([expiring, plain])
    assert all(e["cause"] == "ttl expired" for e in entries)
    # a consumer arriving now gets only what is still alive
    got = Received()
    with Consumer("orders", "billing", got.handler("c"), **cluster.client_kwargs()):
        wait_for(lambda: got.count("c") >= 1, 5, "the live message")
        time.sleep(0.3)
    assert got.ids("c") == [plain]


def test_a_group_without_a_binding_is_refused(cluster):
    cluster.standard("orders")
    cluster.pv.app("other-app", "other-secret")
    cluster.pv.binding("orders", "theirs", "other-app")
    cluster.broker()
    with pytest.raises(BrokerError) as err:
        Consumer("orders", "nobody", lambda m: None, **cluster.client_kwargs()).start()
    assert err.value.code == p.E_NO_BINDING
    assert "no approved binding" in err.value.message
    with pytest.raises(BrokerError) as err:  # a binding of another app does not let this one in
        Consumer("orders", "theirs", lambda m: None, **cluster.client_kwargs()).start()
    assert err.value.code == p.E_NO_BINDING and "belongs to another app" in err.value.message


def test_delivery_state_survives_a_restart_only_unacked_messages_come_again(cluster):
    cluster.standard("orders")
    cluster.pv.binding("orders", "billing", APP)
    broker = cluster.broker()
    with Producer(**cluster.client_kwargs()) as producer:
        ids = producer.send_many("orders", [f"m{i}".encode() for i in range(100)])
    raw = RawConsumer(broker.address, APP, SECRET, "orders", "billing", credit=100, ack_timeout_ms=60_000)
    raw.start()
    wait_for(lambda: len(raw.deliveries) == 100, 10, "the first deliveries")
    acked = [seq for seq, _, _, _ in raw.deliveries[:60]]
    raw.ack(acked)
    wait_for(lambda: broker.group_stats("orders", "billing").get("acked") == 60, 5, "the acks")
    raw.close()
    time.sleep(1.5)  # acks reach the ack file within about a second; a kill after that keeps them
    broker.kill(signal.SIGKILL)
    broker.start()
    got = Received()
    with Consumer("orders", "billing", got.handler("c"), **cluster.client_kwargs()):
        wait_for(lambda: got.count("c") >= 40, 10, "the redeliveries")
        time.sleep(0.5)
    assert sorted(got.ids("c")) == sorted(ids[60:])


def test_every_step_leaves_a_trace_event(cluster):
    cluster.standard("orders")
    cluster.pv.binding("orders", "billing", APP, delivery_limit=2, backoff_initial_ms=50)
    broker = cluster.broker()
    raw = RawConsumer(broker.address, APP, SECRET, "orders", "billing", ack_timeout_ms=200)
    raw.start()
    with Producer(**cluster.client_kwargs()) as producer:
        retried = producer.send("orders", b"nacked once, then acked", business_id="b-1")
        wait_for(lambda: len(raw.deliveries) == 1, 5, "the first delivery")
        raw.loop.call_soon_threadsafe(lambda: raw.conn.send(p.Nack(raw.sub_id, [[raw.deliveries[0][0], 0, "busy"]])))
        wait_for(lambda: len(raw.deliveries) == 2, 5, "the redelivery")
        raw.ack([raw.deliveries[1][0]])
        dead = producer.send("orders", b"never acked")
        wait_for(lambda: broker.group_stats("orders", "billing").get("dead_lettered") == 1, 10, "the dead letter")
        raw.close()
        expired = producer.send("orders", b"too late", ttl_ms=100)
        wait_for(lambda: broker.group_stats("orders", "billing").get("expired") == 1, 10, "the expiry")
    broker.stop()  # a graceful stop closes the open trace file
    events = read_trace_events(broker.data_dir / "trace")
    by_message: dict[str, list[tuple]] = {}
    for e in events:
        assert e["cluster"] == cluster.name and e["broker"] == broker.node_id and e["topic"] == "orders"
        by_message.setdefault(e["message_id"], []).append((e["event"], e.get("group"), e.get("attempt")))
    assert by_message[retried] == [("published", None, None), ("stored", None, None),
                                   ("delivered", "billing", 1), ("nacked", "billing", 1),
                                   ("delivered", "billing", 2), ("acked", "billing", 2)]
    assert by_message[dead] == [("published", None, None), ("stored", None, None),
                                ("delivered", "billing", 1), ("timed_out", "billing", 1),
                                ("delivered", "billing", 2), ("timed_out", "billing", 2),
                                ("dead_lettered", "billing", 2)]
    assert by_message[expired][-1][:2] == ("expired", "billing")
    assert next(e for e in events if e["message_id"] == retried and e["event"] == "published")["business_id"] == "b-1"
