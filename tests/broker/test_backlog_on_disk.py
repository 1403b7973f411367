"""A group's backlog stays on disk (issue 20 item 3; broker_core/README.md "Memory bound").

A group with no consumer is sent a backlog far larger than its window of messages in memory: the broker's RSS
stays within the documented bound (which counts the window, not the backlog), then one consumer drains every
message once, in the order published. A broker killed with SIGKILL in the middle of a drain comes back with the
group's position rebuilt from its ack files: nothing lost, and only what was not acknowledged comes again.
"""

from __future__ import annotations

from broker_core.client import Consumer, Message, Producer
from broker_core.protocol import M_ID, TX_COMMITTED
from broker_core.storage.owed import SeqRuns
from tests.broker.conftest import APP, REPORTS, SECRET, wait_for
from tests.broker.helpers import RawConsumer, Received
from tests.broker.test_memory_bounds import PER_MESSAGE, WORK, RssSampler, idle_rss, per_connection
from tests.broker.tx_helpers import TOKEN, admin

KiB, MiB = 1024, 1024 * 1024
BODY = KiB
WINDOW = 10_000  # the broker's default backlog_window_messages (16 MiB of 1 KiB bodies allow more)
CREDIT = 1_000
MAX_FRAME, MAX_OUTBUF = 16 * MiB, 4 * MiB  # the defaults
READER = 4 * MiB  # a read's buffers: a chunk of the log and the record being parsed


def publish(producer: Producer, topic: str, count: int, batch: int = 1_000) -> list[str]:
    ids: list[str] = []
    for start in range(0, count, batch):
        ids += producer.send_many(topic, [Message(f"{i:08d}".encode().ljust(BODY, b"."))
                                          for i in range(start, min(count, start + batch))])
    return ids


def drain(cluster, topic: str, group: str, count: int) -> list[str]:
    got = Received()
    with Consumer(topic, group, got.handler("c"), **cluster.client_kwargs(credit=CREDIT)):
        wait_for(lambda: got.count("c") >= count, 300, f"{count} messages to be consumed")
        wait_for(lambda: cluster.brokers[0].group_stats(topic, group)["depth"] == 0, 30, "the group to empty")
    return got.ids("c")


def test_a_large_backlog_stays_on_disk_within_the_memory_bound_and_drains_exactly_in_order(cluster):
    total = 300_000
    cluster.standard("orders")
    cluster.pv.binding("orders", "billing", APP)
    broker = cluster.broker("--no-trace")
    r0 = idle_rss(broker)
    sampler = RssSampler(broker)
    with Producer(**cluster.client_kwargs(send_timeout=60)) as producer:
        published = publish(producer, "orders", total)
    figures = broker.group_stats("orders", "billing")
    published_peak = sampler.peak
    assert (figures["depth"], figures["consumers"]) == (total, 0), figures
    assert figures["on_disk"] >= total - WINDOW, f"the backlog past the window is on disk: {figures}"
    assert figures["oldest_age_seconds"] > 0

    received = drain(cluster, "orders", "billing", total)
    peak = sampler.stop()
    # held in memory at most: the window waiting and the consumer's credit in flight, each a body and its objects
    bound = r0 + 2 * per_connection(MAX_FRAME, MAX_OUTBUF) + WORK + READER + (WINDOW + CREDIT) * (BODY + PER_MESSAGE)
    held_before = total * (BODY + PER_MESSAGE)  # what holding the backlog in memory costs by the same formula
    REPORTS.append(f"backlog on disk: {total} messages of 1 KiB for a group with no consumer: RSS {r0 / MiB:.0f} MiB "
                   f"idle -> {published_peak / MiB:.0f} MiB once published, peak {peak / MiB:.0f} MiB with the drain; "
                   f"bound {bound / MiB:.0f} MiB (the backlog held in memory: {held_before / MiB:.0f} MiB)")
    assert bound < held_before / 2, "the bound is far below what holding the backlog in memory costs"
    assert peak <= bound, f"peak RSS {peak / MiB:.0f} MiB over the bound of {bound / MiB:.0f} MiB"
    assert len(received) == total and received == published, "every message once, in the order published"
    stats = broker.group_stats("orders", "billing")
    assert (stats["depth"], stats["in_flight"], stats["acked"], stats["on_disk"]) == (0, 0, total, 0)


