"""Issue 21, item 2 and its done-when: an ordered topic rescaled while it is used. 100 keys × 1,000 messages, a group
of three consumer processes; mid-stream the topic is split from 2 to 4 physical partitions, later merged back to 2,
a consumer is killed with SIGKILL and a broker restarted. Per key, the sequence each consumer sees never goes
backwards (a message may repeat right after itself: it was not acknowledged), and nothing is lost. Real broker
processes over TCP, a real ZooKeeper; the rescales are written as the control plane writes them
(`layout.rescale`, and a merge only once the split drained)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict

from broker_core.client import Message, Producer
from broker_core.client.errors import SwitchyardError
from broker_core.layout import LAYOUT
from tests.broker.conftest import APP, REPORTS, ROOT, SECRET, wait_for
from tests.broker.test_ordered import check_key_order

KEYS = [f"customer-{i}" for i in range(100)]
PER_KEY = 1000


class ConsumerProc:
    """A consumer process (tests/broker/ordered_consumer_proc.py); what it handled is read into `seen`."""

    def __init__(self, cluster, name: str, seen: list, lock: threading.Lock):
        self.name = name
        env = {**os.environ, "SWITCHYARD_TEST_SECRET": SECRET}
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.broker.ordered_consumer_proc", cluster.zk,
                                      str(cluster.cache_dir), "orders", "billing", APP, "50", "0.0002"], cwd=ROOT, env=env,
                                     stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout.readline().strip() == "subscribed"
        self.thread = threading.Thread(target=self._read, args=(seen, lock), daemon=True)
        self.thread.start()

    def _read(self, seen: list, lock: threading.Lock) -> None:
        for line in self.proc.stdout:
            parts = line.split()
            if len(parts) == 3 and line.endswith("\n"):  # (a line cut by SIGKILL is not a message handled)
                with lock:
                    seen.append((float(parts[0]), self.name, parts[1], int(parts[2])))

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)


def per_consumer_repeats(seen: list) -> int:
    """Per consumer and key, in the order the consumer handled them, each index is higher than the one before or the
    same (a repeat: it was delivered again); returns the repeats."""
    last: dict[tuple[str, str], int] = {}
    repeats = 0
    for _, name, key, index in sorted(seen):
        before = last.get((name, key), -1)
        assert index >= before, f"consumer {name}, key {key}: {index} after {before}"
        repeats += index == before
        last[name, key] = index
    return repeats


def test_order_survives_a_split_a_merge_a_killed_consumer_and_a_restarted_broker(cluster):
    cluster.standard("orders")
    cluster.pv.topic("orders", ordered=True, partitions=2, replication_factor=1)
    cluster.pv.binding("orders", "billing", APP)
    nodes = [cluster.broker() for _ in range(3)]
    ids = [b.node_id for b in nodes]
    doc = cluster.pv.placement("orders", 2, 1, ids)
    assert "mapping" not in doc
    lock = threading.Lock()
    seen: list[tuple[float, str, str, int]] = []
    consumers = [ConsumerProc(cluster, f"c{i}", seen, lock) for i in range(3)]
    drained = cluster.chroot + LAYOUT.drained("orders", 1)
    try:
        for b in nodes:
            wait_for(lambda b=b: b.group_stats("orders", "billing").get("consumers") == 3, 15, "3 consumers on each")
        events = []
        retried = 0
        started = time.monotonic()
        with Producer(**cluster.client_kwargs()) as producer:
            for n in range(PER_KEY):
                if n == 150:
                    doc = cluster.pv.placement("orders", 4, 1, ids)
                    assert doc["mapping"] == {"version": 1, "partitions": 4, "previous": 2}
                    assert len({part["replicas"][0] for part in doc["partitions"]}) == 3, "spread over 3 brokers"
                    events.append(("split 2 -> 4", n, time.monotonic() - started))
                elif n == 350:  # the busiest consumer: it holds partitions (and messages in flight)
                    with lock:
                        counts = defaultdict(int, {c.name: 0 for c in consumers})
                        for _, name, _, _ in seen:
                            counts[name] += 1
                    victim = next(c for c in consumers if c.name == max(counts, key=counts.get))
                    victim.kill()
                    killed_at = time.monotonic()
                    events.append((f"consumer {victim.name} SIGKILLed", n, killed_at - started))
                elif n == 500:
                    # the control plane writes the next version only once every group drained this one
                    wait_for(lambda: {"0-billing", "1-billing"} <= set(cluster.zk_client.get_children(drained)),
                             60, "the split's old partitions drained")
                    doc = cluster.pv.placement("orders", 2, 1, ids)
                    assert doc["mapping"] == {"version": 2, "partitions": 2, "previous": 4}
                    assert len(doc["partitions"]) == 4, "merged-away partitions stay placed until they are empty"
                    events.append(("merge 4 -> 2", n, time.monotonic() - started))
                elif n == 700:
                    restarted = nodes[int(doc["partitions"][0]["replicas"][0].rsplit("b", 1)[1])]
                    restarted.stop()
                    restarted.start()
                    events.append((f"broker {restarted.node_id} restarted", n, time.monotonic() - started))
                batch = [Message(f"{k}:{n}".encode(), key=k) for k in KEYS]
                for _attempt in range(100):  # a key's next message only once its last one is acknowledged
                    try:
                        producer.send_many("orders", batch)
                        break
                    except SwitchyardError:
                        retried += 1
                        time.sleep(0.1)
                else:
                    raise AssertionError(f"round {n} not acknowledged")
            stale_mapping = sum(link["stale_mapping"] for link in producer.stats().values())

        def handled() -> int:
            with lock:
                return len({(key, index) for _, _, key, index in seen})

        wait_for(lambda: handled() == len(KEYS) * PER_KEY, 120, "every message handled")
        wait_for(lambda: {"2-billing", "3-billing"} <= set(
            cluster.zk_client.get_children(cluster.chroot + LAYOUT.drained("orders", 2))), 30, "the merge drained")
        elapsed = time.monotonic() - started
    finally:
        for c in consumers:
            c.kill()
    with lock:
        seen = list(seen)
    repeats = per_consumer_repeats(seen)
    merged = [(t, key, index) for t, _, key, index in seen]
    merged_repeats = check_key_order(merged, {k: PER_KEY for k in KEYS})  # across consumers too: 0 lost
    by_consumer = defaultdict(int)
    for _, name, _, _ in seen:
        by_consumer[name] += 1
    after_kill = {name for t, name, _, _ in seen if t > killed_at}
    assert by_consumer[victim.name] and victim.name not in after_kill and len(after_kill) == 2, \
        f"the survivors took the killed consumer's partitions: {dict(by_consumer)}, after the kill {after_kill}"
    REPORTS.append(f"ordered rescale: {len(KEYS)} keys x {PER_KEY}, {len(seen)} handled in {elapsed:.1f}s "
                   f"({dict(by_consumer)}); repeats per consumer {repeats}, across consumers {merged_repeats}; "
                   f"rounds retried {retried}; stale_mapping {stale_mapping}; events "
                   + "; ".join(f"{what} at round {n} ({t:.1f}s)" for what, n, t in events))
