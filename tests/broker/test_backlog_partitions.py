"""A placed topic's backlog stays on disk too (issue 20 item 3; broker_core/README.md "Memory bound").

A topic of four partitions placed on one broker, a group with no consumer: what it is sent stays in the four
partitions' logs (the group holds a position in each, and one window of messages in memory), so the broker's RSS
grows by its window and its connections, not by the backlog. A kill -9 brings each partition's position back from
its ack files; then one consumer gets every message once, each partition's in the order published.
"""

from __future__ import annotations

import threading

from broker_core.client import Consumer, Message, Producer
from broker_core.client._batching import choose_partition
from broker_core.storage.partitions import partition_of
from tests.broker.conftest import APP, REPORTS, wait_for
from tests.broker.test_backlog_on_disk import BODY, READER
from tests.broker.test_memory_bounds import PER_MESSAGE, WORK, RssSampler, idle_rss, per_connection

MiB = 1024 * 1024
PARTITIONS = 4
WINDOW = 1_000
CREDIT = 1_000
MAX_FRAME = MAX_OUTBUF = 1 * MiB  # small connection terms: the window is what the bound is about


def publish(producer: Producer, count: int, batch: int = 500) -> list[str]:
    """`count` messages of 1 KiB in batches, each batch keyed to the next partition in turn."""
    keys = {choose_partition(f"k{i}", PARTITIONS, 0): f"k{i}" for i in range(100)}
    assert len(keys) == PARTITIONS
    ids: list[str] = []
    for n, start in enumerate(range(0, count, batch)):
        key = keys[n % PARTITIONS]
        ids += producer.send_many("orders", [Message(f"{i:08d}".encode().ljust(BODY, b"."), key=key)
                                             for i in range(start, min(count, start + batch))])
    return ids


def test_a_partitioned_topics_backlog_stays_on_disk_survives_kill_9_and_drains_exactly_once(cluster):
    total = 120_000
    cluster.standard("orders")
    cluster.pv.topic("orders", partitions=PARTITIONS, replication_factor=1)
    cluster.pv.binding("orders", "billing", APP)
    broker = cluster.broker("--no-trace", "--backlog-window-messages", str(WINDOW), "--max-frame-bytes",
                            str(MAX_FRAME), "--max-outbuf-bytes", str(MAX_OUTBUF))
    cluster.pv.placement("orders", PARTITIONS, 1, [broker.node_id])
    wait_for(lambda: broker.stats()["topics"].get("orders", {}).get("store", {}).get("partitions")
             == list(range(PARTITIONS)), 10, "the broker to hold the four partitions")
    r0 = idle_rss(broker)
    sampler = RssSampler(broker)
    with Producer(**cluster.client_kwargs(send_timeout=60)) as producer:
        published = publish(producer, total)
    published_peak = sampler.stop()
    figures = broker.group_stats("orders", "billing")
    assert figures["depth"] == total, figures
    assert figures["on_disk"] >= total - WINDOW, f"the backlog past the window is on disk: {figures}"

    broker.kill()
    broker.start()
    wait_for(lambda: broker.group_stats("orders", "billing").get("depth") == total, 30,
             "each partition's position rebuilt from its ack files")
    r1 = idle_rss(broker)
    sampler = RssSampler(broker)
    got: list[tuple[str, int]] = []
    lock = threading.Lock()

    def handle(m) -> None:
        with lock:
            got.append((m.id, m.seq))

    with Consumer("orders", "billing", handle, **cluster.client_kwargs(credit=CREDIT)):
        wait_for(lambda: len(got) >= total, 300, f"{total} messages to be consumed")
        wait_for(lambda: broker.group_stats("orders", "billing")["depth"] == 0, 30, "the group to empty")
    drain_peak = sampler.stop()

    # held at most: the window waiting and the consumer's credit in flight, a read of each partition, two connections
    growth = 2 * per_connection(MAX_FRAME, MAX_OUTBUF) + WORK + PARTITIONS * READER \
        + (WINDOW + CREDIT) * (BODY + PER_MESSAGE)
    held = total * (BODY + PER_MESSAGE)  # what holding the backlog in memory costs by the same formula
    REPORTS.append(f"backlog on disk, {PARTITIONS} partitions: {total} messages of 1 KiB for a group with no "
                   f"consumer: RSS {r0 / MiB:.0f} -> {published_peak / MiB:.0f} MiB publishing; after kill -9 "
                   f"{r1 / MiB:.0f} -> {drain_peak / MiB:.0f} MiB draining; growth bound {growth / MiB:.0f} MiB "
                   f"(the backlog held in memory: {held / MiB:.0f} MiB)")
    assert growth < held / 2, "the bound is far below what holding the backlog in memory costs"
    assert published_peak - r0 <= growth, f"publishing grew RSS by {(published_peak - r0) / MiB:.0f} MiB"
    assert drain_peak - r1 <= growth, f"draining grew RSS by {(drain_peak - r1) / MiB:.0f} MiB"

    ids = [i for i, _ in got]
    assert len(ids) == total and set(ids) == set(published), "every message once, none lost"
    seqs = [s for _, s in got]
    assert {partition_of(s) for s in seqs} == set(range(PARTITIONS)), "every partition had a backlog"
    for pid in range(PARTITIONS):
        mine = [s for s in seqs if partition_of(s) == pid]
        assert mine == sorted(mine), f"partition {pid}'s messages in the order published"
    stats = broker.group_stats("orders", "billing")
    assert (stats["depth"], stats["in_flight"], stats["acked"], stats["on_disk"]) == (0, 0, total, 0)