def test_kill_9_in_the_middle_of_a_drain_loses_nothing_and_repeats_only_what_was_not_acknowledged(cluster):
    total, acked_target = 60_000, 25_000
    cluster.standard("orders")
    cluster.pv.binding("orders", "billing", APP)
    # a small window: the drain reads the backlog back from the log many times over
    broker = cluster.broker("--no-trace", "--backlog-window-messages", "1000")
    with Producer(**cluster.client_kwargs(send_timeout=60)) as producer:
        published = publish(producer, "orders", total)
    assert broker.group_stats("orders", "billing")["on_disk"] >= total - 1_000

    raw = RawConsumer(broker.address, APP, SECRET, "orders", "billing", credit=500)
    raw.start()
    acked = 0
    try:
        while acked < acked_target:  # ack in delivery order, up to the target
            wait_for(lambda n=acked: len(raw.deliveries) > n, 30, "more deliveries")
            upto = min(len(raw.deliveries), acked_target)
            raw.ack(seq for seq, _, _, _ in raw.deliveries[acked:upto])
            acked = upto
        wait_for(lambda: broker.group_stats("orders", "billing")["acked"] == acked_target, 20,
                 "the broker to take every ack")
        wait_for(lambda: len(raw.deliveries) > acked_target, 20, "deliveries in flight past the acked ones")
        # the ack records are written by the store's next flush job (none buffered, no job running)
        wait_for(lambda: broker.stats()["topics"]["orders"]["store"]["finishes_unwritten"] == 0, 20,
                 "the acks to be written")
        delivered_before = [fields[M_ID] for _, _, fields, _ in raw.deliveries]
        broker.kill()
    finally:
        raw.close()
    assert delivered_before[:acked_target] == published[:acked_target]
    in_flight_at_kill = len(delivered_before) - acked_target

    broker.start()
    figures = broker.group_stats("orders", "billing")
    assert figures["depth"] == total - acked_target, figures  # rebuilt from the ack files, without reading the backlog
    received = drain(cluster, "orders", "billing", total - acked_target)
    REPORTS.append(f"backlog on disk, kill -9 mid-drain: {total} published, {acked_target} acked before the kill, "
                   f"{in_flight_at_kill} in flight unacknowledged; after the restart {len(received)} delivered, "
                   f"lost {len(set(published) - set(delivered_before[:acked_target]) - set(received))}")
    # nothing lost, nothing acknowledged comes again, the unacknowledged ones come first, all in published order
    assert received == published[acked_target:]
    assert not set(received) & set(published[:acked_target])


def test_group_reset_skips_a_backlog_on_disk(cluster):
    """A position reset finishes what the group owes on disk too (read back in batches), and it stays skipped."""
    cluster.standard("orders")
    cluster.pv.binding("orders", "billing", APP)
    broker = cluster.broker("--no-trace", "--backlog-window-messages", "100", admin_token=TOKEN)
    with Producer(**cluster.client_kwargs(send_timeout=60)) as producer:
        publish(producer, "orders", 5_000)
    assert broker.group_stats("orders", "billing")["on_disk"] >= 4_900
    status, answer = admin(broker, "POST", "/admin/group/reset", {"topic": "orders", "group": "billing"})
    assert (status, answer["skipped"]) == (200, 5_000), answer
    assert broker.group_stats("orders", "billing")["depth"] == 0
    with Producer(**cluster.client_kwargs(send_timeout=60)) as producer:
        after = publish(producer, "orders", 300)
    broker.restart()
    assert broker.group_stats("orders", "billing")["depth"] == 300
    assert drain(cluster, "orders", "billing", 300) == after


