"""What tracing costs the broker process, in instructions per message: the on/off bench's two brokers run
under valgrind's callgrind, which counts instructions, not seconds: what else the shared machine does
changes them little (bench/broker_trace_ratio.py measures time, with its noise), though they vary by a few
hundred per message from run to run, as the broker's batching follows timing.

    .venv/bin/python bench/broker_trace_instructions.py [--messages 20000] [--keep DIR]

Needs valgrind (Debian's package `valgrind`). The same setup as broker_trace_ratio.py (one ZooKeeper, a
traced and an untraced broker, the same phases), each broker started under
`valgrind --tool=callgrind --instr-atstart=no`; per phase and broker, instrumentation is switched on for
one segment of `--messages` messages (after a first, uncounted one) and its count dumped. The trace
process is not under valgrind (its CPU is in broker_trace_ratio.py's figures); the client's work is not
counted. Prints, per phase, instructions per message of the traced and the untraced broker, their
difference and the ratio off / on (what the traced broker's throughput would be, relative, if its CPU
alone set the pace). `--keep DIR` copies the callgrind files there (`callgrind.<on|off>.<n>`, n = 1, 2, 3 in
the order of the phases) for `callgrind_annotate`. Takes about a minute.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import bench.broker_trace_ratio as ratio  # noqa: E402
from bench.broker_bench import hold_bench_lock  # noqa: E402
from broker_core.client._loop import new_event_loop  # noqa: E402


class CountedSide(ratio.Side):
    """A Side whose broker runs under callgrind, instrumentation off until asked."""

    def __init__(self, *args, out: Path, **kwargs):
        super().__init__(*args, **kwargs)
        self.out = out
        self.dumps = 0

    def start(self, prefix: tuple[str, ...] = (), start_timeout: float = 600) -> None:
        """Its broker under callgrind (itself under `prefix`, if any)."""
        callgrind = ("valgrind", "--tool=callgrind", "--instr-atstart=no",
                     f"--callgrind-out-file={self.out}/callgrind.{self.name}")
        super().start(prefix=(*prefix, *callgrind), start_timeout=start_timeout)

    def control(self, *args: str) -> None:
        subprocess.run(["callgrind_control", *args, str(self.proc.pid)], check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)

    async def counted(self, phase: str, count: int) -> int:
        """Instructions of one segment of `phase` (the one before it uncounted)."""
        await self.segment(phase, count)
        self.control("-i", "on")
        await self.segment(phase, count)
        await asyncio.sleep(0.5)  # the batch's last trace shipping and fsyncs
        self.control("-i", "off")
        self.control("-d")
        self.dumps += 1
        text = (self.out / f"callgrind.{self.name}.{self.dumps}").read_text()
        return int(re.search(r"^totals: (\d+)", text, re.M).group(1))


async def run(sides: dict[str, CountedSide], count: int) -> dict:
    for side in sides.values():
        await side.connect()
    results = {}
    try:
        for phase, label in ratio.PHASES:
            results[label] = {name: await side.counted(phase, count) / count for name, side in sides.items()}
    finally:
        for side in sides.values():
            await side.producer.close()
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=20_000, help="messages per counted segment")
    parser.add_argument("--keep", type=Path, help="a folder to copy the callgrind files to")
    args = parser.parse_args()
    if not shutil.which("valgrind"):
        raise SystemExit("valgrind is not installed: apt-get install valgrind")
    lock = hold_bench_lock()  # noqa: F841  (held until the process ends)

    def make_side(name: str, zk_hosts: str, workdir: Path, port: int) -> CountedSide:
        return CountedSide(name, zk_hosts, workdir, "batch", port, out=workdir)

    with ratio.two_brokers(make_side, "instr-") as sides:
        loop = new_event_loop()
        results = loop.run_until_complete(run(sides, args.messages))
        loop.close()
        if args.keep:
            args.keep.mkdir(parents=True, exist_ok=True)
            for name, side in sides.items():
                for n in range(1, side.dumps + 1):
                    shutil.copy(side.out / f"callgrind.{name}.{n}", args.keep)
    print(f"broker instructions per message under callgrind ({args.messages:,}-message segments, 1 KiB messages; "
          "the trace process and the client not counted)")
    print("  phase                  traced    untraced   difference   off / on")
    for label, r in results.items():
        print(f"  {label:22s} {r['on']:8,.0f}  {r['off']:9,.0f}  {r['on'] - r['off']:+10,.0f}   {r['off'] / r['on']:8.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
