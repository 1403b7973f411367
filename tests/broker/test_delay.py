"""Delayed messages (issue 21 item 3) with real broker processes: durable scheduling, none early, none lost
across a SIGKILL, refusals of transactional and ordered topics and of bad delays."""

from __future__ import annotations

import asyncio
import random
import signal
import statistics
import threading
import time

import pytest

from broker_core import protocol as p
from broker_core.client import AsyncProducer, BrokerError, Consumer, InvalidDelay, Message, Producer
from tests.broker.conftest import APP, REPORTS, wait_for

COUNT = 10_000


class DueRecorder:
    """What a consumer received: message id -> (receive time in Unix ms, the due time the message carries)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.got: dict[str, tuple[float, int]] = {}
        self.repeats = 0

    def __call__(self, m) -> None:
        now_ms = time.time() * 1000
        with self.lock:
            if m.id in self.got:
                self.repeats += 1
            else:
                self.got[m.id] = (now_ms, m.deliver_at_ms)

    def count(self) -> int:
        with self.lock:
            return len(self.got)


def scheduled_metric(cluster, broker, topic: str) -> float:
    """The broker's Prometheus gauge of the topic's scheduled messages."""
    prefix = f'switchyard_topic_scheduled{{cluster="{cluster.name}",node="{broker.node_id}",topic="{topic}"}} '
    lines = [line for line in broker.http("/metrics").decode().splitlines() if line.startswith(prefix)]
    assert len(lines) == 1, f"no scheduled gauge for {topic}"
    return float(lines[0][len(prefix):])


def test_10000_delayed_messages_across_a_sigkill_all_delivered_none_early(cluster):
    """10,000 messages due 1-60 s after they are sent (so they span two or three one-minute buckets, each loaded
    ahead of its start); the broker is killed with SIGKILL 20 s in and started again 3 s later. Every message is
    delivered, none before the due time the producer asked; the lateness is reported."""
    cluster.standard("orders")
    cluster.pv.binding("orders", "billing", APP)
    broker = cluster.broker()
    rng = random.Random(21)
    asked: dict[str, int] = {}  # message id -> the due time asked (Unix ms)

    async def produce() -> None:
        producer = AsyncProducer(**cluster.client_kwargs())
        await producer.connect("orders")
        for first in range(0, COUNT, 500):
            # due 1-60 s after the batch is sent: a due time already past when a message is sent means "at once"
            # (due 0), which a slow host producing the 10,000 for over a second used to give the first batches
            sent_ms = int(time.time() * 1000)
            messages = []
            for i in range(first, first + 500):
                due_ms = sent_ms + rng.randrange(1_000, 60_001)
                messages.append(Message(f"delayed {i}".encode(), id=f"d-{i:05d}", deliver_at=due_ms / 1000))
                asked[f"d-{i:05d}"] = due_ms
            await producer.send_many("orders", messages)
        await producer.close()

    asyncio.run(produce())
    sent_at = time.monotonic()
    assert broker.stats()["topics"]["orders"]["scheduled"] > 0
    received = DueRecorder()
    with Consumer("orders", "billing", received, **cluster.client_kwargs()):
        wait_for(lambda: time.monotonic() - sent_at >= 20, 30, "20 s into the delays")
        before_kill = received.count()
        broker.kill(signal.SIGKILL)
        time.sleep(3)  # messages come due while the broker is down: they are delivered when it is back
        broker.start()
        back_ms = time.time() * 1000
        wait_for(lambda: received.count() == COUNT, 120, f"all {COUNT} delayed messages delivered")
    early = {i: (got, asked[i]) for i, (got, _) in received.got.items() if got < asked[i]}
    assert not early, f"{len(early)} delivered before their due time, e.g. {list(early.items())[:3]}"
    assert set(received.got) == set(asked)
    changed = {i: (due, asked[i]) for i, (_, due) in received.got.items() if due != asked[i]}
    assert not changed, (f"the due time travels with the message; {len(changed)} carry another (got, asked): "
                         f"{list(changed.items())[:3]}")
    lateness = sorted(got - asked[i] for i, (got, _) in received.got.items())
    quantile = statistics.quantiles(lateness, n=100)
    after = sorted(got - asked[i] for i, (got, _) in received.got.items() if asked[i] >= back_ms)
    q_after = statistics.quantiles(after, n=100)
    REPORTS.append(f"delay/SIGKILL: {COUNT} delayed 1-60 s, {before_kill} delivered before the kill, "
                   f"{received.repeats} delivered twice; lateness of all: p50 {quantile[49]:.1f} ms, p99 "
                   f"{quantile[98]:.1f} ms, max {lateness[-1]:.1f} ms (those due while the broker was down or starting "
                   f"are late by that time); of the {len(after)} due after it was back: p50 {q_after[49]:.1f} ms, "
                   f"p99 {q_after[98]:.1f} ms, max {after[-1]:.1f} ms")
    wait_for(lambda: broker.stats()["topics"]["orders"]["scheduled"] == 0, 10, "the schedule to empty")
    assert scheduled_metric(cluster, broker, "orders") == 0.0


def test_a_scheduled_message_survives_a_restart_before_it_is_due(cluster):
    cluster.standard("orders")
    cluster.pv.binding("orders", "billing", APP)
    broker = cluster.broker()
    with Producer(**cluster.client_kwargs()) as producer:
        due_ms = int(time.time() * 1000) + 8_000
        message_id = producer.send("orders", b"later", deliver_at=due_ms / 1000)
    stats = broker.stats()["topics"]["orders"]
    assert stats["scheduled"] == 1 and stats["published"] == 0
    broker.kill(signal.SIGKILL)
    broker.start()
    assert broker.stats()["topics"]["orders"]["scheduled"] == 1
    assert scheduled_metric(cluster, broker, "orders") == 1.0
    received = DueRecorder()
    with Consumer("orders", "billing", received, **cluster.client_kwargs()):
        wait_for(lambda: received.count() == 1, 30, "the delayed message after the restart")
    got_ms, carried = received.got[message_id]
    assert got_ms >= due_ms and carried == due_ms
    wait_for(lambda: broker.stats()["topics"]["orders"]["scheduled"] == 0, 10, "the schedule to empty")


def test_delay_on_the_memory_level_and_mixed_batches(cluster):
    """The memory level schedules in RAM; a batch of delayed and immediate messages stores both parts."""
    cluster.standard("orders")
    cluster.pv.topic("orders", storage="memory", revision=2)
    cluster.pv.binding("orders", "billing", APP)
    cluster.broker()
    received = DueRecorder()
    with Consumer("orders", "billing", received, **cluster.client_kwargs()):
        with Producer(**cluster.client_kwargs()) as producer:
            start_ms = int(time.time() * 1000)
            ids = producer.send_many("orders", [Message(b"now"), Message(b"in 2 s", delay=2),
                                                Message(b"in 1 s", delay=1.0)])
        wait_for(lambda: received.count() == 3, 20, "the three messages")
    assert received.got[ids[0]][1] == 0  # not delayed
    for i, delay_ms in ((1, 2000), (2, 1000)):
        got_ms, due_ms = received.got[ids[i]]
        assert due_ms >= start_ms + delay_ms and got_ms >= due_ms


def test_transactional_and_ordered_topics_refuse_delays_and_bad_delays_are_refused(cluster):
    cluster.standard("orders")
    cluster.pv.topic("payments", transactional=True)
    cluster.pv.grant("payments", APP)
    cluster.pv.topic("ledger", ordered=True)
    cluster.pv.grant("ledger", APP)
    cluster.pv.binding("orders", "billing", APP)
    broker = cluster.broker()
    with Producer(**cluster.client_kwargs()) as producer:
        for topic in ("payments", "ledger"):
            with pytest.raises(BrokerError) as refused:
                producer.send(topic, b"x", key="k1", delay=5)  # a key, which the ordered topic requires first
            assert refused.value.code == p.E_DELAY_NOT_SUPPORTED
            assert "delayed messages are refused" in refused.value.message
            producer.send(topic, b"x", key="k1")  # without a delay they are taken
        for bad, says in (({"delay": -1}, "0 or more"), ({"delay": 31 * 86400}, "at most 30 days"),
                          ({"delay": 5, "deliver_at": time.time() + 5}, "not both"), ({"delay": "5"}, "number"),
                          ({"delay": float("nan")}, "finite")):
            with pytest.raises(InvalidDelay, match=says):
                producer.send("orders", b"x", **bad)
    # the broker checks too (a client that skips the SDK's check)
    async def raw_too_far() -> BrokerError:
        producer = AsyncProducer(**cluster.client_kwargs())
        await producer.connect("orders")
        link = producer._topic_links["orders"]
        future = asyncio.get_running_loop().create_future()
        now_ms = int(time.time() * 1000)
        link.submit_one("orders", [producer.new_id(), "default", None, None, {}, b"x", 0, 0, 0, now_ms,
                                   now_ms + 40 * 86_400_000], future)
        try:
            await future
        except BrokerError as exc:
            return exc
        finally:
            await producer.close()
        raise AssertionError("a message due in 40 days was accepted")

    refused = asyncio.run(raw_too_far())
    assert refused.code == p.E_INVALID and "at most 30 days" in refused.message
    topics = broker.stats()["topics"]
    assert "orders" not in topics  # every publish on it was refused: the broker never even opened it
    for topic in ("payments", "ledger"):  # the plain send was stored, the delayed one was not
        assert topics[topic]["published"] == 1 and topics[topic]["scheduled"] == 0
