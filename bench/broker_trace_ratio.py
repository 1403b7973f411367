"""Broker throughput with tracing on vs off, as ratios from one run (bench/broker_bench.py run alternately).

    .venv/bin/python bench/broker_trace_ratio.py [--messages 100000] [--rounds 3] [--jsonl]

Each round runs the broker bench once with `--no-trace` and once with `--trace` (the broker's trace
process writes Parquet files, broker_core.trace_writer.ParquetTraceWriter); with `--jsonl` also once
with the older JSON-lines files (SWITCHYARD_BROKER_TRACE_FORMAT=jsonl), to compare the two in the
same run. Rounds alternate which mode runs first (off, on, on, off, ...), so a load that rises or falls
through the run weighs on both alike. Printed: per round the 1-minute load average and the on/off ratio
of each phase; then per phase the median rates, the ratio of the medians and the median of the round
ratios (target ≥ 0.9); CPU per message of the broker process and of its trace writer process. The
machine is shared: the CPU figures move less than the rates. Prints figures only.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PHASES = (("publish_pipelined", "publish (pipelined)"), ("publish_send_many_100", "publish (send_many)"),
          ("end_to_end", "end to end with acks"))


def one(messages: int, mode: str) -> dict:
    argv = [sys.executable, str(ROOT / "bench" / "broker_bench.py"), "--json", "--messages", str(messages),
            "--paced-seconds", "2"] + ([] if mode == "off" else ["--trace"])
    env = {**os.environ, "SWITCHYARD_BROKER_TRACE_FORMAT": "jsonl" if mode == "jsonl" else "parquet"}
    out = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, check=True, env=env).stdout
    return json.loads(out[out.index("{"):])


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--jsonl", action="store_true", help="also run with the older JSON-lines trace files")
    args = parser.parse_args()
    modes = ["off", "parquet"] + (["jsonl"] if args.jsonl else [])
    runs: dict[str, list[dict]] = {m: [] for m in modes}
    print(f"broker throughput, tracing off vs on ({args.messages:,} messages of 1 KiB, {args.rounds} rounds)")
    for r in range(args.rounds):
        load = os.getloadavg()[0]
        for mode in modes if r % 2 == 0 else modes[::-1]:
            runs[mode].append(one(args.messages, mode))
        print(f"  round {r + 1} (load {load:.2f}):" + "".join(
            f"  {label} " + " ".join(f"{runs[m][-1][name] / runs['off'][-1][name]:.2f}" for m in modes[1:])
            for name, label in PHASES), flush=True)
    print("  phase                  off (median)   " + "   ".join(
        f"{m} (median)  ratio of medians  median of round ratios" for m in modes[1:]))
    for name, label in PHASES:
        off = [r[name] for r in runs["off"]]
        line = f"  {label:22s} {statistics.median(off):>9,.0f}/s"
        for mode in modes[1:]:
            on = [r[name] for r in runs[mode]]
            ratios = [a / b for a, b in zip(on, off, strict=True)]
            line += (f"   {statistics.median(on):>9,.0f}/s  {statistics.median(on) / statistics.median(off):15.2f}"
                     f"  {statistics.median(ratios):22.2f}")
        print(line)
    print("  CPU per message (µs), median: broker process / trace writer process")
    for name, label in PHASES:
        key = f"cpu_{name}"
        parts = []
        for mode in modes:
            broker = statistics.median(r[key]["broker_cpu_us"] for r in runs[mode])
            trace = statistics.median(r[key].get("trace_cpu_us", 0.0) for r in runs[mode])
            parts.append(f"{mode} {broker:5.1f} / {trace:4.1f}")
        print(f"  {label:22s} " + "   ".join(parts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
