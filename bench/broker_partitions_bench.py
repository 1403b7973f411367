"""Partitions and replication bench (issue 20): two topics on three brokers, driven in turns by one client process.

    .venv/bin/python bench/broker_partitions_bench.py [--compare partitions|replication] [--messages 50000]
                                                      [--rounds 3] [--paced-seconds 5]

`--compare partitions` (default): a topic of one partition against one of three partitions (replication
factor 1). `--compare replication`: three partitions with replication factor 1 against three with replication
factor 2 and min_insync 2 (every publish acknowledged once two brokers hold it durably), and a paced 2,000/s
run of each (p50 / p99 / max from send to the consumer's handler). Also printed: the CPU each publish measure
cost per message (median), this client's and the three brokers' (Linux /proc schedstat). The brokers share one cluster secret (a
mode-600 file in the bench's folder).

Three brokers on ports P, P+2, P+4 (P = $SWITCHYARD_BENCH_PORT or 27580; their metrics on the next port),
ZooKeeper $SWITCHYARD_ZK or one started on P+12. 1 KiB messages, fsync group commit, no trace. Topic `one` has
no placement (every broker holds it; the producer sends to the broker it connected to), topic `three` is placed
one partition per broker (the producer sends each batch to its partition's leader, round robin per batch).
Each round measures, for each topic in alternating order: publish pipelined (send_nowait, window 2,000) and
send_many of 100 (a topic no group is bound to), and end to end (publish + one consumer group acking, the
consumer subscribed on every broker; a twin topic `<topic>-e2e` of the same placement, bound to the group). Prints the median of the rounds and every round's figure: the machine is shared, single runs move.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


from bench import broker_bench as bb  # noqa: E402
from broker_core.client import AsyncProducer  # noqa: E402
from broker_core.client._loop import new_event_loop  # noqa: E402

COMPARISONS = {"partitions": {"one": (1, 1), "three": (3, 1)},  # name: (partitions, replication factor)
               "replication": {"rf1": (3, 1), "rf2": (3, 2)}}
GROUP = "bench-group"


def cpu_seconds(pids: list[int]) -> float:
    """CPU time used so far by these processes, every thread (ns-resolution scheduler counts)."""
    total = 0
    for pid in pids:
        for task in os.listdir(f"/proc/{pid}/task"):
            try:
                total += int(Path(f"/proc/{pid}/task/{task}/schedstat").read_text().split()[0])
            except (OSError, ValueError, IndexError):
                pass  # a thread that ended meanwhile
    return total / 1e9


async def costed(figures: dict, kind: str, pids: list[int], count: int, run) -> None:
    """Run one publish measure; note its rate and the CPU it cost per message (this client, the brokers)."""
    client, brokers = time.process_time(), cpu_seconds(pids)
    figures[kind].append(await run)
    figures.setdefault(f"cpu {kind}", []).append(((time.process_time() - client) / count * 1e6,
                                                  (cpu_seconds(pids) - brokers) / count * 1e6))


async def measure(args, zk: str, topics: dict, pids: list[int]) -> dict[str, dict[str, list[float]]]:
    kwargs = bb.client_kwargs(zk, bb.STATE / "sdk-cache-partitions")
    producer = AsyncProducer(**kwargs)
    figures: dict[str, dict[str, list[float]]] = {t: {"pipelined": [], "send_many": [], "end_to_end": []}
                                                  for t in topics}
    for topic in topics:
        for name in (topic, f"{topic}-e2e"):
            await producer.connect(name)
            await bb.publish_pipelined(producer, 5000, name)  # warm up
    for r in range(args.rounds):
        for topic in (list(topics) if r % 2 == 0 else list(reversed(topics))):
            await costed(figures[topic], "pipelined", pids, args.messages,
                         bb.publish_pipelined(producer, args.messages, topic))
            await costed(figures[topic], "send_many", pids, args.messages,
                         bb.publish_many(producer, args.messages, topic=topic))
            # its own topic (bound; the publish runs' topic is not, so no backlog is counted here)
            rate, _ = await bb.end_to_end(producer, kwargs, args.messages, f"{topic}-e2e", GROUP)
            figures[topic]["end_to_end"].append(rate)
            if args.paced_seconds:
                figures[topic].setdefault("paced", []).extend(
                    await bb.paced_latency(producer, kwargs, 2000, args.paced_seconds, f"{topic}-e2e", GROUP))
    await producer.flush()  # the paced runs' last answers (close fails whatever is still awaited)
    links = producer.stats()
    await producer.close()
    print("producer:", links)
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--compare", choices=sorted(COMPARISONS), default="partitions")
    parser.add_argument("--paced-seconds", type=float, default=0.0, help="a paced 2,000/s run per topic and round")
    args = parser.parse_args()
    topics = COMPARISONS[args.compare]
    lock = bb.hold_bench_lock()  # noqa: F841  (held until the process ends)
    with bb.bench_chroot("sy-broker-bench", topics=(), min_insync=2 if args.compare == "replication" else 1) as (zk, pv):
        nodes = [f"bench-b{i}" for i in range(3)]
        for name, (partitions, rf) in topics.items():
            for topic in (name, f"{name}-e2e"):  # publish runs on the first (no group), end to end on the second
                pv.topic(topic, partitions=partitions if partitions > 1 else None, replication_factor=rf)
                pv.grant(topic, bb.APP)
                if (partitions, rf) != (1, 1):
                    pv.placement(topic, partitions, rf, nodes)
            pv.binding(f"{name}-e2e", GROUP, bb.APP, max_in_flight=10_000)
        with bb.bench_workdir("partitions-") as workdir:
            secret = workdir / "cluster-secret"
            secret.write_text(uuid.uuid4().hex + uuid.uuid4().hex)
            secret.chmod(0o600)
            os.environ["SWITCHYARD_BROKER_CLUSTER_SECRET_FILE"] = str(secret)  # the brokers inherit the file's name
            brokers = []
            try:
                for i, node in enumerate(nodes):
                    (workdir / node).mkdir()
                    brokers.append(bb.start_broker(zk, workdir / node / "data", "batch", False,
                                                port=bb.BROKER_PORT + 2 * i, extra=("--node-id", node)))
                loop = new_event_loop()
                figures = loop.run_until_complete(measure(args, zk, topics, [b.pid for b in brokers]))
                loop.close()
            finally:
                bb.stop_brokers(brokers)
    a, b = topics
    print(f"{args.compare} bench: 3 brokers, 1 KiB messages, fsync=batch, one client process, {os.cpu_count()} "
          f"cores, {args.rounds} rounds of {args.messages:,} messages; {a} {topics[a]} vs {b} {topics[b]} "
          "(partitions, replication factor)")
    for kind in ("pipelined", "send_many", "end_to_end"):
        one, two = (figures[t][kind] for t in topics)
        print(f"  {kind:<11} {a} {statistics.median(one):>9,.0f} msgs/s   {b} {statistics.median(two):>9,.0f} msgs/s"
              f"   ratio {statistics.median(two) / statistics.median(one):.2f}"
              f"   (rounds: {', '.join(f'{v:,.0f}' for v in one)} | {', '.join(f'{v:,.0f}' for v in two)})")
    for kind in ("pipelined", "send_many"):  # the machine's 2 cores are shared: what each message costs them
        costs = {t: [statistics.median(c[i] for c in figures[t][f"cpu {kind}"]) for i in (0, 1)] for t in topics}
        print(f"  cpu/msg {kind:<11}" + ";".join(f" {t}: client {c:.2f} + brokers {b:.2f} us" for t, (c, b) in
                                                costs.items()))
    for t in topics:
        if figures[t].get("paced"):
            lat = figures[t]["paced"]
            print(f"  paced 2,000/s {t}: p50 {bb.percentile(lat, 0.5) * 1000:.2f} ms, p99 {bb.percentile(lat, 0.99) * 1000:.2f} "
                  f"ms, max {max(lat) * 1000:.2f} ms ({len(lat):,} messages)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
