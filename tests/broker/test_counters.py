"""Issue 19, item 2: a broker's totals survive its restarts (node/counters.py keeps them in its data folder), and a
transaction topic counts its committed messages as published (it showed "Published 0" beside its deliveries)."""

from __future__ import annotations

import json
import re
import signal

from broker_core.client import BrokerError, Consumer, Producer
from tests.broker.conftest import APP, wait_for
from tests.broker.helpers import Received
from tests.broker.tx_helpers import TOKEN


def metric(broker, name: str, **labels: str) -> float:
    text = broker.http("/metrics").decode()
    for line in text.splitlines():
        found = re.match(rf"^{name}{{([^}}]*)}} (\S+)$", line)
        if found and all(f'{k}="{v}"' in found.group(1) for k, v in labels.items()):
            return float(found.group(2))
    raise AssertionError(f"no {name}{labels} in:\n{text}")


def saved(broker) -> dict:
    path = broker.data_dir / "counters.json"
    return json.loads(path.read_text()) if path.exists() else {"topics": {}}


def test_totals_do_not_drop_when_the_broker_restarts_or_is_killed_after_a_save(cluster):
    cluster.standard("orders")
    cluster.pv.binding("orders", "billing", APP)
    broker = cluster.broker()
    got = Received()
    with Producer(**cluster.client_kwargs()) as producer, \
            Consumer("orders", "billing", got.handler("c"), **cluster.client_kwargs()):
        for i in range(30):
            producer.send("orders", f"order {i}".encode(), message_type="order.paid")
        wait_for(lambda: broker.group_stats("orders", "billing").get("acked") == 30, 20, "30 messages acked")
    before = broker.stats()["topics"]["orders"]
    assert (before["published"], before["groups"]["billing"]["delivered"]) == (30, 30)

    broker.stop()  # SIGTERM: a clean restart
    broker.start()
    after = broker.stats()["topics"]["orders"]
    assert after["published"] == 30 and after["published_bytes"] == before["published_bytes"]
    assert metric(broker, "switchyard_topic_published_total", topic="orders") == 30  # Prometheus sees no reset
    # a group owed nothing is back in the figures once a consumer subscribes, with its totals where they were
    with Consumer("orders", "billing", got.handler("c2"), **cluster.client_kwargs()):
        group = wait_for(lambda: broker.group_stats("orders", "billing").get("consumers") == 1
                         and broker.group_stats("orders", "billing"), 10, "the group's consumer")
        assert {k: group[k] for k in ("delivered", "acked")} == {"delivered": 30, "acked": 30}

    with Producer(**cluster.client_kwargs()) as producer:
        for i in range(5):
            producer.send("orders", f"later {i}".encode(), message_type="order.paid")
    wait_for(lambda: saved(broker)["topics"].get("orders", {}).get("figures", {}).get("published") == 35, 10,
             "the counters saved in the data folder")
    broker.kill(signal.SIGKILL)  # a crash after the save loses nothing of it
    broker.start()
    assert broker.stats()["topics"]["orders"]["published"] == 35


def test_committed_transaction_messages_count_as_published(cluster):
    cluster.standard("orders")
    cluster.pv.topic("orders", transactional=True, tx_check={"delay_s": 1})
    cluster.pv.binding("orders", "billing", APP)
    broker = cluster.broker(admin_token=TOKEN)
    got = Received()
    with Producer(**cluster.client_kwargs()) as producer, \
            Consumer("orders", "billing", got.handler("c"), **cluster.client_kwargs()):
        results = [producer.send_transactional("orders", f"order {i}".encode(), lambda _id: None,
                                               message_type="order.created") for i in range(4)]
        assert {r.state for r in results} == {"committed"}
        producer.send("orders", b"plain", message_type="order.paid")
        wait_for(lambda: broker.group_stats("orders", "billing").get("delivered") == 5, 20, "5 deliveries")
    topic = broker.stats()["topics"]["orders"]
    assert topic["tx"]["committed"] == 4
    assert topic["published"] == 5  # 4 committed + 1 plain, as many as were delivered
    assert metric(broker, "switchyard_topic_published_total", topic="orders") == 5


def test_a_deleted_topic_takes_its_counters_with_it(cluster):
    from tests.broker.test_topic_lifecycle import delete_topic, nothing_left

    cluster.standard("orders")
    broker = cluster.broker()
    with Producer(**cluster.client_kwargs()) as producer:
        producer.send_many("orders", [b"1", b"2", b"3"])
    wait_for(lambda: saved(broker)["topics"].get("orders", {}).get("figures", {}).get("published") == 3, 10,
             "the counters saved")
    broker.stop()
    broker.start()  # carried over: 3
    assert broker.stats()["topics"]["orders"]["published"] == 3
    delete_topic(cluster, "orders")
    wait_for(lambda: nothing_left(broker, "orders") and "orders" not in saved(broker)["topics"], 10,
             "the topic and its saved counters to go")
    broker.stop()
    broker.start()
    cluster.standard("orders")  # a new topic of the same name counts from zero

    def sent(producer) -> bool:  # refused (unknown topic) until the broker has applied the new topic
        try:
            producer.send("orders", b"fresh")
        except BrokerError:
            return False
        return True

    with Producer(**cluster.client_kwargs()) as producer:
        wait_for(lambda: sent(producer), 10, "the new topic to take a message")
    assert broker.stats()["topics"]["orders"]["published"] == 1
