"""Replicated delayed messages (issue 20): what keeping a replicated topic's schedule on two replicas costs.

    .venv/bin/python bench/delay_replication_bench.py [--messages 100000]

Two brokers on ports P and P+2 (P = $SWITCHYARD_BENCH_PORT or 27580; ZooKeeper $SWITCHYARD_ZK or one started on
P+12), topic `later` of one partition, replication factor 2, min_insync 1, fsync group commit, no trace.

1. send: `--messages` 1 KiB messages with send_many (batches of 100), both replicas in sync, once delayed (due
   1 to 20 hours ahead: stored in the schedule of both replicas) and once without delay (stored in partition 0 of
   both), in turns, `--rounds` each: messages/s and the ratio delayed / plain.
2. rejoin: the follower is stopped (SIGTERM) and started again. Its copy of the schedule is emptied and the leader
   sends it anew (the whole pending schedule, read from its schedule log a chunk at a time): the time from the
   follower's start until it is back in the in-sync replicas, and the leader's RSS growth meanwhile (peak,
   sampled every 50 ms).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import threading
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import broker_bench as bb  # noqa: E402
from bench.delay_bench import rss_mib  # noqa: E402
from broker_core.client import AsyncProducer, Message  # noqa: E402
from broker_core.client._loop import new_event_loop  # noqa: E402
from broker_core.layout import LAYOUT  # noqa: E402

TOPIC = "later"
BATCH = 100


def partition_state(pv) -> dict:
    return json.loads(pv.zk.get(pv.root + LAYOUT.partition_state(TOPIC, 0))[0])


def wait_until(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"gave up waiting for {what} after {timeout:g}s")
        time.sleep(0.02)


async def send(producer: AsyncProducer, count: int, delayed: bool, rng: random.Random) -> float:
    body = b"x" * 1024
    started = time.perf_counter()
    for _ in range(0, count, BATCH):
        await producer.send_many(TOPIC, [Message(body, delay=rng.uniform(3600, 20 * 3600) if delayed else None)
                                         for _ in range(BATCH)])
    return count / (time.perf_counter() - started)


def rejoin(pv, brokers: dict, start, leader: str, follower: str) -> tuple[float, float]:
    """Restart the follower; (seconds until it is in sync again, the leader's peak RSS growth in MiB)."""
    brokers[follower].terminate()
    brokers[follower].wait(timeout=60)
    wait_until(lambda: partition_state(pv)["isr"] == [leader], 30, "the ISR without the follower")
    before = peak = rss_mib(brokers[leader].pid)
    started = time.monotonic()
    brokers[follower] = start(follower)
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, rss_mib(brokers[leader].pid))
            time.sleep(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    wait_until(lambda: len(partition_state(pv)["isr"]) == 2, 600, "the follower in sync again")
    took = time.monotonic() - started
    done.set()
    sampler.join()
    return took, peak - before


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    lock = bb.hold_bench_lock()  # noqa: F841  (held until the process ends)
    nodes = ["bench-b0", "bench-b1"]
    rng = random.Random(20)
    with bb.bench_chroot("sy-delay-replication-bench", topics=(), min_insync=1) as (zk, pv), \
            bb.bench_workdir("delay-replication-") as workdir:
        pv.topic(TOPIC, replication_factor=2)
        pv.grant(TOPIC, bb.APP)
        pv.placement(TOPIC, 1, 2, nodes)
        secret = workdir / "cluster-secret"
        secret.write_text(uuid.uuid4().hex + uuid.uuid4().hex)
        secret.chmod(0o600)
        os.environ["SWITCHYARD_BROKER_CLUSTER_SECRET_FILE"] = str(secret)  # the brokers inherit the file's name

        def start(node: str):
            return bb.start_broker(zk, workdir / node / "data", "batch", False, port=bb.BROKER_PORT + 2 * nodes.index(node),
                                extra=("--node-id", node))

        brokers = {}
        try:
            for node in nodes:
                (workdir / node / "data").mkdir(parents=True)
                brokers[node] = start(node)
            wait_until(lambda: len(partition_state(pv).get("isr", [])) == 2, 60, "both replicas in sync")
            leader = partition_state(pv)["leader"]
            follower = next(n for n in nodes if n != leader)
            loop = new_event_loop()
            producer = AsyncProducer(app_id=bb.APP, secret=bb.SECRET, zk=zk, cache_dir=bb.STATE / "sdk-cache-delay-repl",
                                     send_timeout=60)
            loop.run_until_complete(producer.connect(TOPIC))
            rates: dict[bool, list[float]] = {True: [], False: []}
            for _ in range(args.rounds):
                for is_delayed in (True, False):
                    rates[is_delayed].append(loop.run_until_complete(send(producer, args.messages, is_delayed, rng)))
            loop.run_until_complete(producer.close())
            loop.close()
            took, grew = rejoin(pv, brokers, start, leader, follower)
            held = bb.broker_stats(bb.BROKER_PORT + 2 * nodes.index(follower))["topics"][TOPIC]["delayed"]["scheduled"]
        finally:
            for proc in brokers.values():
                proc.terminate()
                proc.wait(timeout=60)
    delayed, plain = statistics.median(rates[True]), statistics.median(rates[False])
    scheduled = args.messages * args.rounds
    print(f"delay replication bench: 2 brokers, 1 partition, replication factor 2, min_insync 1, fsync batch, "
          f"1 KiB messages, send_many of {BATCH}, {os.cpu_count()} cores, {args.rounds} rounds of "
          f"{args.messages:,}")
    print(f"  send   delayed {delayed:,.0f} msgs/s   plain {plain:,.0f} msgs/s   ratio {delayed / plain:.2f}   "
          f"(rounds: {', '.join(f'{r:,.0f}' for r in rates[True])} | {', '.join(f'{r:,.0f}' for r in rates[False])})")
    print(f"  rejoin {scheduled:,} scheduled: the restarted follower in sync again after {took:.1f} s "
          f"({scheduled / took:,.0f} scheduled messages/s sent anew; its copy holds {held:,}); the leader's RSS "
          f"+{grew:.1f} MiB meanwhile")
    return 0


if __name__ == "__main__":
    sys.exit(main())
