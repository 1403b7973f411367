"""Broker throughput with tracing on vs off, as ratios from one run: two brokers side by side, driven in turns.

    .venv/bin/python bench/broker_trace_ratio.py [--messages 200000] [--pairs 8] [--fsync batch] [--roll-mb MB]
                                                 [--paced-pairs 6] [--paced-seconds 5] [--phases ...]

One ZooKeeper, two broker processes started once and kept for the whole run: one with `--trace` (its
trace process writes Arrow IPC files, broker_core.tracing.writer.TraceFileWriter), one with `--no-trace`.
The traced broker runs with tracing's defaults, as users run it: its trace file rolls at 256 MiB or 60 s,
which a run of several minutes reaches a few times, so closing rolled files is counted within the run.
`--roll-mb` rolls it every so many MiB instead (`--trace-roll-mb`): more often than a broker at its defaults,
each roll charging the traced side the work of resolving the names that point into the file before.
One client process (this one) drives them in turns, one segment of `--messages` 1 KiB messages at a
time, in pairs whose order alternates (on, off, off, on, ...): on a shared machine whose speed drifts
by the second, the two sides of a pair see the same machine. Phases, as in bench/broker_bench.py:
  1. publish, `send_nowait` pipelined (window 2,000), on a topic with no group;
  2. publish, `send_many` of 100 messages, same topic;
  3. end to end: the same producer plus one consumer group (one consumer, acking), on a second topic;
  4. paced: 2,000 messages/s for `--paced-seconds` to that group, latency from send to the handler, in
     `--paced-pairs` pairs (alternating too).

After each segment the client waits until the broker and its trace process have been idle for longer than
the trace process holds frames for more to come (HOLD_S, + 0.2 s), and adds the CPU time they spent
meanwhile to the segment's time: tracing work that runs after a burst, also what the trace process held at
its end, is charged to the traced side, not left to slow the next segment (the other side's, half the time).

Printed per phase: the rates of each side (median), the ratio of the totals (messages over summed
time, on / off: target ≥ 0.95) with a 95% bootstrap interval over the pairs, the median and the lowest
of the pair ratios; CPU per message (mean over the segments) of
the broker process, its trace process and the client, and the ratio that CPU predicts (`cpu_ratio`, steadier
than the rates on a noisy machine); and the paced latency of each side, side by side:
p50 / p99 / max over all its paced segments, and the median of its segments' p99 (target: p99 ≤ 4 ms traced). Last, the
trace events the traced broker dropped (its /metrics): figures of a run that dropped some are not comparable. Ports: ZooKeeper 27592 (or $SWITCHYARD_ZK),
brokers 27580-27583 (or those of $SWITCHYARD_BENCH_PORT, see broker_bench.py). Prints figures only; `--json`
prints them as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import statistics
import sys
import time
import urllib.request
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kazoo.client import KazooClient  # noqa: E402

from bench import broker_bench as bb  # noqa: E402
from broker_core.client import AsyncProducer  # noqa: E402
from broker_core.client._loop import new_event_loop  # noqa: E402
from broker_core.cluster.provision import Provisioner  # noqa: E402
from broker_core.tracing.process import HOLD_S  # noqa: E402

PUB_TOPIC, E2E_TOPIC, GROUP = "ratio-pub", "ratio-e2e", "ratio-group"
PHASES = (("publish_pipelined", "publish (pipelined)"), ("publish_send_many", "publish (send_many)"),
          ("end_to_end", "end to end with acks"))
PACED = "paced"
SIDES = ("on", "off")


class Side:
    """One broker (tracing on or off), its producer and its CPU meter."""

    def __init__(self, name: str, zk_hosts: str, workdir: Path, fsync: str, port: int, roll_mb: int | None = None):
        self.name = name
        self.chroot = f"/sy-broker-ratio/{uuid.uuid4().hex[:8]}-{name}"
        self.zk = f"{zk_hosts}{self.chroot}"
        self.data = workdir / name / "data"
        self.data.mkdir(parents=True)
        self.fsync, self.port, self.roll_mb = fsync, port, roll_mb
        self.rates: dict[str, list[float]] = {p: [] for p, _ in PHASES}
        self.cpu: dict[str, list[dict]] = {p: [] for p, _ in PHASES}
        self.paced: list[list[float]] = []  # per paced segment, its latencies (seconds)

    def provision(self, client: KazooClient) -> None:
        pv = Provisioner(client, self.chroot, cluster=f"ratio-{self.name}")
        pv.meta()
        bb.provision_app(pv, (E2E_TOPIC, PUB_TOPIC), GROUP)

    def start(self, prefix: tuple[str, ...] = (), start_timeout: float = 30) -> None:
        """Its broker (`prefix`: a command to run it under), its CPU meter and the SDK's arguments."""
        self.proc = bb.start_broker(self.zk, self.data, self.fsync, self.name == "on", port=self.port,
                                 cluster=f"ratio-{self.name}", prefix=prefix, start_timeout=start_timeout,
                                 extra=("--trace-roll-mb", str(self.roll_mb)) if self.name == "on" and self.roll_mb
                                 else ())
        self.meter = bb.CpuMeter(self.proc.pid)
        self.kwargs = bb.client_kwargs(self.zk, self.data.parent / "sdk-cache")

    async def connect(self) -> None:
        self.producer = AsyncProducer(**self.kwargs)
        for topic in (PUB_TOPIC, E2E_TOPIC):
            await self.producer.connect(topic)
        # warm up (connections, allocator, page cache), leaving no backlog for the group
        await bb.publish_pipelined(self.producer, 5000, PUB_TOPIC)
        await bb.end_to_end(self.producer, self.kwargs, 5000, E2E_TOPIC, GROUP)
        if self.name == "on":
            await bb.trace_process_started(self.data / "trace")

    def busy_cpu(self) -> float:
        """CPU seconds of the broker process and its children (the trace process) so far."""
        broker, _, children = self.meter.now()
        return broker + children

    async def settle(self, timeout: float = 15.0) -> float:
        """Wait until the broker and its trace process have used no CPU for longer than the trace process holds
        frames for more to come (HOLD_S): what it held is written and charged here, not to the next segment.
        Returns the CPU they used meanwhile."""
        first = last = self.busy_cpu()
        deadline = time.monotonic() + timeout
        quiet_since = None
        while time.monotonic() < deadline:
            await asyncio.sleep(0.06)
            now = self.busy_cpu()
            if now - last <= 0.01:  # at most one clock tick in 60 ms: idle
                quiet_since = quiet_since or time.monotonic()
                if time.monotonic() - quiet_since >= HOLD_S + 0.2:
                    return now - first
            else:
                quiet_since = None
            last = now
        return last - first

    async def segment(self, phase: str, count: int) -> None:
        self.meter.start()
        started = time.perf_counter()
        if phase == "publish_pipelined":
            await bb.publish_pipelined(self.producer, count, PUB_TOPIC)
        elif phase == "publish_send_many":
            await bb.publish_many(self.producer, count, topic=PUB_TOPIC)
        else:
            await bb.end_to_end(self.producer, self.kwargs, count, E2E_TOPIC, GROUP)
        elapsed = time.perf_counter() - started
        elapsed += await self.settle()
        self.rates[phase].append(count / elapsed)
        self.cpu[phase].append(self.meter.per_message(count))

    async def paced_segment(self, rate: int, seconds: float) -> None:
        self.paced.append(await bb.paced_latency(self.producer, self.kwargs, rate, seconds, E2E_TOPIC, GROUP))
        await self.settle()

    def trace_dropped(self) -> int:
        """Trace events the broker dropped so far (its /metrics; a run that drops some measured less work)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port + 1}/metrics", timeout=5) as r:
            lines = r.read().decode().splitlines()
        return sum(int(float(line.rsplit(" ", 1)[1])) for line in lines
                   if line.startswith("switchyard_broker_trace_events_dropped_total{"))

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)


async def drive(sides: dict[str, Side], args) -> None:
    try:
        await phases(sides, args)
    finally:
        for side in sides.values():
            if hasattr(side, "producer"):
                await side.producer.close()


async def phases(sides: dict[str, Side], args) -> None:
    for side in sides.values():
        await side.connect()
    for phase, label in PHASES:
        if phase not in args.phases:
            continue
        for pair in range(args.pairs):
            order = SIDES if pair % 2 == 0 else SIDES[::-1]
            for name in order:
                await sides[name].segment(phase, args.messages)
            if not args.json:
                on, off = sides["on"].rates[phase][-1], sides["off"].rates[phase][-1]
                print(f"  {label} pair {pair + 1}: on {on:9,.0f}/s  off {off:9,.0f}/s  ratio {on / off:.2f}"
                      f"  (load {os.getloadavg()[0]:.2f})", flush=True)
    if PACED not in args.phases:
        return
    for pair in range(args.paced_pairs):
        order = SIDES if pair % 2 == 0 else SIDES[::-1]
        for name in order:
            await sides[name].paced_segment(args.paced_rate, args.paced_seconds)
        if not args.json:
            on, off = (bb.percentile(sides[name].paced[-1], 0.99) * 1000 for name in SIDES)
            print(f"  paced {args.paced_rate:,}/s pair {pair + 1}: p99 on {on:6.2f} ms  off {off:6.2f} ms"
                  f"  (load {os.getloadavg()[0]:.2f})", flush=True)


def ratio_interval(on: list[float], off: list[float], draws: int = 2000) -> tuple[float, float]:
    """A 95% bootstrap interval of the ratio of totals: pairs drawn with replacement (a fixed seed, so the
    same rates give the same interval). Segments hold equal message counts, so a side's total rate is
    the harmonic mean of its segment rates."""
    rng = random.Random(7)
    n = len(on)
    ratios = []
    for _ in range(draws):
        picks = [rng.randrange(n) for _ in range(n)]
        ratios.append(sum(1 / off[i] for i in picks) / sum(1 / on[i] for i in picks))
    ratios.sort()
    return ratios[int(0.025 * draws)], ratios[int(0.975 * draws) - 1]


def summary(sides: dict[str, Side], count: int) -> dict:
    out = {}
    for phase, _ in PHASES:
        on, off = sides["on"].rates[phase], sides["off"].rates[phase]
        if not on:
            continue
        pairs = [a / b for a, b in zip(on, off, strict=True)]
        total = {name: len(s.rates[phase]) * count / sum(count / r for r in s.rates[phase]) for name, s in sides.items()}
        out[phase] = {
            "on_median": statistics.median(on), "off_median": statistics.median(off),
            "ratio_of_totals": total["on"] / total["off"], "interval_95": ratio_interval(on, off),
            "median_pair_ratio": statistics.median(pairs),
            "lowest_pair_ratio": min(pairs), "pair_ratios": pairs,
            "cpu_us": {name: {k: statistics.fmean(c[k] for c in s.cpu[phase])
                              for k in ("broker_cpu_us", "trace_cpu_us", "client_cpu_us")}
                       for name, s in sides.items()},
        }
        out[phase]["cpu_ratio"] = cpu_ratio(out[phase]["cpu_us"])
    if sides["on"].paced:
        out[PACED] = {name: paced_summary(s.paced) for name, s in sides.items()}
    return out


def cpu_ratio(cpu: dict) -> float:
    """The ratio the CPU per message predicts: untraced broker + client over traced broker + its trace process
    + client. On a machine the three processes share (two cores here) it follows the measured ratio within a
    few points (broker_core/README.md, "A model that fits"): every process's work costs throughput, also the
    trace process's at idle priority."""
    on, off = cpu["on"], cpu["off"]
    return (off["broker_cpu_us"] + off["client_cpu_us"]) / (on["broker_cpu_us"] + on["trace_cpu_us"] + on["client_cpu_us"])


