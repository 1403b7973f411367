"""What planning a rebalance costs (apps/rebalancing/plan.py is pure: no service needed).

    .venv/bin/python bench/rebalance_plan_bench.py [--topics 200 --partitions 16 --replicas 3 --brokers 9]

Prints, for a cluster of `topics` × `partitions` partitions of `replicas` replicas placed evenly over `brokers`
brokers: the plan's wall time and number of moves (a) when one broker is added, (b) when one is removed, and
the replicas per broker after each (min/max).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from apps.rebalancing.plan import loads, plan  # noqa: E402  (pure: no Django needed)


def placed(topics: int, partitions: int, replicas: int, brokers: list[str]) -> dict:
    out, i = {}, 0
    for t in range(topics):
        parts = {}
        for p in range(partitions):
            parts[p] = [brokers[(i + r) % len(brokers)] for r in range(replicas)]
            i += 1
        out[f"topic-{t:04d}"] = parts
    return out


def after(placements: dict, steps) -> dict:
    out = {t: {p: list(r) for p, r in parts.items()} for t, parts in placements.items()}
    for s in steps:
        reps = out[s.topic][s.partition]
        reps[reps.index(s.source)] = s.target
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--topics", type=int, default=200)
    ap.add_argument("--partitions", type=int, default=16)
    ap.add_argument("--replicas", type=int, default=3)
    ap.add_argument("--brokers", type=int, default=9)
    a = ap.parse_args()
    nodes = [f"b{i:02d}" for i in range(a.brokers)]
    current = placed(a.topics, a.partitions, a.replicas, nodes)
    total = a.topics * a.partitions * a.replicas
    print(f"{a.topics} topics × {a.partitions} partitions × {a.replicas} replicas = {total:,} replicas "
          f"on {a.brokers} brokers")
    for label, brokers, remove in (("add one broker", [*nodes, "new"], []),
                                   ("remove one broker", nodes, [nodes[0]])):
        t0 = time.perf_counter()
        steps = plan(current, brokers, remove)
        took = time.perf_counter() - t0
        counts = loads(after(current, steps))[0]
        print(f"{label:>18}: {len(steps):>7,} moves planned in {took * 1000:9.1f} ms; replicas per broker "
              f"after: {min(counts.values())}..{max(counts.values())} "
              f"({sum(s.leader for s in steps):,} leader moves)")


if __name__ == "__main__":
    main()