def test_a_broadcast_group_reads_its_backlog_back_for_every_consumer(cluster):
    """Two consumers of a broadcast group that hold their deliveries unacked: the group's window fills, the rest
    of what is published stays on disk; as they ack, each gets every message once, in the order published."""
    total = 3_000
    cluster.standard("orders")
    cluster.pv.binding("orders", "feed", APP, mode="broadcast")
    broker = cluster.broker("--no-trace", "--backlog-window-messages", "100")
    consumers = [RawConsumer(broker.address, APP, SECRET, "orders", "feed", credit=50) for _ in range(2)]
    for raw in consumers:
        raw.start()
    try:
        wait_for(lambda: broker.group_stats("orders", "feed").get("consumers") == 2, 10, "two consumers")
        with Producer(**cluster.client_kwargs(send_timeout=60)) as producer:
            published = publish(producer, "orders", total, batch=100)
        assert broker.group_stats("orders", "feed")["on_disk"] >= total - 200, "past the window: on disk"
        acked = [0, 0]

        def ack_all() -> bool:
            for i, raw in enumerate(consumers):
                batch = raw.deliveries[acked[i]:]  # (more may arrive meanwhile: the next round acks them)
                if batch:
                    raw.ack(seq for seq, _, _, _ in batch)
                    acked[i] += len(batch)
            return acked == [total, total]

        wait_for(ack_all, 120, "both consumers to get every message")
        wait_for(lambda: broker.group_stats("orders", "feed")["depth"] == 0, 20, "the group to empty")
    finally:
        for raw in consumers:
            raw.close()
    for raw in consumers:
        assert [fields[M_ID] for _, _, fields, _ in raw.deliveries] == published
    assert broker.stats()["topics"]["orders"]["held"] == 0


def test_seq_runs_keep_finished_seqs_compact():
    runs = SeqRuns()
    for seq in [*range(10, 20), *range(21, 30), 40]:
        runs.add(seq)
    assert runs.runs() == 3 and len(runs) == 20
    assert 10 in runs and 29 in runs and 20 not in runs and 40 in runs and 41 not in runs
    runs.drop_below(25)
    assert runs.runs() == 2 and 24 not in runs and 25 in runs and len(runs) == 6


def test_a_message_committed_while_the_backlog_is_on_disk_is_owed_from_its_commit_also_after_a_restart(cluster):
    """A prepared message (an old seq) committed while its group's backlog is on disk comes after what was
    published before the commit and before what was published after it; a restart keeps it owed."""
    cluster.standard("orders")
    cluster.pv.topic("orders", transactional=True)
    cluster.pv.binding("orders", "billing", APP)
    broker = cluster.broker("--no-trace", "--backlog-window-messages", "100")
    with Producer(**cluster.client_kwargs(send_timeout=60)) as producer:
        prepared = producer.prepare("orders", b"tx")
        before = publish(producer, "orders", 1_000, batch=100)
        assert broker.group_stats("orders", "billing")["on_disk"] >= 900
        assert producer.end_transaction(prepared, True) == TX_COMMITTED
        after = publish(producer, "orders", 500, batch=100)
    assert broker.group_stats("orders", "billing")["depth"] == 1_501
    assert drain(cluster, "orders", "billing", 1_501) == [*before, prepared.message_id, *after]

    with Producer(**cluster.client_kwargs(send_timeout=60)) as producer:
        prepared = producer.prepare("orders", b"tx 2")
        more = publish(producer, "orders", 300, batch=100)
        assert producer.end_transaction(prepared, True) == TX_COMMITTED
    broker.kill()
    broker.start()
    assert broker.group_stats("orders", "billing")["depth"] == 301
    assert sorted(drain(cluster, "orders", "billing", 301)) == sorted([*more, prepared.message_id])
