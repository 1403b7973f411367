"""Issue 20: a follower that missed a large part of the log catches up from the leader's segment files a chunk at a
time, and the leader's memory stays bounded meanwhile: it keeps only the newest batches in memory for followers
(before: 200,000 messages, 200 MiB of 1 KiB bodies), and reads and sends what a follower lacks while the follower
reads it (before: the whole log read, decoded and queued to the follower's connection at once)."""

from __future__ import annotations

import signal
import threading

from broker_core.client import Producer
from tests.broker.conftest import wait_for
from tests.broker.test_replication import follower_next_seq, held_ids, in_sync, replicated

MESSAGES = 120_000
BODY = 1024
MiB = 1024 * 1024


def test_a_follower_missing_most_of_the_log_catches_up_while_the_leaders_memory_stays_bounded(cluster):
    leader, follower = replicated(cluster, min_insync=1)
    wait_for(lambda: in_sync(leader) == 2, 20, "the follower in sync")
    follower.kill(signal.SIGKILL)
    before = leader.rss_bytes()
    print(f"leader RSS before: {before / MiB:.0f} MiB")
    with Producer(**cluster.client_kwargs(send_timeout=60)) as producer:
        sent = []
        for i in range(0, MESSAGES, 2_000):  # min_insync 1: the leader alone acknowledges
            sent += producer.send_many("orders", [b"%08d" % n + b"x" * (BODY - 8) for n in range(i, i + 2_000)])
    after_publishing = leader.rss_bytes()
    print(f"leader RSS after {MESSAGES} x {BODY} B published: {after_publishing / MiB:.0f} MiB")

    peak = [after_publishing]
    done = threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], leader.rss_bytes())
            done.wait(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        follower.start()
        wait_for(lambda: in_sync(leader) == 2, 60, "the restarted follower in sync again")
    finally:
        done.set()
        sampler.join()
    print(f"leader RSS peak while the follower caught up: {peak[0] / MiB:.0f} MiB")
    assert follower_next_seq(follower) == MESSAGES + 1
    assert "read from the log up to seq" in leader.log(), "the catch-up came from the leader's files"
    # (measured: +39 MiB publishing, +10 MiB catching up; before, +188 MiB publishing, and the follower was not
    # in sync again within 60 s)
    assert after_publishing - before < 80 * MiB, "the leader does not keep the log's bodies for followers"
    assert peak[0] - after_publishing < 32 * MiB, "the catch-up is read and sent a chunk at a time"
    leader.kill(signal.SIGKILL)  # the leader's disk is lost: the follower holds every acknowledged message
    assert set(sent) <= held_ids(follower.data_dir)
