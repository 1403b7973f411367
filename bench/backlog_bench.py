"""Backlog bench (issue 20 item 3): a group with no consumer is sent a large backlog, then drained.

    .venv/bin/python bench/backlog_bench.py [--messages 5000000] [--fsync batch] [--partitions N] [--broker-root DIR]

One broker (its own process), one topic, one group bound and not consumed. `--partitions N`: the topic is placed in
N partitions, all on this broker (the producer sends each batch to a partition in turn; the group keeps a position
in each partition's log). Publishes `--messages` messages of
1 KiB with `send_many` of 100 (a window of 2,000 unacknowledged messages, as bench/broker_bench.py), then one
consumer (credit 5,000, acking) drains the group. Prints the publish rate, the drain rate, the broker's RSS
(sampled every 0.2 s from /proc: the peak while publishing, at the end of the publish, the peak while draining),
its CPU per message, and the group's figures from /stats (depth, oldest unacknowledged age, messages on disk).

`--broker-root DIR` runs the broker from another checkout of the project (e.g. an older commit, for a side by
side comparison of publish throughput); the client is always this one.

ZooKeeper and ports as bench/broker_bench.py ($SWITCHYARD_ZK, $SWITCHYARD_BENCH_PORT).
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


from bench.broker_bench import (  # noqa: E402
    GROUP,
    TOPIC,
    CpuMeter,
    bench_chroot,
    bench_workdir,
    broker_stats,
    client_kwargs,
    hold_bench_lock,
    publish_many,
    start_broker,
    stop_brokers,
)
from broker_core.client import AsyncConsumer, AsyncProducer  # noqa: E402
from broker_core.client._loop import new_event_loop  # noqa: E402

MiB = 1024 * 1024
RUNNING: list[subprocess.Popen] = []  # broker processes to stop at the end


class Rss:
    """The broker's RSS, sampled every 0.2 s on a thread; `peak()` since the last `reset()`."""

    def __init__(self, pid: int):
        self.pid, self._peak, self._stop = pid, 0, threading.Event()
        threading.Thread(target=self._run, daemon=True).start()

    def now(self) -> int:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        return 0

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            try:
                self._peak = max(self._peak, self.now())
            except OSError:
                return

    def reset(self) -> None:
        self._peak = self.now()

    def peak(self) -> int:
        return max(self._peak, self.now())

    def stop(self) -> None:
        self._stop.set()


NODE_ID = "bench-1"


def restart(args, zk: str, broker: subprocess.Popen, data_dir: Path, out: dict) -> subprocess.Popen:
    """kill -9 the broker and start it again on the same data: time until the group's position is back, RSS."""
    broker.kill()
    broker.wait(timeout=60)
    started = time.perf_counter()
    broker = start_broker(zk, data_dir, args.fsync, False, root=args.broker_root.resolve(), start_timeout=1800,
                          extra=("--node-id", NODE_ID))
    RUNNING.append(broker)
    rss = Rss(broker.pid)
    while True:
        try:
            group = broker_stats()["topics"][TOPIC]["groups"][GROUP]
            if group["depth"]:
                break
        except (OSError, KeyError):
            pass
        time.sleep(0.1)
    out["recovery_s"], out["recovered_depth"] = time.perf_counter() - started, group["depth"]
    out["recovery_peak_rss"] = rss.peak()
    rss.stop()
    return broker


