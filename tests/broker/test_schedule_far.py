"""Delayed messages far in the future stay on disk (issue 21 item 3; docs/delay-messages.md "Memory").

A broker is sent thousands of messages due 1 to 30 days ahead, and a few due in seconds: the far ones stay in the
schedule log and its bucket index files (none of them in memory, the broker's RSS grows by far less than their
bodies; their index is one file per hour), the near ones come at their time. A kill -9 keeps every far one scheduled, still on disk; none of them is
delivered early, before or after the restart.
"""

from __future__ import annotations

import random
import signal
import time

from broker_core.client import Consumer, Message, Producer
from tests.broker.conftest import APP, REPORTS, wait_for
from tests.broker.test_delay import DueRecorder

MiB = 1024 * 1024
DAY_S = 86_400
FAR, NEAR = 20_000, 50
BODY = 2048


def delayed(broker) -> dict:
    topic = broker.stats()["topics"]["orders"]
    return {"scheduled": topic["scheduled"], **topic["delayed"]}


def test_far_future_messages_stay_on_disk_survive_kill_9_and_none_comes_early(cluster):
    cluster.standard("orders")
    cluster.pv.binding("orders", "billing", APP)
    broker = cluster.broker("--no-trace")
    rng = random.Random(21)
    with Producer(**cluster.client_kwargs(send_timeout=60)) as producer:
        producer.send("orders", b"warm-up", delay=DAY_S)  # the schedule store's folder and files made
        r0 = broker.rss_bytes()
        now = time.time()
        far = []
        for start in range(0, FAR, 500):
            far += producer.send_many("orders", [
                Message(b"%08d" % i + b"." * (BODY - 8), deliver_at=now + rng.uniform(DAY_S, 29.9 * DAY_S))
                for i in range(start, start + 500)])
        due_ms = int(time.time() * 1000) + 3_000
        near = producer.send_many("orders", [Message(b"soon %d" % i, deliver_at=due_ms / 1000) for i in range(NEAR)])
    grown = broker.rss_bytes() - r0
    figures = delayed(broker)
    assert figures["scheduled"] == FAR + NEAR + 1, figures
    assert figures["in_memory"] <= NEAR, f"only the bucket near now is in memory: {figures}"
    assert figures["store"]["buckets"] > 1_000, "the far messages are spread over a month of one-minute buckets"
    schedule_dir = broker.data_dir / "topics" / "orders" / "schedule"
    on_disk = sum(p.stat().st_size for p in schedule_dir.glob("*.slog"))
    payload = FAR * BODY
    REPORTS.append(f"delay, far future: {FAR} messages of {BODY} B due 1-30 days ahead ({payload / MiB:.0f} MiB of "
                   f"bodies, {on_disk / MiB:.0f} MiB of schedule log): broker RSS grew {grown / MiB:.1f} MiB; "
                   f"{figures['in_memory']} entries in memory, {figures['store']['buckets']} buckets counted, "
                   f"{figures['store']['hour_files']} hour index files")
    assert on_disk >= payload, "the bodies are in the schedule log"
    hour_files, minute_files = len(list(schedule_dir.glob("*.hidx"))), len(list(schedule_dir.glob("*.idx")))
    assert 0 < hour_files <= 30 * 24 + 1 and minute_files <= 2, "indexed by hour, but for the minute due now"
    assert grown < payload / 2, f"the broker's RSS grew by {grown / MiB:.1f} MiB for {payload / MiB:.0f} MiB of bodies"

    received = DueRecorder()
    with Consumer("orders", "billing", received, **cluster.client_kwargs()):
        wait_for(lambda: received.count() == NEAR, 30, "the messages due in 3 s")
        wait_for(lambda: delayed(broker)["scheduled"] == FAR + 1, 10, "the near ones to leave the schedule")
        # their acks written before the kill: an ack the broker had not yet written may be redelivered (at least once)
        wait_for(lambda: broker.group_stats("orders", "billing")["acked"] == NEAR, 10, "the near ones acked")
        wait_for(lambda: broker.stats()["topics"]["orders"]["store"]["finishes_unwritten"] == 0, 10,
                 "the acks written")
    assert set(received.got) == set(near), "only the near ones came"
    assert all(got_ms >= due_ms and carried == due_ms for got_ms, carried in received.got.values()), "none early"

    broker.kill(signal.SIGKILL)
    broker.start()
    figures = delayed(broker)
    assert figures["scheduled"] == FAR + 1 and figures["in_memory"] == 0, figures
    # a marker due in 2 s: once it is delivered, anything wrongly due before it would have come too
    with Producer(**cluster.client_kwargs()) as producer:
        marker_due = int(time.time() * 1000) + 2_000
        marker = producer.send("orders", b"marker", deliver_at=marker_due / 1000)
    after = DueRecorder()
    with Consumer("orders", "billing", after, **cluster.client_kwargs()):
        wait_for(lambda: marker in after.got, 30, "the marker after the restart")
        wait_for(lambda: delayed(broker)["scheduled"] == FAR + 1, 10, "the marker to leave the schedule")
    assert list(after.got) == [marker], "no far-future message came early after the restart"
    assert after.got[marker][0] >= marker_due
    assert delayed(broker)["delivered"] == 1
