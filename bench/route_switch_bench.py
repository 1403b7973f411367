"""Route switch benchmark: what a producer and a consumer notice while a topic's route moves between clusters.

    .venv/bin/python bench/route_switch_bench.py [--rate 2000] [--phase-seconds 3]

Two clusters (two chroots of one ZooKeeper, a broker each, 1 KiB messages, fsync group commit), one
AsyncProducer paced at --rate messages/s (`send_nowait`) and one AsyncConsumer, both started with zk= of
cluster A and never restarted. The route document is written into /routes/<topic> of both clusters, as the
control plane does: consumers join B, producers move to B, consumers leave A, one phase each.

Prints: how long each client took to follow each route change (from the write to the client's route), the
longest publish stall (the most time a send waited for its acknowledgement, and the longest gap between
two acknowledgements), producer errors, messages lost (acknowledged, never consumed) and duplicates.

ZooKeeper: $SWITCHYARD_ZK if set, else one started as bench/broker_bench.py does (port 27592); brokers on
ports 27580-27583. Holds the broker bench lock; everything it starts is stopped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import broker_bench as bb  # noqa: E402
from broker_core.client import AsyncConsumer, AsyncProducer  # noqa: E402
from broker_core.client._loop import new_event_loop  # noqa: E402
from broker_core.cluster.provision import Provisioner  # noqa: E402

TOPIC, GROUP = "moving", "bench-group"


class Clocks:
    def __init__(self) -> None:
        self.sent: dict[str, float] = {}
        self.acked: dict[str, float] = {}
        self.errors: list[str] = []
        self.consumed: Counter = Counter()


async def run(args, clusters: dict[str, Provisioner], zk_of: dict[str, str], cache: Path) -> dict:
    clocks = Clocks()
    kwargs = bb.client_kwargs(zk_of["a"], cache)
    consumer = AsyncConsumer(TOPIC, GROUP, lambda m: clocks.consumed.update([m.id]), credit=2000, **kwargs)
    await consumer.start()
    producer = AsyncProducer(**kwargs)
    await producer.connect(TOPIC)
    stop = asyncio.Event()

    def acked(message_id: str, future: asyncio.Future) -> None:
        if future.exception() is not None:
            clocks.errors.append(repr(future.exception()))
        else:
            clocks.acked[message_id] = time.perf_counter()

    async def paced() -> None:
        started, i = time.perf_counter(), 0
        while not stop.is_set():
            delay = started + i / args.rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            message_id = producer.new_id()
            clocks.sent[message_id] = time.perf_counter()
            producer.send_nowait(TOPIC, bb.BODY, message_id=message_id).add_done_callback(
                lambda f, message_id=message_id: acked(message_id, f))
            i += 1

    async def follow(version: int, what, written: float) -> float:
        while what() != version:
            await asyncio.sleep(0.001)
        return time.perf_counter() - written

    def write(doc: dict) -> None:  # the control plane's job, from another thread (kazoo calls block)
        for pv in clusters.values():
            pv.route(TOPIC, doc)

    sending = asyncio.ensure_future(paced())
    follows, changes = [], []
    await asyncio.sleep(args.phase_seconds)
    baseline_end = time.perf_counter()
    for version, produce, consume in ((1, "a", ["a", "b"]), (2, "b", ["a", "b"]), (3, "b", ["b"])):
        doc = {"topic": TOPIC, "environment": "bench", "version": version, "produce": produce, "consume": consume,
               "clusters": {name: zk_of[name] for name in {produce, *consume}}}
        written = time.perf_counter()
        changes.append(written)
        following = asyncio.gather(follow(version, lambda: producer.route(TOPIC).version, written),
                                   follow(version, lambda: consumer.route().version, written))
        await asyncio.get_running_loop().run_in_executor(None, write, doc)
        follows.append((version, await following))
        await asyncio.sleep(args.phase_seconds)
    stop.set()
    await sending
    await producer.flush(30)
    deadline = time.monotonic() + 30
    while set(clocks.acked) - set(clocks.consumed) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    await producer.close()
    await consumer.stop()
    waits = [clocks.acked[i] - clocks.sent[i] for i in clocks.acked]
    baseline = [clocks.acked[i] - clocks.sent[i] for i in clocks.acked if clocks.sent[i] < baseline_end]
    around = [clocks.acked[i] - clocks.sent[i] for i in clocks.acked
              if any(0 <= clocks.sent[i] - t < 1.0 for t in changes)]
    acks = sorted(clocks.acked.values())
    return {"follows": follows, "sent": len(clocks.sent), "acked": len(clocks.acked), "errors": clocks.errors,
            "lost": len(set(clocks.acked) - set(clocks.consumed)),
            "duplicates": sum(n - 1 for n in clocks.consumed.values() if n > 1),
            "max_wait": max(waits), "p99_wait": bb.percentile(waits, 0.99), "max_wait_before": max(baseline),
            "max_wait_after_change": max(around),
            "max_gap": max(b - a for a, b in zip(acks, acks[1:], strict=False))}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=int, default=2000)
    parser.add_argument("--phase-seconds", type=float, default=3.0)
    args = parser.parse_args()

    lock = bb.hold_bench_lock()  # noqa: F841  (held until the process ends)
    base = f"/sy-route-bench/{uuid.uuid4().hex[:8]}"
    with bb.bench_zookeeper() as (zk_hosts, client), bb.bench_workdir("route-") as workdir:
        clusters, zk_of, brokers = {}, {}, []
        try:
            for i, name in enumerate(("a", "b")):
                pv = clusters[name] = Provisioner(client, f"{base}/{name}", cluster=name)
                zk_of[name] = f"{zk_hosts}{base}/{name}"
                pv.meta()
                bb.provision_app(pv, (TOPIC,), GROUP)
                (workdir / name).mkdir()
                brokers.append(bb.start_broker(zk_of[name], workdir / name / "data", "batch", False,
                                            port=bb.BROKER_PORT + 2 * i, cluster=name))
            time.sleep(1.0)  # the brokers register in ZooKeeper
            loop = new_event_loop()
            results = loop.run_until_complete(run(args, clusters, zk_of, workdir / "cache"))
            loop.close()
        finally:
            bb.stop_brokers(brokers)
            client.delete(base, recursive=True)

    print(f"route switch bench: {args.rate:,} msgs/s paced, 1 KiB, {args.phase_seconds:g} s per phase, "
          f"{os.cpu_count()} cores")
    for version, (producer_s, consumer_s) in results["follows"]:
        print(f"  route version {version} followed after: producer {producer_s * 1000:.1f} ms, "
              f"consumer {consumer_s * 1000:.1f} ms")
    print(f"  sent {results['sent']:,}, acknowledged {results['acked']:,}, producer errors {len(results['errors'])}, "
          f"lost {results['lost']}, duplicates {results['duplicates']}")
    print(f"  publish wait (send -> ack): p99 {results['p99_wait'] * 1000:.1f} ms, max {results['max_wait'] * 1000:.1f} "
          f"ms; longest gap between acks {results['max_gap'] * 1000:.1f} ms")
    print(f"  longest publish wait: before any change {results['max_wait_before'] * 1000:.1f} ms, within 1 s after a "
          f"change {results['max_wait_after_change'] * 1000:.1f} ms")
    for error in results["errors"][:5]:
        print(f"  error: {error}")
    return 1 if results["errors"] or results["lost"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
