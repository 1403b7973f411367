"""Running SDK clients follow a topic's route (docs/routing.md) between two clusters with real brokers and a
real ZooKeeper: the route document is written into /routes/<topic> of both clusters, as the control plane
does; nobody restarts a client."""

from __future__ import annotations

import os
import signal
import uuid

import pytest

from broker_core.client import Consumer, Producer
from tests.broker.conftest import wait_for
from tests.broker.helpers import Received
from tests.broker.routes_helpers import (
    Traffic,
    hold_topic,
    make_cluster,
    route_document,
    write_route,
)
from tests.broker.tx_helpers import TOKEN, admin, states

TOPIC = "orders"
FOLLOWED = 5.0  # a changed route is followed within 5 s


@pytest.fixture
def two_clusters(cluster, zk_hosts, zk):
    """Cluster A (the `cluster` fixture) and a cluster B in its own chroot of the same ZooKeeper."""
    other = make_cluster(zk_hosts, zk, f"{cluster.name[:40]}-b-{uuid.uuid4().hex[:4]}")
    yield cluster, other
    other.teardown()


def published(broker) -> int:
    return broker.stats()["topics"].get(TOPIC, {}).get("published", 0)


def test_running_clients_follow_the_route_from_one_cluster_to_another_losing_nothing(two_clusters):
    a, b = two_clusters
    for c in (a, b):
        hold_topic(c, TOPIC)
    broker_a, broker_b = a.broker(), b.broker()
    traffic = Traffic(TOPIC, a.client_kwargs(connect_timeout=2.0))  # zk= cluster A; no route node yet: A only
    try:
        traffic.start()
        wait_for(lambda: len(traffic.got["billing"]) > 20 and len(traffic.got["audit"]) > 20, 10, "traffic on A")

        # consumers join B (the start of a move)
        write_route([a, b], route_document(TOPIC, 1, a, [a, b]))
        wait_for(lambda: any(broker_b.node_id in s for s in traffic.consumer.stats["brokers"])
                 and any(broker_b.node_id in s for s in traffic.async_brokers()), FOLLOWED,
                 "both consumers to subscribe on B")
        assert published(broker_b) == 0  # producers still send to A

        # producers switch to B
        write_route([a, b], route_document(TOPIC, 2, b, [a, b]))
        wait_for(lambda: traffic.routes() == (2, 2), FOLLOWED, "both producers to follow route version 2")
        wait_for(lambda: published(broker_b) > 50, FOLLOWED, "new messages to reach B's broker")
        wait_for(lambda: traffic.settled_on(a.zk), FOLLOWED, "the batches sent to A to be answered")
        on_a = published(broker_a)
        reached = published(broker_b)
        wait_for(lambda: published(broker_b) > reached + 100, FOLLOWED, "more messages on B")
        assert published(broker_a) == on_a, "nothing new goes to A once the producers follow the route to B"

        # consumers leave A
        write_route([a, b], route_document(TOPIC, 3, b, [b]))
        wait_for(lambda: traffic.consumer.stats["clusters"] == [b.name] and traffic.consumer.stats["brokers"]
                 == [f"{broker_b.node_id}@{broker_b.address}"] and traffic.async_brokers()
                 == [f"{broker_b.node_id}@{broker_b.address}"], FOLLOWED, "both consumers to leave A")
        wait_for(lambda: traffic.producer_clusters() == ({b.zk}, {b.zk}), FOLLOWED,
                 "the producers to close their idle links to A, which no route names")
        wait_for(lambda: published(broker_b) > reached + 300, FOLLOWED, "traffic going on after the move")

        acked = traffic.stop_sending()
        for group in ("billing", "audit"):
            wait_for(lambda group=group: not traffic.missing(group, acked), 10,
                     f"every acknowledged message to reach group {group}")
            assert traffic.brokers_seen(group) == {broker_a.node_id, broker_b.node_id}
        assert traffic.errors == [], "a sender saw an error during the move"
        print(f"route move: {len(acked)} acknowledged, 0 lost, duplicates billing={traffic.duplicates('billing')} "
              f"audit={traffic.duplicates('audit')}")
    finally:
        traffic.close()


def test_a_batch_in_flight_to_a_cluster_that_left_the_route_is_sent_again_to_the_new_one(two_clusters):
    a, b = two_clusters
    for c in (a, b):
        hold_topic(c, TOPIC, groups=("billing",))
    broker_a, broker_b = a.broker(), b.broker()
    got = Received()
    with Producer(**a.client_kwargs()) as producer, \
            Consumer(TOPIC, "billing", got.handler("c"), **b.client_kwargs()):  # zk= B, no route node: B only
        producer.connect(TOPIC)
        os.kill(broker_a.proc.pid, signal.SIGSTOP)  # A's broker stops answering: what goes there stays in flight
        try:
            pending = [producer.send_async(TOPIC, f"m{i}".encode()) for i in range(20)]
            wait_for(lambda: producer.stats()[a.zk]["in_flight_batches"], 5, "batches in flight to A")
            write_route([a, b], route_document(TOPIC, 1, b, [b]))  # A leaves the route altogether
            wait_for(lambda: producer.route(TOPIC).version == 1, FOLLOWED, "the producer to follow the route")
        finally:
            broker_a.kill()  # its connection drops with the batches unanswered
        ids = [f.result(10) for f in pending]  # no error: sent again to B, with the same ids
        wait_for(lambda: set(got.ids("c")) == set(ids), 10, "every message on B")
    assert published(broker_b) == 20


def test_transactions_end_where_they_were_prepared_and_back_checks_reach_both_clusters(two_clusters):
    a, b = two_clusters
    for c in (a, b):
        hold_topic(c, TOPIC, groups=("billing",), transactional=True, tx_check={"delay_s": 60})
    broker_a, broker_b = a.broker(admin_token=TOKEN), b.broker(admin_token=TOKEN)
    write_route([a, b], route_document(TOPIC, 1, a, [a]))
    got = Received()
    with Producer(**a.client_kwargs(check_listener=lambda check: "commit")) as producer, \
            Consumer(TOPIC, "billing", got.handler("c"), **b.client_kwargs()):  # zk= B: it follows the route too
        on_a = producer.prepare(TOPIC, b"prepared on A", message_type="order.created")
        assert states(broker_a, [on_a.message_id]) == {on_a.message_id: "prepared"}

        write_route([a, b], route_document(TOPIC, 2, b, [a, b]))
        wait_for(lambda: producer.route(TOPIC).version == 2, FOLLOWED, "the producer to follow the route")
        on_b = producer.prepare(TOPIC, b"prepared on B", message_type="order.created")
        assert states(broker_b, [on_b.message_id]) == {on_b.message_id: "prepared"}
        # the commit of A's message goes to A's broker, though the topic's producers now send to B
        assert producer.end_transaction(on_a, commit=True) == "committed"
        assert states(broker_a, [on_a.message_id]) == {on_a.message_id: "committed"}
        # the producer keeps a check connection on both clusters: B's broker can ask it about its message
        wait_for(producer.checks_connected, FOLLOWED, "check connections to both clusters")
        status, answer = admin(broker_b, "POST", "/admin/tx/check", {"message_ids": [on_b.message_id]})
        assert status == 200 and answer["results"][0]["answer"] == "commit"
        wait_for(lambda: on_a.message_id in got.ids("c"), FOLLOWED, "A's committed message to reach the consumer")
