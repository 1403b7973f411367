"""Delay messages benchmark (issue 21): lateness of messages coming due at a steady rate, and the broker's memory
with a million messages scheduled.

    .venv/bin/python bench/delay_bench.py [--rate 2000] [--seconds 20] [--lead 30] [--scheduled 1000000]

1. Lateness: `rate` × `seconds` messages (1 KiB) are scheduled first, due `lead` seconds later and then spread
   evenly, `rate` a second (so the broker loads their bucket from disk ahead of time and reads the bodies just
   before they are due). One consumer takes them; each message's lateness is the time its handler ran minus
   the due time the producer asked (same machine, same clock). Prints p50 / p99 / max (targets: p50 <= 20 ms,
   p99 <= 100 ms).
2. Memory: `scheduled` messages (100 bytes) due between 1 hour and 30 days ahead are scheduled; prints the broker
   process's RSS before and after (target: growth <= 100 MiB), and its schedule figures from /stats.

A broker with fsync=batch (group commit) on a temporary folder, --no-trace; ZooKeeper and ports as in
bench/broker_bench.py ($SWITCHYARD_ZK, $SWITCHYARD_BENCH_PORT).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


from bench.broker_bench import (  # noqa: E402
    APP,
    bench_chroot,
    bench_workdir,
    broker_stats,
    client_kwargs,
    hold_bench_lock,
    percentile,
    start_broker,
)
from broker_core.client import AsyncConsumer, AsyncProducer, Message  # noqa: E402
from broker_core.client._loop import new_event_loop  # noqa: E402

TOPIC, GROUP, PARKED = "delayed", "delayed-group", "parked"


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise SystemExit(f"no VmRSS for pid {pid}")


async def lateness(kwargs: dict, rate: int, seconds: float, lead: float) -> dict:
    total = int(rate * seconds)
    late: list[float] = []
    done = asyncio.Event()

    def handle(m) -> None:
        late.append(time.time() * 1000 - m.deliver_at_ms)
        if len(late) >= total:
            done.set()

    producer = AsyncProducer(**kwargs)
    await producer.connect(TOPIC)
    first_ms = int(time.time() * 1000 + lead * 1000)
    body = b"x" * 1024
    for start in range(0, total, 1000):
        await producer.send_many(TOPIC, [Message(body, deliver_at=(first_ms + i * 1000 // rate) / 1000)
                                         for i in range(start, min(total, start + 1000))])
    scheduled = int(time.time() * 1000)
    print(f"  scheduled {total:,} messages due from {(first_ms - scheduled) / 1000:.1f} s from now, {rate:,}/s",
          flush=True)
    consumer = AsyncConsumer(TOPIC, GROUP, handle, credit=5000, **kwargs)
    await consumer.start()
    await asyncio.wait_for(done.wait(), lead + seconds + 120)
    await consumer.stop()
    await producer.close()
    early = sum(1 for v in late if v < 0)
    return {"messages": total, "p50_ms": percentile(late, 0.50), "p99_ms": percentile(late, 0.99),
            "max_ms": max(late), "early": early}


async def memory(kwargs: dict, count: int, pid: int) -> dict:
    producer = AsyncProducer(**kwargs)
    await producer.connect(PARKED)
    await producer.send(PARKED, b"warm-up", delay=3600)
    await asyncio.sleep(1)
    before = rss_mib(pid)
    rng = random.Random(7)
    now = time.time()
    body = b"y" * 100
    started = time.perf_counter()
    window = asyncio.Semaphore(20)
    tasks = []

    async def batch(n: int) -> None:
        try:
            await producer.send_many(PARKED, [Message(body, deliver_at=now + rng.uniform(3600, 29.9 * 86400))
                                              for _ in range(n)])
        finally:
            window.release()

    for sent in range(0, count, 1000):
        await window.acquire()
        tasks.append(asyncio.ensure_future(batch(min(1000, count - sent))))
        if sent % 100_000 == 0 and sent:
            print(f"  {sent:,} scheduled, broker RSS {rss_mib(pid):.0f} MiB", flush=True)
    await asyncio.gather(*tasks)
    rate = count / (time.perf_counter() - started)
    await producer.close()
    await asyncio.sleep(3)  # let the last index syncs run
    after = rss_mib(pid)
    topic = broker_stats()["topics"][PARKED]
    return {"scheduled": topic["scheduled"], "rate": rate, "rss_before_mib": before, "rss_after_mib": after,
            "growth_mib": after - before, "buckets": topic["delayed"]["store"]["buckets"],
            "in_memory": topic["delayed"]["in_memory"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--lead", type=float, default=30.0, help="seconds until the first message is due")
    parser.add_argument("--scheduled", type=int, default=1_000_000)
    args = parser.parse_args()

    lock = hold_bench_lock()  # noqa: F841  (held until the process ends)
    with (bench_chroot("sy-broker-bench", topics=(TOPIC, PARKED), group=GROUP) as (zk, pv),
          bench_workdir("delay-") as workdir):
        pv.binding(PARKED, GROUP, APP)
        broker = start_broker(zk, workdir / "data", "batch", False)
        kwargs = client_kwargs(zk)
        try:
            loop = new_event_loop()
            print(f"1. lateness, {args.rate:,} messages/s coming due for {args.seconds:g} s", flush=True)
            late = loop.run_until_complete(lateness(kwargs, args.rate, args.seconds, args.lead))
            print(f"   lateness p50 {late['p50_ms']:.1f} ms, p99 {late['p99_ms']:.1f} ms, max {late['max_ms']:.1f} ms "
                  f"over {late['messages']:,} messages; {late['early']} early (targets: p50 <= 20 ms, p99 <= 100 ms)")
            print(f"2. memory, {args.scheduled:,} messages scheduled 1 hour to 30 days ahead", flush=True)
            mem = loop.run_until_complete(memory(kwargs, args.scheduled, broker.pid))
            print(f"   broker RSS {mem['rss_before_mib']:.0f} -> {mem['rss_after_mib']:.0f} MiB: growth "
                  f"{mem['growth_mib']:.1f} MiB (target <= 100 MiB); {mem['scheduled']:,} scheduled in "
                  f"{mem['buckets']:,} buckets, {mem['in_memory']} entries in memory; scheduled at "
                  f"{mem['rate']:,.0f} messages/s")
        finally:
            schedule_dir = workdir / "data" / "topics" / PARKED / "schedule"
            files = len(list(schedule_dir.iterdir())) if schedule_dir.is_dir() else 0
            stopping = time.perf_counter()
            broker.terminate()
            try:
                broker.wait(timeout=600)  # a stop fsyncs the index files written since the last sync
            except subprocess.TimeoutExpired:
                broker.kill()
                broker.wait()
            print(f"3. stop (SIGTERM) took {time.perf_counter() - stopping:.1f} s; the parked topic's schedule folder "
                  f"held {files:,} files")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
