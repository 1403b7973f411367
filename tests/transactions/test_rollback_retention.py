"""Rolled back → never delivered, kept for audit until the topic's retention: a real broker keeps the log
segment of a rolled-back message (and answers its state) after everything else in the segment was delivered,
across a kill -9, and lets it go once the topic's `retention_s` has passed since the message was stored."""

import json
import time
import urllib.request

import pytest

from broker_core.client import Consumer, Producer
from broker_core.layout import LAYOUT
from devstack.waiting import wait_for
from tests.broker.conftest import APP, cluster, zk, zk_hosts  # noqa: F401  (the broker fixtures)
from tests.broker.helpers import Received
from tests.conftest import admin_token

RETENTION_S = 12


def topic_doc(retention_s: int) -> dict:
    return {"name": "orders", "message_types": [], "ordered": False, "transactional": True,
            "retention_s": retention_s, "max_message_bytes": 0,
            "tx_check": {"delay_s": 600, "interval_s": 600, "max_checks": 1}, "revision": 2}


def state_of(broker, message_id: str) -> str:
    request = urllib.request.Request(f"http://127.0.0.1:{broker.metrics_port}/admin/tx/state?ids={message_id}",
                                     headers={"Authorization": f"Bearer {admin_token()}"})
    with urllib.request.urlopen(request, timeout=5) as response:
        return json.loads(response.read())["states"][message_id]


def segments_holding(broker, message_id: str) -> list[str]:
    folder = broker.data_dir / "topics" / "orders" / "p0"  # partition 0 (issue 20)
    return [p.name for p in sorted(folder.glob("*.log")) if message_id.encode() in p.read_bytes()]


def test_rolled_back_message_is_kept_until_the_topics_retention(cluster):  # noqa: F811
    cluster.standard("orders")
    cluster.pv._put(LAYOUT.topic("orders"), topic_doc(RETENTION_S))
    cluster.pv.binding("orders", "billing", APP)
    broker = cluster.broker("--segment-bytes", "2048", admin_token=admin_token())
    got = Received()
    consumer = Consumer("orders", "billing", got.handler("billing"), **cluster.client_kwargs())
    consumer.start()
    try:
        with Producer(**cluster.client_kwargs()) as producer:
            rolled_back = []

            def fail(message_id):
                rolled_back.append(message_id)
                raise RuntimeError("the local transaction failed")

            stored_at = time.monotonic()
            with pytest.raises(RuntimeError):
                producer.send_transactional("orders", b"not paid", fail, message_type="paid")
            [rolled_back_id] = rolled_back
            # plain messages, one record each, fill the rest of its segment and several more; all acked
            plain = [producer.send("orders", b"x" * 400, message_type="paid") for _ in range(30)]
        wait_for(lambda: set(got.ids("billing")) >= set(plain), 20, "the plain messages delivered")
        folder = broker.data_dir / "topics" / "orders" / "p0"  # partition 0 (issue 20)
        # every other finished segment goes; the rolled-back message's segment and the active one stay
        wait_for(lambda: len(list(folder.glob("*.log"))) == 2, 10, "the finished segments deleted")
        [held] = segments_holding(broker, rolled_back_id)
        assert held == sorted(p.name for p in folder.glob("*.log"))[0]
        assert state_of(broker, rolled_back_id) == "rolled_back"

        # a kill -9 within retention: recovery keeps holding it
        broker.restart()
        assert segments_holding(broker, rolled_back_id) == [held]
        assert state_of(broker, rolled_back_id) == "rolled_back"
        time.sleep(1.5)  # a few of the broker's retention checks (once a second)
        assert segments_holding(broker, rolled_back_id) == [held]
        assert time.monotonic() - stored_at < RETENTION_S, "the test ran past retention before checking"

        # past retention (counted from when the broker stored it) it goes, and its state is no longer known
        wait_for(lambda: not (folder / held).exists(), RETENTION_S + 10, "the held segment deleted after retention")
        assert time.monotonic() - stored_at >= RETENTION_S - 1
        assert state_of(broker, rolled_back_id) == "unknown"
        assert rolled_back_id not in got.ids("billing")
    finally:
        consumer.stop()
