"""A client that cannot start says why, at once (docs/routing.md): each cause has its exception and a message
naming it and what to do. Short connect timeouts: a client that hung until its send timeout (the old 20 s)
would fail the test on its 30 s send timeout instead. Also: a cached route starts a client whose control
plane is down."""

from __future__ import annotations

import asyncio
import socket

import pytest

from broker_core.client import (
    AsyncConsumer,
    Consumer,
    ControlPlaneUnreachable,
    NoBrokers,
    Producer,
    Route,
    ZooKeeperUnreachable,
)
from broker_core.client.routes import RouteCache
from tests.broker.conftest import APP, SECRET, wait_for
from tests.broker.helpers import Received

QUICK = {"connect_timeout": 0.5}


def closed_port() -> int:
    """A local port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_zookeeper_down_and_no_cached_broker_list(tmp_path):
    hosts = f"127.0.0.1:{closed_port()}"
    kwargs = {"app_id": APP, "secret": SECRET, "zk": f"{hosts}/switchyard/prod-a", "cache_dir": tmp_path, **QUICK}
    with Producer(**kwargs) as producer, pytest.raises(ZooKeeperUnreachable) as raised:
        producer.send("orders", b"x")
    assert f"ZooKeeper {hosts}" in str(raised.value) and "does not answer" in str(raised.value)
    assert "no broker list of the cluster is cached" in str(raised.value)
    with pytest.raises(ZooKeeperUnreachable):
        Consumer("orders", "billing", lambda m: None, **kwargs).start()


def test_no_broker_registered_for_the_cluster(cluster):
    cluster.standard("orders")  # ZooKeeper answers; no broker runs
    with Producer(**cluster.client_kwargs(**QUICK)) as producer, pytest.raises(NoBrokers) as raised:
        producer.send("orders", b"x")
    assert type(raised.value) is NoBrokers
    assert "no broker of cluster" in str(raised.value) and cluster.chroot in str(raised.value)
    assert "start the cluster's brokers" in str(raised.value)

    async def start_consumer():
        consumer = AsyncConsumer("orders", "billing", lambda m: None, **cluster.client_kwargs(**QUICK))
        await consumer.start()

    with pytest.raises(NoBrokers):
        asyncio.run(start_consumer())


def test_control_plane_unreachable_and_no_cached_route(tmp_path):
    url = f"http://127.0.0.1:{closed_port()}"
    kwargs = {"app_id": APP, "secret": SECRET, "control_plane": url, "environment": "prod", "api_token": "t",
              "cache_dir": tmp_path, **QUICK}
    with Producer(**kwargs) as producer, pytest.raises(ControlPlaneUnreachable) as raised:
        producer.send("orders", b"x")
    message = str(raised.value)
    assert f"the control plane at {url} did not answer" in message
    assert "no route of topic 'orders' in 'prod' is cached" in message
    with pytest.raises(ControlPlaneUnreachable):
        Consumer("orders", "billing", lambda m: None, **kwargs).start()


def test_a_cached_route_starts_clients_while_the_control_plane_is_down(cluster):
    cluster.standard("orders")
    cluster.pv.binding("orders", "billing", APP)
    broker = cluster.broker()
    url = f"http://127.0.0.1:{closed_port()}"
    # what a client that reached the control plane earlier left in its cache
    RouteCache(cluster.cache_dir, url, "prod").save("orders", Route.single("orders", "prod-a", cluster.zk, "prod"))
    kwargs = cluster.client_kwargs(control_plane=url, environment="prod", api_token="t", **QUICK)
    del kwargs["zk"]
    got = Received()
    with Consumer("orders", "billing", got.handler("c"), **kwargs) as consumer, Producer(**kwargs) as producer:
        sent = producer.send("orders", b"routed from the cache")
        wait_for(lambda: got.ids("c") == [sent], 10, "the delivery")
        assert consumer.stats["brokers"] == [f"{broker.node_id}@{broker.address}"]
