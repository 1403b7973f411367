"""A topic whose storage level is "memory", in a real broker process: delivered like any other, held in
memory only — a restart keeps nothing of it (while a file topic of the same broker keeps what it owes)."""

from __future__ import annotations

import time

from broker_core.client import Consumer, Message, Producer
from tests.broker.conftest import APP, SECRET, wait_for
from tests.broker.helpers import Received


def test_a_memory_topic_delivers_and_keeps_nothing_across_a_restart(cluster):
    cluster.pv.meta()
    cluster.pv.app(APP, SECRET)
    for topic, storage in (("scratch", "memory"), ("orders", "file")):
        cluster.pv.topic(topic, storage=storage)
        cluster.pv.grant(topic, APP)
        cluster.pv.binding(topic, "billing", APP)
    broker = cluster.broker()
    got = Received()
    with Producer(**cluster.client_kwargs()) as producer:
        with Consumer("scratch", "billing", got.handler("live"), **cluster.client_kwargs()):
            sent = producer.send_many("scratch", [Message(b"now %d" % i) for i in range(3)])
            wait_for(lambda: sorted(got.ids("live")) == sorted(sent), 5, "delivery on the memory topic")
        wait_for(lambda: broker.stats()["topics"]["scratch"]["groups"]["billing"]["consumers"] == 0, 5,
                 "the broker to see the consumer gone")
        # owed to the group, nobody connected: held until the restart
        producer.send_many("scratch", [Message(b"held %d" % i) for i in range(5)])
        kept = producer.send_many("orders", [Message(b"held %d" % i) for i in range(5)])
    scratch = broker.stats()["topics"]["scratch"]
    assert scratch["store"]["storage"] == "memory" and scratch["groups"]["billing"]["depth"] == 5
    assert scratch["groups"]["billing"]["delivered"] == 3
    assert broker.stats()["topics"]["orders"]["store"]["storage"] == "file"
    assert not (broker.data_dir / "topics" / "scratch").exists(), "nothing of a memory topic goes to disk"

    broker.stop()
    broker.start()
    consumers = [Consumer(topic, "billing", got.handler(f"{topic}-after"), **cluster.client_kwargs()).start()
                 for topic in ("scratch", "orders")]
    try:
        wait_for(lambda: sorted(got.ids("orders-after")) == sorted(kept), 10, "the file topic's held messages")
        time.sleep(0.5)  # the memory topic's would have arrived with them
        assert got.ids("scratch-after") == []
        groups = broker.stats()["topics"]["scratch"]["groups"]["billing"]
        # nothing held and nothing delivered again; the totals carry on across the restart (node/counters.py)
        assert (groups["depth"], groups["in_flight"], groups["delivered"]) == (0, 0, 3)
    finally:
        for consumer in consumers:
            consumer.stop()
