"""A cluster on a three-node ZooKeeper ensemble (issue 20, item 4): with one ZooKeeper server of three stopped,
brokers stay registered, publishing and consuming go on, and the control plane's writes still reach the brokers."""

from __future__ import annotations

import pytest

from broker_core.client import Consumer, Producer
from devstack.zookeeper import (
    Ensemble,
    start_zookeeper_ensemble,
    start_zookeeper_node,
    stop_zookeeper,
    stop_zookeeper_ensemble,
    zk_mode,
)
from tests.broker.conftest import APP, PORT_BASE, STATE, Cluster, wait_for
from tests.broker.helpers import Received
from tests.support.stack import control_zk_client

ENSEMBLE = Ensemble("zk-ensemble-tests", client_ports=(PORT_BASE + 460, PORT_BASE + 461, PORT_BASE + 462),
                    quorum_ports=tuple(range(PORT_BASE + 463, PORT_BASE + 469)))


@pytest.fixture
def ensemble_cluster(tmp_path):
    state = STATE / "zk-ensemble"
    start_zookeeper_ensemble(state, ENSEMBLE)
    client = control_zk_client(ENSEMBLE.hosts, timeout=10)
    client.start(timeout=15)
    cluster = Cluster(ENSEMBLE.hosts, client, "ensemble", tmp_path)
    try:
        yield state, cluster
    finally:
        cluster.teardown()
        client.stop()
        client.close()
        stop_zookeeper_ensemble(state, ENSEMBLE)


def _leader() -> int:
    """The number (1-based) of the server that leads the ensemble now."""
    modes = {n: zk_mode(port) for n, port in enumerate(ENSEMBLE.client_ports, start=1)}
    leaders = [n for n, mode in modes.items() if mode == "leader"]
    assert len(leaders) == 1, f"expected one leader, the servers say {modes}"
    return leaders[0]


def test_with_one_zookeeper_server_of_three_stopped_publishing_and_consuming_go_on(ensemble_cluster):
    state, cluster = ensemble_cluster
    cluster.standard("orders")
    cluster.pv.binding("orders", "billing", APP)
    brokers = [cluster.broker(), cluster.broker()]
    got = Received()
    sent: list[str] = []
    with Consumer("orders", "billing", got.handler("c"), **cluster.client_kwargs()), \
            Producer(**cluster.client_kwargs()) as producer:
        sent += [producer.send("orders", f"before {i}".encode()) for i in range(200)]
        wait_for(lambda: set(got.ids("c")) >= set(sent), 15, "the first messages")

        # stop the leader: the two others elect a new one, and every client session moves to a live server
        down = _leader()
        stop_zookeeper(state, ENSEMBLE.server(down))
        live = [port for n, port in enumerate(ENSEMBLE.client_ports, start=1) if n != down]
        wait_for(lambda: sorted(zk_mode(p) or "" for p in live) == ["follower", "leader"], 30,
                 "the two remaining servers to elect a leader")

        sent += [producer.send("orders", f"during {i}".encode()) for i in range(200)]
        wait_for(lambda: set(got.ids("c")) >= set(sent), 20, "the messages sent with one server down")
        # the brokers' ephemeral nodes survive (their sessions moved), and a write of the control plane
        # (a quorum of two of three) still reaches them: a new binding is enforced
        wait_for(lambda: all(b.registered() for b in brokers), 20, "both brokers to stay registered")
        cluster.pv.binding("orders", "audit", APP)
        wait_for(lambda: all(b"binding orders/audit" in b.log_path.read_bytes() for b in brokers), 30,
                 "the new binding to reach both brokers")
        late = Received()
        with Consumer("orders", "audit", late.handler("a"), **cluster.client_kwargs()):
            fresh = [producer.send("orders", f"after the binding {i}".encode()) for i in range(50)]
            sent += fresh
            wait_for(lambda: set(late.ids("a")) >= set(fresh), 20, "the new group's messages")
        wait_for(lambda: set(got.ids("c")) >= set(sent), 20, "every message in the first group")

        # the stopped server comes back and joins as a follower
        start_zookeeper_node(state, ENSEMBLE, down)
        wait_for(lambda: zk_mode(ENSEMBLE.client_ports[down - 1]) == "follower", 30, "the server to rejoin")

    assert not set(sent) - set(got.ids("c")), "a message acknowledged to its producer was not delivered"
