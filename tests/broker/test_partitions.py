"""Issue 20, item 1: a topic's partitions placed on brokers, producers sending each batch to its partition's
leader, an older broker's topic folder recovered as partition 0. Real broker processes, a real ZooKeeper."""

from __future__ import annotations

import asyncio
import os
from collections import Counter

import pytest

from broker_core import protocol as p
from broker_core.client import Consumer, Producer
from broker_core.client._batching import choose_partition
from broker_core.client.connection import BrokerAddress, BrokerConnection
from broker_core.client.errors import BrokerError
from broker_core.layout import LAYOUT, place
from broker_core.storage.partitions import adopt_legacy_folder, partition_of
from tests.broker.conftest import APP, SECRET, wait_for
from tests.broker.helpers import Received


def test_placement_is_balanced_keeps_replicas_in_place_and_refuses_too_few_brokers():
    doc = place("orders", 6, 2, ["b3", "b1", "b2"])
    replicas = [part["replicas"] for part in doc["partitions"]]
    assert [part["id"] for part in doc["partitions"]] == list(range(6)) and doc["epoch"] == 1
    assert all(len(set(r)) == 2 for r in replicas), "a partition's replicas are on different brokers"
    assert Counter(r[0] for r in replicas) == {"b1": 2, "b2": 2, "b3": 2}, "leaders spread evenly"
    assert Counter(n for r in replicas for n in r) == {"b1": 4, "b2": 4, "b3": 4}, "replicas spread evenly"
    # a fourth broker: what stays on a listed broker stays; nothing moves by itself
    again = place("orders", 6, 2, ["b1", "b2", "b3", "b4"], epoch=2, previous=doc)
    assert [part["replicas"] for part in again["partitions"]] == replicas and again["epoch"] == 2
    # a broker gone: only its replicas move, to the least loaded brokers
    without = place("orders", 6, 2, ["b1", "b2", "b4"], epoch=3, previous=doc)
    for before, after in zip(replicas, (part["replicas"] for part in without["partitions"]), strict=True):
        assert [r for r in before if r != "b3"] == [r for r in after if r in before]
        assert "b3" not in after and len(set(after)) == 2
    with pytest.raises(ValueError, match="needs 3 brokers"):
        place("orders", 2, 3, ["b1", "b2"])
    with pytest.raises(ValueError, match="partitions must be"):
        place("orders", 0, 1, ["b1"])


def test_the_partition_of_a_keyed_message_is_stable_and_keyless_batches_go_round_robin():
    assert choose_partition("customer-42", 8, 0) == choose_partition("customer-42", 8, 5)
    assert {choose_partition(None, 4, turn) for turn in range(8)} == {0, 1, 2, 3}


def placed_cluster(cluster, partitions: int, brokers: int = 3):
    cluster.standard("orders")
    cluster.pv.topic("orders", partitions=partitions, replication_factor=1)
    cluster.pv.binding("orders", "billing", APP)
    nodes = [cluster.broker() for _ in range(brokers)]
    doc = cluster.pv.placement("orders", partitions, 1, [b.node_id for b in nodes])
    placed = {part["id"]: part["replicas"][0] for part in doc["partitions"]}
    for b in nodes:
        mine = sorted(pid for pid, node in placed.items() if node == b.node_id)
        wait_for(lambda b=b, mine=mine: b.stats()["topics"].get("orders", {}).get("store", {}).get("partitions")
                 == mine or not b.stats()["topics"].get("orders") and not mine, 10,
                 f"{b.node_id} to hold partitions {mine}")
    return nodes, placed


def test_each_broker_holds_its_partitions_and_producers_send_to_the_leaders(cluster):
    nodes, placed = placed_cluster(cluster, 6)
    by_node = {b.node_id: b for b in nodes}
    keys = [f"customer-{i}" for i in range(20)]
    with Producer(**cluster.client_kwargs()) as producer:
        keyed = {producer.send("orders", b"k%d" % i, key=keys[i % 20]): keys[i % 20] for i in range(200)}
        for _ in range(30):
            producer.send_many("orders", [b"batch"] * 20)
        link_stats = next(iter(producer.stats().values()))
    assert link_stats["not_leader"] == 0, "every batch went to its partition's leader at once"
    published = {b.node_id: b.stats()["topics"].get("orders", {}).get("published", 0) for b in nodes}
    assert sum(published.values()) == 800
    assert all(published[node] > 0 for node in set(placed.values())), f"every leader took messages: {published}"
    for pid, node in placed.items():  # each partition's folder is on its leader only
        for b in nodes:
            assert (b.data_dir / "topics" / "orders" / f"p{pid}").is_dir() == (b.node_id == node)

    got = Received()
    partitions_of_key: dict[str, set[int]] = {}
    seen: list = []
    with Consumer("orders", "billing", lambda m: seen.append((m.id, m.seq)) or got.handler("c")(m),
                  **cluster.client_kwargs(credit=500)):
        wait_for(lambda: got.count("c") >= 800, 30, "every message delivered")
    ids = got.ids("c")
    assert set(keyed) <= set(ids) and len(set(ids)) == 800
    for message_id, seq in seen:
        if message_id in keyed:
            partitions_of_key.setdefault(keyed[message_id], set()).add(partition_of(seq))
    assert all(len(parts) == 1 for parts in partitions_of_key.values()), "a key's messages share one partition"
    assert len(by_node) == 3


