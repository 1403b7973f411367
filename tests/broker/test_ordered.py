"""Issue 21, item 1: ordered topics. Messages of one order key reach a group in publish order, one in flight per key;
each partition is held by one consumer of the group at a time (generation fencing); a keyless publish is refused.
Real broker processes over TCP, a real ZooKeeper."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict

import pytest

from broker_core import protocol as p
from broker_core.client import Consumer, Message, Producer
from broker_core.client.connection import BrokerAddress, BrokerConnection
from broker_core.client.errors import BrokerError
from broker_core.layout import LOGIC_PARTITIONS, logic_partition, physical_partition
from broker_core.storage.partitions import partition_of
from tests.broker.conftest import APP, ROOT, SECRET, wait_for
from tests.broker.helpers import RawConsumer
from tests.broker.tx_helpers import admin


def ordered_cluster(cluster, partitions: int, brokers: int = 1, **binding):
    cluster.standard("orders")
    cluster.pv.topic("orders", ordered=True, partitions=partitions, replication_factor=1)
    cluster.pv.binding("orders", "billing", APP, **binding)
    nodes = [cluster.broker() for _ in range(brokers)]
    doc = cluster.pv.placement("orders", partitions, 1, [b.node_id for b in nodes])
    placed = {part["id"]: part["replicas"][0] for part in doc["partitions"]}
    for b in nodes:
        mine = sorted(pid for pid, node in placed.items() if node == b.node_id)
        wait_for(lambda b=b, mine=mine: b.stats()["topics"].get("orders", {}).get("store", {}).get("partitions")
                 == mine, 10, f"{b.node_id} to hold partitions {mine}")
    return nodes, placed


def check_key_order(seen: list[tuple[float, str, int]], sent_per_key: dict[str, int]) -> int:
    """`seen`: (time handled, key, index within its key). Per key, in the time they were handled, every index comes
    after the one before; a message may repeat only right after itself (it was not acknowledged). Returns the
    repeats."""
    by_key: dict[str, list[int]] = defaultdict(list)
    for _, key, index in sorted(seen):
        by_key[key].append(index)
    repeats = 0
    for key, indexes in by_key.items():
        expected = 0
        for index in indexes:
            if index == expected:
                expected += 1
            elif index == expected - 1:
                repeats += 1
            else:
                raise AssertionError(f"key {key}: index {index} handled when {expected} was next: {indexes[:40]}")
        assert expected == sent_per_key[key], f"key {key}: {expected} of {sent_per_key[key]} handled"
    assert set(by_key) == set(sent_per_key)
    return repeats


def test_keys_map_to_logic_partitions_then_physical_ones():
    assert LOGIC_PARTITIONS == 1024
    assert logic_partition("customer-42") == logic_partition("customer-42") < 1024
    assert physical_partition("customer-42", 4) == logic_partition("customer-42") % 4
    assert {physical_partition(f"k{i}", 3) for i in range(100)} == {0, 1, 2}


def test_a_keyless_message_and_a_key_sent_to_another_partition_are_refused(cluster):
    (b,), _ = ordered_cluster(cluster, 2)

    async def publish(partition, key):
        conn = await BrokerConnection.open(BrokerAddress(b.node_id, "127.0.0.1", b.port), app_id=APP, secret=SECRET,
                                           client_id="raw")
        try:
            return await conn.request(p.Publish(conn.next_ref(), "orders",
                                                [p.message("m-1", "default", b"x", key=key)], partition))
        finally:
            conn.close()

    with pytest.raises(BrokerError) as keyless:
        asyncio.run(publish(0, None))
    assert keyless.value.code == p.E_KEY_REQUIRED and "order key" in str(keyless.value)
    wrong = 1 - physical_partition("k", 2)
    with pytest.raises(BrokerError) as stale:
        asyncio.run(publish(wrong, "k"))
    assert stale.value.code == p.E_STALE_MAPPING and "/placement/orders" in str(stale.value)
    with Producer(**cluster.client_kwargs()) as producer:
        with pytest.raises(BrokerError) as sdk:
            producer.send("orders", b"no key")
        assert sdk.value.code == p.E_KEY_REQUIRED
        producer.send("orders", b"keyed", key="k")  # the SDK sends a key to its partition
    assert b.stats()["topics"]["orders"]["published"] == 1, "only the keyed message was stored"


def test_after_a_stale_mapping_refusal_what_the_producer_sent_before_knowing_is_refused_too(cluster):
    """A pipelining producer's batches of one partition: the first is refused `stale_mapping` (one of its keys maps
    elsewhere), the next holds only a key that did not move. Stored, the next would put that key's later message
    before the refused one; the broker refuses it until the producer says it knows (`remapped` higher). A client
    that does not send `remapped` is not held to it."""
    (b,), _ = ordered_cluster(cluster, 2)
    stays, home = "k", physical_partition("k", 2)
    moved = next(k for k in (f"x{i}" for i in range(100)) if physical_partition(k, 2) != home)

    async def pipelined(remapped):
        conn = await BrokerConnection.open(BrokerAddress(b.node_id, "127.0.0.1", b.port), app_id=APP, secret=SECRET,
                                           client_id="raw")
        tag = "none" if remapped is None else remapped
        try:
            first = conn.request(p.Publish(conn.next_ref(), "orders", [
                p.message(f"{tag}-1", "default", b"k:1", key=stays), p.message(f"{tag}-2", "default", b"x", key=moved)],
                home, remapped))
            second = conn.request(p.Publish(conn.next_ref(), "orders", [p.message(f"{tag}-3", "default", b"k:2",
                                                                                   key=stays)], home, remapped))
            answers = await asyncio.gather(first, second, return_exceptions=True)
            again = None
            if remapped is not None:  # the producer sends both again, knowing of the refusal
                again = await conn.request(p.Publish(conn.next_ref(), "orders", [
                    p.message(f"{tag}-1", "default", b"k:1", key=stays), p.message(f"{tag}-3", "default", b"k:2",
                                                                                  key=stays)], home, remapped + 1))
            return answers, again
        finally:
            conn.close()

    (first, second), again = asyncio.run(pipelined(0))
    assert isinstance(first, BrokerError) and first.code == p.E_STALE_MAPPING and repr(moved) in str(first)
    assert isinstance(second, BrokerError) and second.code == p.E_STALE_MAPPING, second
    assert "earlier publish" in str(second) and "remapped > 0" in str(second)
    assert isinstance(again, p.Published) and again.count == 2
    assert b.stats()["topics"]["orders"]["published"] == 2, "only the batch sent again was stored"
    (first, second), _ = asyncio.run(pipelined(None))
    assert isinstance(first, BrokerError) and first.code == p.E_STALE_MAPPING
    assert isinstance(second, p.Published), "a client that does not send remapped: each publish checked alone"


def test_one_message_per_key_in_flight_and_the_next_only_after_the_ack(cluster):
    (b,), _ = ordered_cluster(cluster, 2)
    keys = [f"k{i}" for i in range(5)]
    with Producer(**cluster.client_kwargs()) as producer:
        producer.send_many("orders", [Message(f"{k}:{n}".encode(), key=k) for n in range(4) for k in keys])
    raw = RawConsumer(f"127.0.0.1:{b.port}", APP, SECRET, "orders", "billing", credit=100)
    raw.start()
    try:
        for n in range(4):
            wait_for(lambda n=n: len(raw.deliveries) >= 5 * (n + 1), 10, f"round {n}: one message per key")
            batch = raw.deliveries[5 * n:]
            assert sorted(f[p.M_BODY].decode() for _, _, f, _ in batch) == sorted(f"{k}:{n}" for k in keys), \
                "exactly the next message of each key, none of a key whose message is unacknowledged"
            assert b.group_stats("orders", "billing")["in_flight"] == 5
            raw.ack([seq for seq, _, _, _ in batch])
        wait_for(lambda: b.group_stats("orders", "billing")["acked"] == 20, 10, "every message acknowledged")
        assert len(raw.deliveries) == 20
    finally:
        raw.close()


def test_a_partition_is_held_by_one_consumer_and_a_late_ack_is_refused_as_stale(cluster):
    (b,), _ = ordered_cluster(cluster, 1)
    with Producer(**cluster.client_kwargs()) as producer:
        producer.send_many("orders", [Message(f"{k}:0".encode(), key=k) for k in ("a", "b", "c")])
    first = RawConsumer(f"127.0.0.1:{b.port}", APP, SECRET, "orders", "billing", credit=100, ack_timeout_ms=1500)
    second = RawConsumer(f"127.0.0.1:{b.port}", APP, SECRET, "orders", "billing", credit=100, ack_timeout_ms=60_000)
    first.start()
    try:
        wait_for(lambda: len(first.deliveries) == 3, 10, "the first consumer to get one message per key")
        taken_at = first.deliveries[-1][3]
        second.start()  # the partition stays with `first` while it holds its messages, until its ack timeout
        wait_for(lambda: len(second.deliveries) == 3, 10, "the partition to move once the first one's acks timed out")
        assert second.deliveries[0][3] - taken_at >= 1.2, "nothing of the partition went to the second consumer " \
                                                          "while the first held it"
        assert all(attempt == 2 for _, attempt, _, _ in second.deliveries)
        held = b.group_stats("orders", "billing")["ordered"]
        assert len(held["partitions_held"]) == 1 and held["reassigned"] >= 1
        first.ack([seq for seq, _, _, _ in first.deliveries])  # late: refused, the second one holds them
        wait_for(lambda: b.group_stats("orders", "billing")["ordered"]["stale_acks"] == 3, 10, "stale acks counted")
        assert b.group_stats("orders", "billing")["acked"] == 0 and b.group_stats("orders", "billing")["in_flight"] == 3
        second.ack([seq for seq, _, _, _ in second.deliveries])
        wait_for(lambda: b.group_stats("orders", "billing")["acked"] == 3, 10, "acked by the holder")
    finally:
        first.close()
        second.close()


def test_order_holds_with_several_consumers_and_when_one_is_killed(cluster):
    nodes, placed = ordered_cluster(cluster, 4, brokers=2)
    keys = [f"customer-{i}" for i in range(40)]
    per_key = 25
    doomed = subprocess.Popen([sys.executable, "-m", "tests.broker.consumer_proc", cluster.zk, str(cluster.cache_dir),
                               "orders", "billing", APP, SECRET, "200"], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    held_by_doomed: list[str] = []
    try:
        assert doomed.stdout.readline().strip() == "subscribed"
        with Producer(**cluster.client_kwargs()) as producer:
            for n in range(per_key):
                producer.send_many("orders", [Message(f"{k}:{n}".encode(), key=k) for k in keys])
        # it holds every partition (the first consumer) and one message per key: all 40 keys' first messages (its
        # handler blocks on the first one it got, so it never acknowledges any)
        held_by_doomed.append(doomed.stdout.readline().strip())
        wait_for(lambda: sum(b.group_stats("orders", "billing").get("in_flight", 0) for b in nodes) == len(keys), 10,
                 "the first message of each key in flight at the consumer to be killed")
        lock = threading.Lock()
        seen: list[tuple[float, str, int]] = []
        partitions_by_consumer: dict[str, set] = defaultdict(set)

        def handler(name):
            def handle(m):
                key, index = m.body.decode().split(":")
                with lock:
                    seen.append((time.monotonic(), key, int(index)))
                    partitions_by_consumer[name].add((m.broker, partition_of(m.seq)))
            return handle

        consumers = [Consumer("orders", "billing", handler(f"c{i}"), **cluster.client_kwargs(credit=50))
                     for i in range(2)]
        for c in consumers:
            c.start()
        try:
            for b in nodes:  # the survivors are subscribed on every broker
                wait_for(lambda b=b: b.group_stats("orders", "billing").get("consumers") == 3, 10, "3 subscribed")
            assert not seen, "the killed consumer's partitions go to nobody else while it lives and holds messages"
            doomed.send_signal(signal.SIGKILL)
            doomed.wait(10)
            wait_for(lambda: len(seen) >= len(keys) * per_key, 30, "every message handled")
            wait_for(lambda: sum(b.group_stats("orders", "billing")["acked"] for b in nodes) == len(keys) * per_key,
                     10, "every message acknowledged")
        finally:
            for c in consumers:
                c.stop()
        repeats = check_key_order(seen, {k: per_key for k in keys})
        assert repeats == 0, "the killed consumer's messages were never handled, so they are not repeats here"
        assert len(seen) == len(keys) * per_key
        mine = [set(parts) for parts in partitions_by_consumer.values()]
        assert len(mine) == 2 and not (mine[0] & mine[1]), f"each partition was held by one consumer: {mine}"
        assert sum(b.group_stats("orders", "billing")["redelivered"] for b in nodes) == len(keys), \
            "what the killed consumer held was delivered again, once"
    finally:
        if doomed.poll() is None:
            doomed.kill()
            doomed.wait(10)
        doomed.stdout.close()
    assert len(placed) == 4 and held_by_doomed[0].startswith("got ")


@pytest.mark.parametrize("on_failure", ["block", "dead_letter"])
def test_the_binding_says_whether_a_failing_message_blocks_its_key_or_is_dead_lettered(cluster, on_failure):
    (b,), _ = ordered_cluster(cluster, 1, delivery_limit=2, backoff_initial_ms=50, backoff_max_ms=50,
                              on_failure=on_failure)
    with Producer(**cluster.client_kwargs()) as producer:
        producer.send_many("orders", [Message(f"k:{n}".encode(), key="k") for n in range(2)])
    raw = RawConsumer(f"127.0.0.1:{b.port}", APP, SECRET, "orders", "billing", credit=100)
    raw.start()
    try:
        for attempt in (1, 2):
            wait_for(lambda attempt=attempt: len(raw.deliveries) == attempt, 10, f"attempt {attempt} of k:0")
            seq, got, fields, _ = raw.deliveries[-1]
            assert (fields[p.M_BODY], got) == (b"k:0", attempt)
            raw.nack([[seq, -1, "refused by the test"]])
        # past the delivery limit of 2: blocked, k:0 comes a third time; dead-lettered, k:1 comes next
        wait_for(lambda: len(raw.deliveries) == 3, 10, "the key's next delivery")
        _, attempt, fields, _ = raw.deliveries[-1]
        if on_failure == "block":
            assert (fields[p.M_BODY], attempt) == (b"k:0", 3)
            assert b.group_stats("orders", "billing")["dead_lettered"] == 0
        else:
            assert (fields[p.M_BODY], attempt) == (b"k:1", 1)
            assert b.group_stats("orders", "billing")["dead_lettered"] == 1
    finally:
        raw.close()


def test_a_position_reset_that_finishes_a_key_s_message_in_flight_lets_the_key_go_on(cluster):
    (b,), _ = ordered_cluster(cluster, 1)
    with Producer(**cluster.client_kwargs()) as producer:
        producer.send_many("orders", [Message(f"k:{n}".encode(), key="k") for n in range(2)])
        wait_for(lambda: b.group_stats("orders", "billing").get("depth") == 2, 10, "the backlog")
        reset_ms = int(time.time() * 1000) + 1
        wait_for(lambda: int(time.time() * 1000) > reset_ms, 1, "a later millisecond")
        producer.send("orders", b"k:2", key="k")
    raw = RawConsumer(f"127.0.0.1:{b.port}", APP, SECRET, "orders", "billing", credit=100)
    raw.start()
    try:
        wait_for(lambda: len(raw.deliveries) == 1, 10, "k:0 in flight")
        status, answer = admin(b, "POST", "/admin/group/reset", {"topic": "orders", "group": "billing",
                                                                 "before_ms": reset_ms}, token=b.admin_token)
        assert (status, answer["skipped"]) == (200, 2), answer  # k:0 (in flight) and k:1 (waiting)
        wait_for(lambda: len(raw.deliveries) == 2, 10, "the key's message stored after the reset time")
        assert raw.deliveries[1][2][p.M_BODY] == b"k:2"
    finally:
        raw.close()


def test_a_message_waiting_behind_its_key_expires_at_its_ttl(cluster):
    (b,), _ = ordered_cluster(cluster, 1)
    with Producer(**cluster.client_kwargs()) as producer:
        producer.send_many("orders", [Message(b"k:0", key="k"), Message(b"k:1", key="k", ttl_ms=300)])
    raw = RawConsumer(f"127.0.0.1:{b.port}", APP, SECRET, "orders", "billing", credit=100)
    raw.start()
    try:
        wait_for(lambda: len(raw.deliveries) == 1, 10, "k:0 in flight")
        # k:1 waits behind k:0 (unacknowledged) and expires there, not only once k:0 is acknowledged
        wait_for(lambda: b.group_stats("orders", "billing")["expired"] == 1, 10, "k:1 expired while it waited")
        assert b.group_stats("orders", "billing")["in_flight"] == 1 and raw.deliveries[0][2][p.M_BODY] == b"k:0"
        raw.ack([raw.deliveries[0][0]])
        wait_for(lambda: b.group_stats("orders", "billing")["acked"] == 1, 10, "k:0 acknowledged")
        assert len(raw.deliveries) == 1 and b.group_stats("orders", "billing")["depth"] == 0
    finally:
        raw.close()
