"""Ordered topics bench (issue 21): ordered throughput with 1,000 distinct keys against unordered, side by side.

    .venv/bin/python bench/ordered_bench.py [--messages 50000] [--keys 1000] [--rounds 3] [--consumers 2]

One broker (port $SWITCHYARD_BENCH_PORT or 27580; ZooKeeper $SWITCHYARD_ZK or one started on P+12), two topics of
4 partitions placed on it: `plain` (unordered) and `ordered` (`"ordered": true`), each with one group. Every
message (1 KiB) has one of `--keys` order keys, on both topics, so only the delivery differs. Each round, for each
topic in alternating order: `--consumers` consumers (credit 5,000, acking) subscribe, the messages are published
(send_many of 100, window 2,000), and the time until every message was handled gives the end-to-end rate. Prints
the median of the rounds, every round's figure, the ratio ordered / unordered (target ≥ 0.7), and for the ordered
topic how many messages were handled out of their key's order (must be 0) or repeated.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import broker_bench as bb  # noqa: E402
from broker_core.client import AsyncConsumer, AsyncProducer, Message  # noqa: E402
from broker_core.client._loop import new_event_loop  # noqa: E402

TOPICS = {"plain": False, "ordered": True}
GROUP = "bench-group"
PARTITIONS = 4


async def round_trip(producer: AsyncProducer, kwargs: dict, topic: str, messages: int, keys: int,
                     consumers: int, base: int) -> tuple[float, int, int]:
    """One end-to-end run: (msgs/s, messages handled out of their key's order, repeats)."""
    last: dict[str, int] = {}
    counts = {"handled": 0, "out_of_order": 0, "repeats": 0}
    done = asyncio.Event()

    def handle(message) -> None:
        key = message.key
        index = int(message.body[:12])
        before = last.get(key, -1)
        if index == before:
            counts["repeats"] += 1
        else:
            if index < before:
                counts["out_of_order"] += 1
            last[key] = index
            counts["handled"] += 1
            if counts["handled"] >= messages:
                done.set()

    subs = [AsyncConsumer(topic, GROUP, handle, credit=5000, **kwargs) for _ in range(consumers)]
    for c in subs:
        await c.start()
    window = asyncio.Semaphore(bb.WINDOW // 100)
    pad = bb.BODY[12:]

    async def send(batch):
        try:
            await producer.send_many(topic, batch)
        finally:
            window.release()

    started = time.perf_counter()
    tasks = []
    for first in range(0, messages, 100):
        await window.acquire()
        batch = [Message(b"%012d" % (base + i) + pad, key=f"key-{i % keys}") for i in range(first, first + 100)]
        tasks.append(asyncio.ensure_future(send(batch)))
    await asyncio.gather(*tasks)
    await asyncio.wait_for(done.wait(), 300)
    elapsed = time.perf_counter() - started
    for c in subs:
        await c.stop()
    return messages / elapsed, counts["out_of_order"], counts["repeats"]


async def measure(args, zk: str) -> dict[str, list]:
    kwargs = {"app_id": bb.APP, "secret": bb.SECRET, "zk": zk, "cache_dir": bb.STATE / "sdk-cache-ordered"}
    producer = AsyncProducer(**kwargs)
    figures: dict[str, list] = {t: [] for t in TOPICS}
    for topic in TOPICS:
        await producer.connect(topic)
        await round_trip(producer, kwargs, topic, 5000, args.keys, args.consumers, 0)  # warm up
    for r in range(args.rounds):
        for topic in (list(TOPICS) if r % 2 == 0 else list(reversed(TOPICS))):
            figures[topic].append(await round_trip(producer, kwargs, topic, args.messages, args.keys, args.consumers,
                                                   (r + 1) * 10_000_000))
            print(f"  round {r + 1} {topic}: {figures[topic][-1][0]:,.0f} msgs/s", flush=True)
    await producer.close()
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--keys", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--consumers", type=int, default=2)
    args = parser.parse_args()
    lock = bb.hold_bench_lock()  # noqa: F841  (held until the process ends)
    with bb.bench_chroot("sy-ordered-bench", topics=()) as (zk, pv):
        node = "bench-b0"
        for topic, ordered in TOPICS.items():
            pv.topic(topic, partitions=PARTITIONS, replication_factor=1, ordered=ordered)
            pv.grant(topic, bb.APP)
            pv.placement(topic, PARTITIONS, 1, [node])
            pv.binding(topic, GROUP, bb.APP, max_in_flight=10_000)
        workdir = Path(tempfile.mkdtemp(prefix="ordered-", dir=bb.STATE))
        (workdir / node).mkdir()
        broker = bb.start_broker(zk, workdir / node / "data", "batch", False, extra=("--node-id", node))
        try:
            loop = new_event_loop()
            figures = loop.run_until_complete(measure(args, zk))
            loop.close()
        finally:
            broker.terminate()
            broker.wait(timeout=30)
            shutil.rmtree(workdir, ignore_errors=True)
    print(f"ordered bench: 1 broker, {PARTITIONS} partitions per topic, 1 KiB messages, {args.keys:,} keys, "
          f"{args.consumers} consumers (credit 5,000), fsync=batch, {os.cpu_count()} cores, {args.rounds} rounds of "
          f"{args.messages:,} messages, end to end (publish + consume + ack)")
    medians = {}
    for topic in TOPICS:
        rates = [f[0] for f in figures[topic]]
        medians[topic] = statistics.median(rates)
        print(f"  {topic:<8} median {medians[topic]:>9,.0f} msgs/s   (rounds: {', '.join(f'{v:,.0f}' for v in rates)})"
              f"   out of key order: {sum(f[1] for f in figures[topic])}, repeated: "
              f"{sum(f[2] for f in figures[topic])}")
    print(f"  ratio ordered / unordered: {medians['ordered'] / medians['plain']:.2f} (target >= 0.70)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
