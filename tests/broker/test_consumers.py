"""Dead and slow consumers, and consumers across several brokers."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from broker_core.client import Consumer, Producer
from tests.broker.conftest import APP, ROOT, SECRET, wait_for
from tests.broker.helpers import Received


def start_holding_consumer(cluster, credit: int) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.broker.consumer_proc", cluster.zk, str(cluster.cache_dir), "orders", "billing",
         APP, SECRET, str(credit)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    line = proc.stdout.readline()
    assert line.strip() == "subscribed", line
    return proc


@pytest.mark.parametrize("how", ["killed", "frozen"])
def test_in_flight_messages_of_a_dead_consumer_reach_another_consumer(cluster, how):
    """killed: SIGKILL, the kernel closes its socket. frozen: SIGSTOP, the socket stays open but the
    consumer goes silent, and the broker must notice the missing heartbeats."""
    cluster.standard("orders")
    cluster.pv.binding("orders", "billing", APP)
    broker = cluster.broker()
    doomed = start_holding_consumer(cluster, credit=30)
    try:
        with Producer(**cluster.client_kwargs()) as producer:
            ids = producer.send_many("orders", [f"m{i}".encode() for i in range(30)])
        # the doomed consumer holds all 30 in flight and acks none (its ack timeout is 2 minutes)
        wait_for(lambda: broker.group_stats("orders", "billing").get("in_flight") == 30, 10, "30 in flight")
        got = Received()
        with Consumer("orders", "billing", got.handler("survivor"), **cluster.client_kwargs()):
            time.sleep(0.3)
            assert got.count("survivor") == 0, "nothing is free while the first consumer holds it"
            started = time.monotonic()
            os.kill(doomed.pid, signal.SIGKILL if how == "killed" else signal.SIGSTOP)
            wait_for(lambda: set(got.ids("survivor")) == set(ids), 10, "the held messages at the survivor")
            took = time.monotonic() - started
        stats = broker.group_stats("orders", "billing")
        assert stats["consumers"] == 0 and stats["depth"] == 0 and stats["timed_out"] == 0
        assert stats["acked"] == 30
        if how == "frozen":
            assert took >= 1.0, "a frozen consumer is cut off by missed heartbeats, not at once"
            assert "heartbeat_timeout" in broker.log()
    finally:
        os.kill(doomed.pid, signal.SIGKILL)
        doomed.wait()


def test_a_consumer_drains_every_broker_and_resubscribes_after_a_restart(cluster):
    cluster.standard("orders")
    cluster.pv.binding("orders", "billing", APP)
    b0, b1 = cluster.broker(), cluster.broker()
    got = Received()
    consumer = Consumer("orders", "billing", got.handler("c"), **cluster.client_kwargs()).start()
    try:
        wait_for(lambda: len(consumer.stats["brokers"]) == 2, 10, "subscriptions on both brokers")
        ids = []
        for b in (b0, b1):  # messages stored on each broker (producers pinned to one broker each)
            with Producer(app_id=APP, secret=SECRET, brokers=[b.address]) as producer:
                ids += producer.send_many("orders", [f"{b.node_id} {i}".encode() for i in range(20)])
        wait_for(lambda: set(got.ids("c")) == set(ids), 10, "the messages of both brokers")
        assert b0.group_stats("orders", "billing")["acked"] == 20
        assert b1.group_stats("orders", "billing")["acked"] == 20

        b1.kill(signal.SIGKILL)
        with Producer(app_id=APP, secret=SECRET, brokers=[b0.address]) as producer:
            more = producer.send_many("orders", [b"while b1 is down"] * 5)
        wait_for(lambda: set(more) <= set(got.ids("c")), 10, "delivery from the surviving broker")
        b1.start()
        wait_for(lambda: b1.group_stats("orders", "billing").get("consumers") == 1, 10,
                 "the consumer to subscribe again on the restarted broker")
        with Producer(app_id=APP, secret=SECRET, brokers=[b1.address]) as producer:
            after = producer.send_many("orders", [b"after the restart"] * 5)
        wait_for(lambda: set(after) <= set(got.ids("c")), 10, "delivery from the restarted broker")
    finally:
        consumer.stop()


def test_a_producer_fails_over_to_another_broker(cluster):
    cluster.standard("orders")
    cluster.pv.binding("orders", "billing", APP)
    brokers = [cluster.broker(), cluster.broker()]
    with Producer(**cluster.client_kwargs()) as producer:
        first = producer.send("orders", b"first")
        used = next(b for b in brokers if b.stats()["topics"].get("orders", {}).get("published"))
        other = next(b for b in brokers if b is not used)
        used.kill(signal.SIGKILL)
        second = producer.send("orders", b"second")  # the lost connection makes it pick the other broker
        assert other.stats()["topics"]["orders"]["published"] == 1
        assert producer._async.stats()[cluster.zk]["failovers"] == 1
    got = Received()
    used.start()
    with Consumer("orders", "billing", got.handler("c"), **cluster.client_kwargs()):
        wait_for(lambda: set(got.ids("c")) == {first, second}, 10, "both messages, one on each broker")
