"""Changes written into ZooKeeper (as the control plane writes them) apply to a running broker."""

from __future__ import annotations

import time

import pytest

from broker_core import protocol as p
from broker_core.client import AuthError, BrokerError, Consumer, Producer
from broker_core.layout import LAYOUT
from tests.broker.conftest import APP, REPORTS, SECRET, wait_for
from tests.broker.helpers import RawConsumer, Received
from tests.broker.tx_helpers import TOKEN, admin, drain


def test_a_binding_approved_while_the_broker_runs_is_enforced_within_a_second(cluster):
    cluster.standard("orders")
    broker = cluster.broker()
    raw = RawConsumer(broker.address, APP, SECRET, "orders", "billing")
    try:
        with pytest.raises(BrokerError) as err:
            raw.start()
        assert err.value.code == p.E_NO_BINDING
        written = time.monotonic()
        cluster.pv.binding("orders", "billing", APP)

        def subscribed():
            try:
                return raw.request(lambda ref: p.Subscribe(ref, "orders", "billing", 10, 0))
            except BrokerError:
                time.sleep(0.02)
                return None

        answer = wait_for(subscribed, 5, "the subscription to be accepted")
        took = time.monotonic() - written
        assert isinstance(answer, p.Subscribed)
        assert took < 1.0, f"the binding took {took:.2f}s to apply"
        REPORTS.append(f"live binding: enforced {took * 1000:.0f} ms after it was written into ZooKeeper")
    finally:
        raw.close()


def test_a_removed_binding_closes_its_consumers_and_drops_the_groups_backlog_and_dead_letters(cluster):
    cluster.standard("orders")
    cluster.pv.binding("orders", "billing", APP, delivery_limit=1)
    cluster.pv.binding("orders", "audit", APP)
    broker = cluster.broker(admin_token=TOKEN)
    raw = RawConsumer(broker.address, APP, SECRET, "orders", "billing")
    raw.start()
    dead_letters = broker.data_dir / "topics" / "orders" / "p0" / "deadletter" / "billing.dlq"
    try:
        with Producer(**cluster.client_kwargs()) as producer:
            first = producer.send("orders", b"first")
            wait_for(lambda: raw.ids() == [first], 5, "the first delivery")
            raw.nack([[raw.deliveries[0][0], -1, "refused"]])  # delivery limit 1: a dead letter
            held = producer.send_many("orders", [b"second", b"third"])
            wait_for(lambda: raw.ids() == [first, *held] and dead_letters.exists(), 5, "the deliveries held")
            assert drain(broker, "orders")["groups"]["billing"]["dead_letters"] == 1

            cluster.pv.delete(LAYOUT.binding("orders", "billing"))
            wait_for(lambda: raw.unsubscribed == ["binding removed"], 2, "the broker to end the subscription")
            wait_for(lambda: not dead_letters.exists(), 5, "the group's dead letters to be deleted")
            fourth = producer.send("orders", b"fourth")
        after = drain(broker, "orders")
        assert "billing" not in after["groups"], "the group's backlog, in flight and dead letters are gone"
        assert after["groups"]["audit"]["backlog"] == 4, "other groups are unaffected"
        assert raw.ids() == [first, *held]

        cluster.pv.binding("orders", "billing", APP)  # bound again: it starts empty
        wait_for(lambda: drain(broker, "orders")["groups"].get("billing", {}).get("bound"), 2, "the new binding")
        got = Received()
        with Producer(**cluster.client_kwargs()) as producer, \
                Consumer("orders", "billing", got.handler("c"), **cluster.client_kwargs()):
            fifth = producer.send("orders", b"fifth")
            wait_for(lambda: got.ids("c") == [fifth], 5, "the new message")
        assert fourth not in got.ids("c")
        status, listed = admin(broker, "GET", "/admin/dlq?topic=orders&group=billing")
        assert status == 200 and listed["dead_letters"] == []
    finally:
        raw.close()


def test_grants_and_apps_apply_live(cluster):
    cluster.standard("orders")
    cluster.pv.topic("payments")
    cluster.pv.binding("orders", "billing", APP)
    broker = cluster.broker()
    with Producer(**cluster.client_kwargs()) as producer:
        with pytest.raises(BrokerError):
            producer.send("payments", b"x")
        cluster.pv.grant("payments", APP)
        wait_for(lambda: _sends(producer, "payments"), 5, "the new grant")
        cluster.pv.delete(LAYOUT.grant("payments", APP))
        wait_for(lambda: not _sends(producer, "payments"), 5, "the revoked grant")
    got = Received()
    consumer = Consumer("orders", "billing", got.handler("c"), **cluster.client_kwargs()).start()
    try:
        cluster.pv.app(APP, SECRET, active=False)  # deactivated: its connections are closed
        wait_for(lambda: broker.stats()["connections"] == 0, 5, "the app's connections to close")
        assert "was deactivated" in broker.log()
        with Producer(**cluster.client_kwargs(send_timeout=3)) as producer, pytest.raises(AuthError):
            producer.send("orders", b"x")
    finally:
        consumer.stop()


def _sends(producer, topic) -> bool:
    try:
        producer.send(topic, b"probe")
        return True
    except BrokerError:
        return False
