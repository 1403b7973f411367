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

from broker_core.client import Consumer, Message, Producer
from broker_core.client.errors import SwitchyardError
from broker_core.layout import LAYOUT
from tests.broker.conftest import APP, REPORTS, ROOT, SECRET, wait_for
from tests.broker.test_failover import SECRET_VAR
from tests.broker.test_failover import state as partition_state
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


def wait_handled(done, nodes) -> None:
    """Wait until every message was handled; else fail with what each broker's group says (its barrier, too)."""
    try:
        wait_for(done, 90, "every message handled")
    except AssertionError as exc:
        groups = {b.node_id: b.group_stats("orders", "billing") for b in nodes if b.proc.poll() is None}
        raise AssertionError(f"{exc}; the group on each broker: {groups}") from None


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

        wait_handled(lambda: handled() == len(KEYS) * PER_KEY, nodes)
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


def test_a_pipelining_producer_keeps_each_key_in_order_across_a_split(cluster):
    """The SDK sends a key's messages in order although many are in flight when the mapping changes: what is in
    flight to an old partition is answered (stored, or refused `stale_mapping` and queued again first) before
    anything of the topic goes under the new mapping."""
    cluster.standard("orders")
    cluster.pv.topic("orders", ordered=True, partitions=2, replication_factor=1)
    cluster.pv.binding("orders", "billing", APP)
    nodes = [cluster.broker() for _ in range(3)]
    ids = [b.node_id for b in nodes]
    cluster.pv.placement("orders", 2, 1, ids)
    keys, per_key = [f"k{i}" for i in range(20)], 1500
    lock = threading.Lock()
    seen: list[tuple[float, str, int]] = []

    def handle(m):
        key, index = m.body.decode().split(":")
        with lock:
            seen.append((time.monotonic(), key, int(index)))

    consumer = Consumer("orders", "billing", handle, **cluster.client_kwargs(credit=200))
    consumer.start()
    try:
        with Producer(**cluster.client_kwargs()) as producer:
            futures = []
            for n in range(per_key):
                if n == per_key // 3:
                    cluster.pv.placement("orders", 4, 1, ids)
                futures += [producer.send_async("orders", f"{k}:{n}".encode(), key=k) for k in keys]
            for f in futures:
                f.result(60)
            stale = sum(link["stale_mapping"] for link in producer.stats().values())
        wait_handled(lambda: len({(k, i) for _, k, i in seen}) == len(keys) * per_key, nodes)
    finally:
        consumer.stop()
    with lock:
        repeats = check_key_order(list(seen), {k: per_key for k in keys})
    REPORTS.append(f"pipelined producer across a split: {len(keys)} keys x {per_key}, stale_mapping refusals {stale}, "
                   f"repeats {repeats}")


def test_a_partition_moved_to_another_broker_keeps_each_key_in_order(cluster):
    """Item 2's other rescale: partitions moved to other brokers (replication factor 2, the leader of partition 0
    taken off it mid-stream, as a rebalance's last phase does). Its follower takes over, and the broker it left stops
    delivering what it held (before, it went on: ~2,800 of 20,000 delivered twice, by two brokers at once); each
    key's messages are first handled in publish order, nothing is lost, and what is delivered again is counted."""
    secret = cluster.state / "cluster-secret"
    secret.write_text(os.urandom(32).hex())
    secret.chmod(0o600)
    cluster.standard("orders")
    cluster.pv.meta(min_insync=2)
    cluster.pv.topic("orders", ordered=True, partitions=2, replication_factor=2)
    cluster.pv.binding("orders", "billing", APP)
    nodes = [cluster.broker("--replica-lag-timeout-ms", "1000", env={SECRET_VAR: str(secret)}) for _ in range(3)]
    doc = cluster.pv.placement("orders", 2, 2, [nodes[0].node_id, nodes[1].node_id])
    for pid in range(2):
        wait_for(lambda pid=pid: partition_state(cluster, pid)["leader_epoch"] >= 1
                 and len(partition_state(cluster, pid)["isr"]) == 2, 20, f"partition {pid} led and in sync")
    leader = partition_state(cluster, 0)["leader"]
    keys, per_key = [f"k{i}" for i in range(50)], 400
    lock = threading.Lock()
    seen: list[tuple[float, str, str, int]] = []

    def handler(name):
        def handle(m):
            key, index = m.body.decode().split(":")
            with lock:
                seen.append((time.monotonic(), name, key, int(index)))
            time.sleep(0.0002)
        return handle

    consumers = [Consumer("orders", "billing", handler(f"c{i}"), **cluster.client_kwargs(credit=50)) for i in range(2)]
    for c in consumers:
        c.start()
    try:
        with Producer(**cluster.client_kwargs()) as producer:
            for n in range(per_key):
                if n == per_key // 3:  # partition 0's leader leaves it: the third broker comes in its place
                    moved = cluster.pv.placement("orders", 2, 2, [b.node_id for b in nodes if b.node_id != leader])
                    assert all(leader not in part["replicas"] for part in moved["partitions"]), moved
                for _attempt in range(100):
                    try:
                        producer.send_many("orders", [Message(f"{k}:{n}".encode(), key=k) for k in keys])
                        break
                    except SwitchyardError:
                        time.sleep(0.1)
        wait_handled(lambda: len({(k, i) for _, _, k, i in seen}) == len(keys) * per_key, nodes)
    finally:
        for c in consumers:
            c.stop()
    assert partition_state(cluster, 0)["leader"] != leader
    with lock:
        seen = list(seen)
    # each key's messages are first handled in publish order, across consumers (the broker the partition left stops
    # delivering what it held; its new leader delivers again what was in flight, and what was acknowledged on the
    # old leader after its last acks reached the follower: at least once)
    first: dict[str, list[int]] = defaultdict(list)
    handled: set[tuple[str, int]] = set()
    for _, _, key, index in sorted(seen):
        if (key, index) not in handled:
            handled.add((key, index))
            first[key].append(index)
    assert all(first[k] == list(range(per_key)) for k in keys), \
        next(f"key {k}: first handled {first[k][:60]}" for k in keys if first[k] != list(range(per_key)))
    again = [(name, key, index) for _, name, key, index in sorted(seen)]
    REPORTS.append(f"partition moved off its leader: {len(keys)} keys x {per_key}, {len(seen)} handled "
                   f"({len(seen) - len(handled)} delivered again, {len(again) - len(set(again))} of them to the same "
                   f"consumer); placement epoch {doc['epoch']} -> {moved['epoch']}")
