"""The broker figure the lag-age alarm reads: `switchyard_group_oldest_age_seconds`, the age of the oldest message a
group still owes (waiting or in flight), 0 once everything is acked."""

from __future__ import annotations

import re
import time

from broker_core.client import Producer
from tests.broker.conftest import APP, SECRET, wait_for
from tests.broker.helpers import RawConsumer


def oldest_age(broker, group: str) -> float:
    text = broker.http("/metrics").decode()
    found = re.search(rf'^switchyard_group_oldest_age_seconds{{[^}}]*group="{group}"[^}}]*}} (\S+)$', text, re.M)
    assert found, text
    return float(found.group(1))


def test_oldest_age_grows_while_a_message_waits_and_is_zero_once_acked(cluster):
    cluster.standard("orders")
    cluster.pv.binding("orders", "billing", APP, mode="clustering")
    broker = cluster.broker()
    with Producer(**cluster.client_kwargs()) as producer:
        producer.send("orders", b"waiting", message_type="order.paid")
    sent_at = time.time()
    wait_for(lambda: broker.group_stats("orders", "billing").get("depth") == 1, 10, "the message owed to billing")
    first = oldest_age(broker, "billing")
    wait_for(lambda: oldest_age(broker, "billing") >= first + 1, 10, "the age to grow while nobody consumes")
    assert oldest_age(broker, "billing") <= time.time() - sent_at + 1

    consumer = RawConsumer(broker.address, APP, SECRET, "orders", "billing")
    try:
        consumer.start()
        wait_for(lambda: consumer.deliveries, 10, "the delivery")
        assert oldest_age(broker, "billing") >= first  # in flight, not acked: still owed
        consumer.ack([consumer.deliveries[0][0]])
        wait_for(lambda: oldest_age(broker, "billing") == 0, 10, "the age back to 0 once acked")
    finally:
        consumer.close()