def test_a_transaction_message_committed_while_partitions_are_on_disk_comes_after_its_partitions_backlog(cluster):
    """A prepared message (kept by the home partition, an old seq) committed while the group's backlog is on disk
    in both partitions stays owed across a kill -9 and comes once, after what its partition held before the
    commit; nothing else is lost or repeated."""
    cluster.standard("orders")
    cluster.pv.topic("orders", transactional=True, partitions=2, replication_factor=1)
    cluster.pv.binding("orders", "billing", APP)
    broker = cluster.broker("--no-trace", "--backlog-window-messages", "100")
    cluster.pv.placement("orders", 2, 1, [broker.node_id])
    wait_for(lambda: broker.stats()["topics"].get("orders", {}).get("store", {}).get("partitions") == [0, 1], 10,
             "the broker to hold both partitions")
    keys = {choose_partition(f"k{i}", 2, 0): f"k{i}" for i in range(20)}
    with Producer(**cluster.client_kwargs(send_timeout=60)) as producer:
        prepared = producer.prepare("orders", b"tx")
        before = [producer.send_many("orders", [Message(b"m", key=keys[n % 2])] * 100) for n in range(10)]
        assert broker.group_stats("orders", "billing")["on_disk"] >= 900
        producer.end_transaction(prepared, True)
        after = producer.send_many("orders", [Message(b"later", key=keys[0])] * 100)
    assert broker.group_stats("orders", "billing")["depth"] == 1_101
    broker.kill()
    broker.start()
    wait_for(lambda: broker.group_stats("orders", "billing").get("depth") == 1_101, 30, "the positions rebuilt")
    got: list[tuple[str, int]] = []
    lock = threading.Lock()

    def handle(m) -> None:
        with lock:
            got.append((m.id, m.seq))

    with Consumer("orders", "billing", handle, **cluster.client_kwargs(credit=50)):
        wait_for(lambda: len(got) >= 1_101, 60, "every message")
        wait_for(lambda: broker.group_stats("orders", "billing")["depth"] == 0, 30, "the group to empty")
    ids = [i for i, _ in got]
    assert sorted(ids) == sorted([*(i for batch in before for i in batch), prepared.message_id, *after])
    home = partition_of(next(s for i, s in got if i == prepared.message_id))
    mine = [i for i, s in got if partition_of(s) == home]
    before_home = [i for n, batch in enumerate(before) if n % 2 == home for i in batch]
    # owed from its commit: after its partition's earlier backlog (after a restart, from the end of the log)
    assert mine.index(prepared.message_id) >= len(before_home)
    assert len(ids) == len(set(ids)), "none twice"
