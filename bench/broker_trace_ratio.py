"""Broker throughput with tracing on vs off, as ratios from one run (bench/broker_bench.py run alternately).

    .venv/bin/python bench/broker_trace_ratio.py [--messages 100000] [--rounds 2] [--jsonl]

Each round runs the broker bench once with `--no-trace` and once with `--trace` (the broker's trace
process writes Parquet files, broker_core.trace_writer.ParquetTraceWriter); with `--jsonl` also once
with the older JSON-lines files (SWITCHYARD_BROKER_TRACE_FORMAT=jsonl), to compare the two in the
same run. The figures are the medians over the rounds (and the range), the ratio is on/off (target
≥ 0.9); CPU per message is given for the broker process and for its trace writer process. The
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
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--jsonl", action="store_true", help="also run with the older JSON-lines trace files")
    args = parser.parse_args()
    modes = ["off", "parquet"] + (["jsonl"] if args.jsonl else [])
    runs: dict[str, list[dict]] = {m: [] for m in modes}
    for _ in range(args.rounds):
        for mode in modes:
            runs[mode].append(one(args.messages, mode))
    print(f"broker throughput, tracing off vs on ({args.messages:,} messages of 1 KiB, median of {args.rounds}; "
          f"ratios per round in brackets):")
    for name, label in PHASES:
        off = [r[name] for r in runs["off"]]
        line = f"  {label:22s} off {statistics.median(off):>8,.0f}/s"
        for mode in modes[1:]:
            on = [r[name] for r in runs[mode]]
            ratios = ", ".join(f"{a / b:.2f}" for a, b in zip(on, off, strict=True))
            line += f"  {mode} {statistics.median(on):>8,.0f}/s ratio {statistics.median(on) / statistics.median(off):.2f} [{ratios}]"
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