def test_a_broker_refuses_a_partition_it_does_not_lead(cluster):
    nodes, placed = placed_cluster(cluster, 3)
    b = nodes[0]
    others = sorted(pid for pid, node in placed.items() if node != b.node_id)

    async def publish(partition):
        conn = await BrokerConnection.open(BrokerAddress(b.node_id, "127.0.0.1", b.port), app_id=APP, secret=SECRET,
                                           client_id="raw")
        try:
            return await conn.request(p.Publish(conn.next_ref(), "orders",
                                                [p.message(f"m-{partition}", "default", b"x")], partition))
        finally:
            conn.close()

    with pytest.raises(BrokerError) as refused:
        asyncio.run(publish(others[0]))
    assert refused.value.code == p.E_NOT_LEADER and placed[others[0]] in str(refused.value)
    with pytest.raises(BrokerError) as unknown:
        asyncio.run(publish(7))
    assert unknown.value.code == p.E_INVALID and "3 partitions" in str(unknown.value)
    assert b.stats()["topics"].get("orders", {}).get("published", 0) == 0, "nothing stored"


def test_a_topic_folder_of_a_broker_from_before_partitions_is_recovered_as_partition_0(cluster):
    cluster.standard("orders")
    cluster.pv.binding("orders", "billing", APP)
    broker = cluster.broker()
    with Producer(**cluster.client_kwargs()) as producer:
        sent = producer.send_many("orders", [b"old %d" % i for i in range(50)])
    broker.stop()
    # the older layout: segments, ack files and dead letters directly in the topic's folder
    folder = broker.data_dir / "topics" / "orders"
    for entry in (folder / "p0").iterdir():
        os.rename(entry, folder / entry.name)
    (folder / "p0").rmdir()
    assert any(folder.glob("*.log"))
    broker.start()
    got = Received()
    with Consumer("orders", "billing", got.handler("c"), **cluster.client_kwargs()):
        wait_for(lambda: set(got.ids("c")) >= set(sent), 15, "the messages stored before the upgrade")
    assert not any(folder.glob("*.log")) and any((folder / "p0").glob("*.log"))
    assert cluster.pv.exists(LAYOUT.topic("orders"))


def test_a_producer_follows_a_partition_to_its_new_leader_and_loses_nothing(cluster):
    """The placement moves a partition to the other broker while a producer sends to it: the old leader takes no
    more (a batch it gets is refused as `not_leader` and sent again by the SDK once it reads the new placement),
    the new one takes every later message, and every acknowledged message is delivered."""
    nodes, placed = placed_cluster(cluster, 2, brokers=2)
    by_node = {b.node_id: b for b in nodes}
    moving = choose_partition("k", 2, 0)  # every message below has key "k": this partition
    old = placed[moving]
    [new] = [n for n in by_node if n != old]
    acknowledged: list[str] = []
    with Producer(**cluster.client_kwargs(send_timeout=20)) as producer:
        for i in range(200):
            acknowledged.append(producer.send("orders", b"before %d" % i, key="k"))
        cluster.pv._put(LAYOUT.placement("orders"), {"topic": "orders", "epoch": 2, "partitions": [
            {"id": pid, "replicas": [new if pid == moving else placed[pid]]} for pid in (0, 1)]})
        wait_for(lambda: by_node[new].stats()["topics"]["orders"]["leads"] == [0, 1]
                 and by_node[old].stats()["topics"]["orders"]["leads"] == [], 10, "both brokers to read the move")
        for i in range(200):
            acknowledged.append(producer.send("orders", b"after %d" % i, key="k"))
    assert len(set(acknowledged)) == 400
    assert by_node[old].stats()["topics"]["orders"]["published"] == 200, "the old leader took no message after"
    assert by_node[new].stats()["topics"]["orders"]["published"] == 200, "the new leader took every later one"
    got = Received()
    with Consumer("orders", "billing", got.handler("c"), **cluster.client_kwargs(credit=500)):
        wait_for(lambda: set(got.ids("c")) >= set(acknowledged), 20, "every acknowledged message")


def test_adopting_an_older_topic_folder_leaves_its_delayed_messages_where_they_are(tmp_path):
    """A topic folder from before partitions holds its segments directly; they move into p0/. Its schedule store
    (delayed messages) belongs to the topic, not to a partition: it stays in the topic folder."""
    topic_dir = tmp_path / "orders"
    (topic_dir / "schedule").mkdir(parents=True)
    (topic_dir / "schedule" / "log-1").write_bytes(b"scheduled")
    (topic_dir / "00000001.log").write_bytes(b"segment")
    assert adopt_legacy_folder(topic_dir)
    assert (topic_dir / "p0" / "00000001.log").read_bytes() == b"segment"
    assert (topic_dir / "schedule" / "log-1").read_bytes() == b"scheduled"
    assert not (topic_dir / "p0" / "schedule").exists()
    assert not adopt_legacy_folder(topic_dir), "a second start moves nothing"
