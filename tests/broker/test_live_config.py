"""Changes written into ZooKeeper (as the control plane writes them) apply to a running broker."""

from __future__ import annotations

import time

import pytest

from broker_core import protocol as p
from broker_core.client import AuthError, BrokerError, Consumer, Producer
from broker_core.layout import LAYOUT
from tests.broker.conftest import APP, REPORTS, SECRET, wait_for
from tests.broker.helpers import RawConsumer, Received


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


def test_a_removed_binding_stops_delivery_to_its_group(cluster):
    cluster.standard("orders")
    cluster.pv.binding("orders", "billing", APP)
    cluster.pv.binding("orders", "audit", APP)
    broker = cluster.broker()
    raw = RawConsumer(broker.address, APP, SECRET, "orders", "billing")
    raw.start()
    with Producer(**cluster.client_kwargs()) as producer:
        first = producer.send("orders", b"first")
        wait_for(lambda: raw.ids() == [first], 5, "the first delivery")
        cluster.pv.delete(LAYOUT.binding("orders", "billing"))
        wait_for(lambda: raw.unsubscribed == ["binding removed"], 5, "the broker to end the subscription")
        second = producer.send("orders", b"second")
    time.sleep(0.3)
    assert raw.ids() == [first]
    stats = broker.stats()["topics"]["orders"]["groups"]
    assert stats["billing"]["bound"] is False and stats["billing"]["consumers"] == 0
    assert stats["audit"]["depth"] == 2, "other groups are unaffected"
    raw.close()
    # a message stored for the group before its binding went is kept for it
    assert stats["billing"]["depth"] == 1 and second


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