async def run(args, zk: str, broker: subprocess.Popen, data_dir: Path) -> dict:
    kwargs = client_kwargs(zk)
    rss, cpu = Rss(broker.pid), CpuMeter(broker.pid)
    out: dict = {"idle_rss": rss.now()}
    producer = AsyncProducer(**kwargs)
    await producer.connect(TOPIC)
    rss.reset()
    cpu.start()
    started = time.perf_counter()
    done = 0
    step = max(100_000, args.messages // 20)
    while done < args.messages:  # in steps, to show progress
        n = min(step, args.messages - done)
        await publish_many(producer, n)
        done += n
        rate = done / (time.perf_counter() - started)
        print(f"  published {done:,} ({rate:,.0f}/s), broker RSS {rss.now() / MiB:.0f} MiB", flush=True)
    out["publish_rate"] = args.messages / (time.perf_counter() - started)
    out["publish_cpu"] = cpu.per_message(args.messages)["broker_cpu_us"]
    out["publish_peak_rss"], out["published_rss"] = rss.peak(), rss.now()
    await producer.close()
    topic_stats = broker_stats()["topics"][TOPIC]
    out["group"], out["partitions"] = topic_stats["groups"][GROUP], topic_stats["store"].get("partitions")
    if args.restart:
        rss.stop()
        broker = out["broker"] = await asyncio.get_running_loop().run_in_executor(
            None, restart, args, zk, broker, data_dir, out)
        rss, cpu = Rss(broker.pid), CpuMeter(broker.pid)
    if args.no_drain:
        rss.stop()
        return out
    got = [0]
    drained = asyncio.Event()

    def handle(_m) -> None:
        got[0] += 1
        if got[0] >= args.messages:
            drained.set()

    rss.reset()
    cpu.start()
    consumer = AsyncConsumer(TOPIC, GROUP, handle, credit=5000, **kwargs)
    started = time.perf_counter()
    await consumer.start()
    while not drained.is_set():
        try:
            await asyncio.wait_for(drained.wait(), 10)
        except TimeoutError:
            rate = got[0] / (time.perf_counter() - started)
            print(f"  drained {got[0]:,} ({rate:,.0f}/s), broker RSS {rss.now() / MiB:.0f} MiB", flush=True)
    out["drain_rate"] = args.messages / (time.perf_counter() - started)
    out["drain_cpu"] = cpu.per_message(args.messages)["broker_cpu_us"]
    out["drain_peak_rss"] = rss.peak()
    await consumer.stop()
    out["drained"] = got[0]
    rss.stop()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=5_000_000)
    parser.add_argument("--fsync", default="batch", choices=["batch", "interval", "never"])
    parser.add_argument("--partitions", type=int, default=1, help="place the topic in N partitions on the broker")
    parser.add_argument("--broker-root", type=Path, default=ROOT, help="the checkout the broker runs from")
    parser.add_argument("--no-drain", action="store_true", help="publish only")
    parser.add_argument("--restart", action="store_true",
                        help="kill -9 the broker after the publish and start it again before the drain")
    args = parser.parse_args()

    lock = hold_bench_lock()  # noqa: F841  (held until the process ends)
    with bench_chroot("sy-backlog-bench") as (zk, pv), bench_workdir("backlog-") as workdir:
        if args.partitions > 1:
            pv.topic(TOPIC, partitions=args.partitions, replication_factor=1)
            pv.placement(TOPIC, args.partitions, 1, [NODE_ID])
        print(f"backlog bench: {args.messages:,} messages of 1 KiB, {args.partitions} partition(s), "
              f"fsync={args.fsync}, broker from "
              f"{'this checkout' if args.broker_root == ROOT else args.broker_root.name}", flush=True)
        broker = start_broker(zk, workdir / "data", args.fsync, False, root=args.broker_root.resolve(),
                              start_timeout=60, extra=("--node-id", NODE_ID))
        try:
            loop = new_event_loop()
            r = loop.run_until_complete(run(args, zk, broker, workdir / "data"))
            loop.close()
        finally:
            stop_brokers([broker, *RUNNING], timeout=60)
    g = r["group"]
    print(f"  publish: {r['publish_rate']:,.0f} msgs/s (broker CPU {r['publish_cpu']:.1f} us/msg); broker RSS "
          f"{r['idle_rss'] / MiB:.0f} MiB idle, peak {r['publish_peak_rss'] / MiB:.0f} MiB while publishing, "
          f"{r['published_rss'] / MiB:.0f} MiB at the end")
    print(f"  group after the publish: depth {g['depth']:,}, on disk {g.get('on_disk', 0):,}, oldest unacknowledged "
          f"{g['oldest_age_seconds']:.1f} s; partitions held {r['partitions']}")
    if "recovery_s" in r:
        print(f"  kill -9 and start again: the group's position back in {r['recovery_s']:.1f} s (depth "
              f"{r['recovered_depth']:,}), peak broker RSS {r['recovery_peak_rss'] / MiB:.0f} MiB while recovering")
    if "drain_rate" in r:
        print(f"  drain (one consumer, credit 5,000, acking): {r['drain_rate']:,.0f} msgs/s (broker CPU "
              f"{r['drain_cpu']:.1f} us/msg), {r['drained']:,} received; peak broker RSS "
              f"{r['drain_peak_rss'] / MiB:.0f} MiB while draining")
    peaks = [r[k] for k in ("publish_peak_rss", "recovery_peak_rss", "drain_peak_rss") if k in r]
    print(f"  peak broker RSS over the run: {max(peaks) / MiB:.0f} MiB (target: <= 300 MiB for 5,000,000 x 1 KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
