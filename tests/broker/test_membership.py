"""Brokers in ZooKeeper: registration, a lost session, and clients and brokers while ZooKeeper is down."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest

from broker_core.client import Consumer, Producer
from broker_core.layout import LAYOUT
from devstack.zookeeper import start_zookeeper, stop_zookeeper
from tests.broker.conftest import APP, SECOND_ZK_PORT, SECRET, STATE, Cluster, wait_for
from tests.broker.helpers import RawConsumer, Received
from tests.support.stack import control_zk_client


def test_a_broker_registers_an_ephemeral_node_and_again_after_losing_its_session(cluster):
    cluster.standard("orders")
    broker = cluster.broker()
    path = cluster.chroot + LAYOUT.broker(broker.node_id)
    data, stat = cluster.zk_client.get(path)
    info = json.loads(data)
    assert info["host"] == "127.0.0.1" and info["port"] == broker.port and info["metrics_port"] == broker.metrics_port
    assert info["node_id"] == broker.node_id and info["version"] and info["started_at"]
    assert stat.ephemeralOwner != 0
    first_owner = stat.ephemeralOwner

    # freeze the broker longer than its 2 s session timeout: ZooKeeper expires the session and
    # deletes the node; on waking, the broker must notice and register again by itself
    os.kill(broker.proc.pid, signal.SIGSTOP)
    try:
        wait_for(lambda: cluster.zk_client.exists(path) is None, 15, "ZooKeeper to expire the session")
    finally:
        os.kill(broker.proc.pid, signal.SIGCONT)
    wait_for(lambda: broker.owner() not in (None, first_owner), 15, "the broker to register again")
    # the broker counts a registration once ZooKeeper has answered its create, a moment after the node shows
    wait_for(lambda: broker.stats()["zookeeper"]["registrations"] >= 2, 5, "the broker to count its registration")
    zk_stats = broker.stats()["zookeeper"]
    assert zk_stats["sessions_lost"] == 1 and zk_stats["registrations"] == 2
    # and its watches still work: a binding written now is applied
    cluster.pv.binding("orders", "late", APP)
    wait_for(lambda: "late" in broker.stats()["topics"].get("orders", {}).get("groups", {}) or _binding_known(broker),
             5, "the new binding to reach the broker")
    got = Received()
    with Consumer("orders", "late", got.handler("c"), **cluster.client_kwargs()), \
            Producer(**cluster.client_kwargs()) as producer:
        sent = producer.send("orders", b"after the new session")
        wait_for(lambda: got.ids("c") == [sent], 5, "delivery")


@pytest.fixture
def own_zookeeper():
    """A ZooKeeper of this test alone, so it can be stopped without disturbing other tests."""
    state = STATE / "zk-own"
    start_zookeeper(state, SECOND_ZK_PORT, "zk-broker-tests-own")
    client = control_zk_client(f"127.0.0.1:{SECOND_ZK_PORT}", timeout=10)
    client.start(timeout=15)
    yield state, client
    client.stop()
    client.close()
    stop_zookeeper(state, "zk-broker-tests-own")


def test_clients_and_brokers_keep_working_while_zookeeper_is_down(own_zookeeper, tmp_path):
    state, client = own_zookeeper
    cluster = Cluster(f"127.0.0.1:{SECOND_ZK_PORT}", client, f"zkdown-{os.getpid()}", tmp_path)
    try:
        cluster.standard("orders")
        cluster.pv.binding("orders", "billing", APP)
        cluster.pv.binding("orders", "audit", APP)
        broker = cluster.broker("--zk-start-timeout-s", "2")
        with Producer(**cluster.client_kwargs()) as producer:  # fills the SDK's broker cache
            first = producer.send("orders", b"with zookeeper")
        time.sleep(1.2)  # the broker writes its snapshot of the layout a second after a change

        # the broker goes down; meanwhile the control plane removes a binding; then ZooKeeper goes down
        broker.kill(signal.SIGKILL)
        cluster.pv.delete(LAYOUT.binding("orders", "audit"))
        stop_zookeeper(state, "zk-broker-tests-own")
        # a broker restarted now serves from its snapshot of the layout
        broker.start(wait=False)
        wait_for(lambda: b'"ok": true' in _try(broker.http, "/healthz"), 20, "the broker to serve without ZooKeeper")
        # a new producer finds the broker in its cache
        with Producer(**cluster.client_kwargs(connect_timeout=1.0)) as producer:
            second = producer.send("orders", b"zookeeper is down")
        got = Received()
        audit = RawConsumer(broker.address, APP, SECRET, "orders", "audit")
        try:
            audit.start()  # the snapshot still has the removed binding
            with Consumer("orders", "billing", got.handler("c"), **cluster.client_kwargs(connect_timeout=1.0)):
                wait_for(lambda: set(got.ids("c")) == {first, second}, 10, "both messages")
            assert "serving from the last snapshot" in broker.log()

            start_zookeeper(state, SECOND_ZK_PORT, "zk-broker-tests-own")
            wait_for(broker.registered, 20, "the broker to register once ZooKeeper is back")
            # what ZooKeeper no longer holds is dropped once the broker has read it again
            wait_for(lambda: audit.unsubscribed == ["binding removed"], 10, "the stale binding to go")
        finally:
            audit.close()
    finally:
        if not client.connected:
            start_zookeeper(state, SECOND_ZK_PORT, "zk-broker-tests-own")
        cluster.teardown()


def _try(fn, *args) -> bytes:
    try:
        return fn(*args)
    except OSError:
        return b""


def _binding_known(broker) -> bool:
    return b"binding orders/late" in broker.log().encode()
