"""The SDK finds its cluster through the real control plane's route endpoint (a live server, token auth,
a topic approved through the workflow), then sends and receives through the broker it found there; it
follows the route's later changes from ZooKeeper, and says why when the endpoint cannot give a route."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from broker_core.client import Consumer, ControlPlaneError, Producer, RouteUnknown
from broker_core.client.routes import fetch_route
from tests.broker.conftest import wait_for as wait_closely
from tests.broker.helpers import Received
from tests.broker.routes_helpers import make_cluster, write_route
from tests.integration.conftest import CONSUMER_APP, PRODUCER_APP, TOPIC

pytestmark = pytest.mark.django_db(transaction=True)


def routed(kwargs: dict, url: str, token: str) -> dict:
    return {k: v for k, v in kwargs.items() if k != "zk"} | {"control_plane": url, "environment": "dev",
                                                              "api_token": token}


def test_the_sdk_resolves_its_cluster_through_the_route_endpoint_and_uses_that_broker(governed, live_server):
    from tests.support.tokens import token_for

    cluster = governed.cluster
    broker = cluster.broker()
    token = token_for(governed.people.consumer)
    route, _ = asyncio.run(fetch_route(live_server.url, TOPIC, "dev", token=token))
    assert (route.produce_zk, route.consume_zks) == (cluster.zk, [cluster.zk])
    with pytest.raises(ControlPlaneError) as refused:
        asyncio.run(fetch_route(live_server.url, TOPIC, "dev"))  # the endpoint wants a token
    assert refused.value.status == 401 and "api_token" in str(refused.value)

    got = Received()
    with Consumer(TOPIC, "shipping", got.handler("c"), **routed(governed.consumer, live_server.url, token)) \
            as consumer, Producer(**routed(governed.producer, live_server.url, token)) as producer:
        sent = producer.send(TOPIC, b"routed", message_type="paid")
        wait_closely(lambda: got.ids("c") == [sent], 10, "the delivery")
        assert consumer.stats["brokers"] == [f"{broker.node_id}@{broker.address}"]
    assert broker.group_stats(TOPIC, "shipping")["acked"] == 1


def test_clients_started_through_the_endpoint_follow_the_route_in_zookeeper(governed, live_server, zk_hosts, zk):
    """The endpoint names the topic's cluster A; the route then moves to a cluster B (written into /routes/<topic>
    of both, as the control plane does): the running clients follow without asking the endpoint again."""
    from tests.support.tokens import token_for

    a, cp = governed.cluster, governed.cp
    b = make_cluster(zk_hosts, zk, f"{a.name[:40]}-b-{uuid.uuid4().hex[:4]}")
    try:
        b.pv.meta()
        b.pv.topic(TOPIC, message_types=["created", "paid"])
        b.pv.app(PRODUCER_APP, governed.producer["secret"])
        b.pv.app(CONSUMER_APP, governed.consumer_secret)
        b.pv.grant(TOPIC, PRODUCER_APP)
        b.pv.binding(TOPIC, "shipping", CONSUMER_APP, selector="pa*")
        broker_a, broker_b = a.broker(), b.broker()
        token = token_for(governed.people.consumer)
        got = Received()
        with Consumer(TOPIC, "shipping", got.handler("c"), **routed(governed.consumer, live_server.url, token)) \
                as consumer, Producer(**routed(governed.producer, live_server.url, token)) as producer:
            first = producer.send(TOPIC, b"to A", message_type="paid")
            version = producer.route(TOPIC).version + 1  # the control plane's own route is version 1
            doc = {"topic": TOPIC, "environment": "dev", "version": version, "produce": "b",
                   "consume": [cp.name, "b"], "clusters": {cp.name: a.zk, "b": b.zk}}
            write_route([a, b], doc)
            wait_closely(lambda: producer.route(TOPIC).version == version and len(consumer.stats["brokers"]) == 2,
                         5, "the clients to follow the route to B")
            second = producer.send(TOPIC, b"to B", message_type="paid")
            wait_closely(lambda: sorted(got.ids("c")) == sorted([first, second]), 10, "both deliveries")
        assert broker_a.group_stats(TOPIC, "shipping")["acked"] == 1
        assert broker_b.group_stats(TOPIC, "shipping")["acked"] == 1
    finally:
        b.teardown()


def test_a_topic_the_control_plane_does_not_know_fails_at_once_naming_it(people, live_server, tmp_path):
    from tests.support.tokens import token_for

    kwargs = {"app_id": PRODUCER_APP, "secret": "unused", "control_plane": live_server.url, "environment": "dev",
              "api_token": token_for(people.dev), "cache_dir": tmp_path, "connect_timeout": 2.0}
    with Producer(**kwargs) as producer, pytest.raises(RouteUnknown) as unknown:
        producer.send("payments.no-such-topic", b"x")
    assert "no active topic 'payments.no-such-topic' in environment 'dev'" in str(unknown.value)
    assert unknown.value.status == 404
    with pytest.raises(RouteUnknown):
        Consumer("payments.no-such-topic", "shipping", lambda m: None, **kwargs).start()