def paced_summary(segments: list[list[float]]) -> dict:
    """p50 / p99 / max (ms) over all of a side's paced segments, and the median of the segments' p99."""
    pooled = [x for segment in segments for x in segment]
    return {"segments": len(segments), "messages": len(pooled), "p50_ms": bb.percentile(pooled, 0.50) * 1000,
            "p99_ms": bb.percentile(pooled, 0.99) * 1000, "max_ms": max(pooled) * 1000,
            "median_segment_p99_ms": statistics.median(bb.percentile(s, 0.99) for s in segments) * 1000}


@contextlib.contextmanager
def two_brokers(make_side, prefix: str):
    """ZooKeeper (this bench's own, unless $SWITCHYARD_ZK names one), then a traced and an untraced broker,
    provisioned and started: yields {"on": side, "off": side}, `make_side(name, zk_hosts, workdir, port)`
    building each; stops and removes everything afterwards."""
    with bb.bench_zookeeper() as (zk_hosts, client), bb.bench_workdir(prefix) as workdir:
        sides = {name: make_side(name, zk_hosts, workdir, port) for name, port in (("on", bb.BROKER_PORT),
                                                                                     ("off", bb.BROKER_PORT + 2))}
        started = []
        try:
            for side in sides.values():
                side.provision(client)
                side.start()
                started.append(side)
            yield sides
        finally:
            for side in started:
                side.stop()
            for side in sides.values():
                client.delete(side.chroot, recursive=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=200_000, help="messages per segment (shorter: noisier)")
    parser.add_argument("--pairs", type=int, default=8, help="segment pairs (on + off) per phase")
    parser.add_argument("--roll-mb", type=int, default=None,
                        help="the traced broker's --trace-roll-mb (default: none, the broker's own: 256 MiB or 60 s)")
    parser.add_argument("--fsync", default="batch", choices=["batch", "interval", "never"])
    parser.add_argument("--paced-pairs", type=int, default=6, help="paced segment pairs (on + off)")
    parser.add_argument("--paced-seconds", type=float, default=5.0, help="length of a paced segment")
    parser.add_argument("--paced-rate", type=int, default=2000, help="messages per second of a paced segment")
    parser.add_argument("--phases", nargs="+", default=[p for p, _ in PHASES] + [PACED],
                        choices=[p for p, _ in PHASES] + [PACED], help="the phases to run (default: all)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    lock = bb.hold_bench_lock()  # noqa: F841  (held until the process ends)
    load = os.getloadavg()[0]
    if not args.json:
        print(f"broker throughput, tracing on vs off: two brokers, {args.pairs} pairs of {args.messages:,}-message "
              f"segments per phase, 1 KiB messages, fsync={args.fsync}, trace file rolled at "
              f"{f'{args.roll_mb} MiB' if args.roll_mb else 'the defaults (256 MiB or 60 s)'}, "
              f"{os.cpu_count()} cores (load {load:.2f})",
              flush=True)
    def make_side(name: str, zk_hosts: str, workdir: Path, port: int) -> Side:
        return Side(name, zk_hosts, workdir, args.fsync, port, args.roll_mb)

    with two_brokers(make_side, "ratio-") as sides:
        loop = new_event_loop()
        loop.run_until_complete(drive(sides, args))
        loop.close()
        dropped = sides["on"].trace_dropped()

    results = summary(sides, args.messages)
    results["trace_events_dropped"] = dropped
    if args.json:
        print(json.dumps({"load_before": load, "load_after": os.getloadavg()[0], "phases": results}, indent=2))
        return 0
    print(f"  phase                  on (median)   off (median)   ratio of totals (95% interval)   median pair"
          f"   lowest pair   (load after {os.getloadavg()[0]:.2f}; target ≥ 0.95)")
    ran = [(phase, label) for phase, label in PHASES if phase in results]
    for phase, label in ran:
        r = results[phase]
        low, high = r["interval_95"]
        print(f"  {label:22s} {r['on_median']:9,.0f}/s   {r['off_median']:9,.0f}/s   {r['ratio_of_totals']:15.2f}"
              f" ({low:.2f}-{high:.2f})   {r['median_pair_ratio']:11.2f}   {r['lowest_pair_ratio']:11.2f}")
    print("  CPU per message (µs), mean of segments: on broker / its trace process / client   off broker / client"
          "   ratio the CPU predicts (off broker + client over on broker + trace + client)")
    for phase, label in ran:
        on, off = results[phase]["cpu_us"]["on"], results[phase]["cpu_us"]["off"]
        print(f"  {label:22s} {on['broker_cpu_us']:5.2f} / {on['trace_cpu_us']:4.2f} / {on['client_cpu_us']:5.2f}"
              f"     {off['broker_cpu_us']:5.2f} / {off['client_cpu_us']:5.2f}   {results[phase]['cpu_ratio']:5.2f}")
    if PACED in results:
        print(f"  paced {args.paced_rate:,}/s, {args.paced_pairs} pairs of {args.paced_seconds:g} s: p50 / p99 / max over"
              " all segments, median of segment p99 (target: p99 ≤ 4 ms traced)")
        for name in SIDES:
            r = results[PACED][name]
            print(f"  tracing {name:3s}  {r['p50_ms']:6.2f} / {r['p99_ms']:6.2f} / {r['max_ms']:7.2f} ms"
                  f"   segment p99 median {r['median_segment_p99_ms']:6.2f} ms   ({r['messages']:,} messages)")
    print(f"  trace events the traced broker dropped (its trace process too far behind): {dropped:,}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
