"""Broker throughput with tracing on vs off, as ratios from one run (bench/broker_bench.py run alternately).

    .venv/bin/python bench/broker_trace_ratio.py [--messages 100000] [--rounds 2]

Each round runs the broker bench once with `--no-trace` and once with `--trace` (the broker writes
its trace files with broker_core.trace_writer.JsonlTraceWriter); the figures are the medians over the
rounds, and the ratio is on/off (target ≥ 0.9). Prints figures only.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def one(messages: int, trace: bool) -> dict:
    argv = [sys.executable, str(ROOT / "bench" / "broker_bench.py"), "--json", "--messages", str(messages),
            "--paced-seconds", "2"] + (["--trace"] if trace else [])
    out = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return json.loads(out[out.index("{"):])


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    runs = {False: [], True: []}
    for _ in range(args.rounds):
        for trace in (False, True):
            runs[trace].append(one(args.messages, trace))
    print(f"broker throughput, tracing off vs on ({args.messages:,} messages of 1 KiB, median of {args.rounds}):")
    for name, label in (("publish_pipelined", "publish (pipelined)"), ("publish_send_many_100", "publish (send_many)"),
                        ("end_to_end", "end to end with acks")):
        off = statistics.median(r[name] for r in runs[False])
        on = statistics.median(r[name] for r in runs[True])
        print(f"  {label:24s} off {off:>9,.0f}/s  on {on:>9,.0f}/s  ratio {on / off:.2f}")
    key = "cpu_end_to_end"
    off = statistics.median(r[key]["broker_cpu_us"] for r in runs[False])
    on = statistics.median(r[key]["broker_cpu_us"] for r in runs[True])
    print(f"  broker CPU per message end to end: off {off:.1f} µs, on {on:.1f} µs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
