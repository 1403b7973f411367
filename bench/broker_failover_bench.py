"""Leader failover bench (issue 20, item 2): time from killing a partition's leader to publishes accepted again.

    .venv/bin/python bench/broker_failover_bench.py [--trials 5] [--session-timeout-s 2] [--interval-ms 5]

Three brokers on ports P, P+2, P+4 (P = $SWITCHYARD_BENCH_PORT or 27580; ZooKeeper $SWITCHYARD_ZK or one started
on P+12), topic `failover` of one partition, replication factor 2, min_insync 1, fsync group commit, no trace.
One producer sends a 1 KiB message every `--interval-ms` (each awaited in its own task). Each trial kills the
partition's leader with SIGKILL and deletes its data folder, then measures:

- elected: kill -> ZooKeeper names the new leader (`/partition-state/failover/0`, a new epoch): mostly the
  ZooKeeper session timeout (`--zk-session-timeout-s` of the brokers, raised by ZooKeeper to 2 x its tickTime);
- accepted: kill -> the first acknowledgment of a message sent after the kill (the new leader took it).

The killed broker is then started again, empty, and the trial waits until it is back in the ISR (it caught up)
before the next one. Prints every trial and the medians; the target is accepted <= 5 s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.broker_bench import APP, BROKER_PORT, SECRET, STATE, bench_chroot, hold_bench_lock, start_broker  # noqa: E402
from broker_core.client import AsyncProducer  # noqa: E402
from broker_core.client._loop import new_event_loop  # noqa: E402
from broker_core.layout import LAYOUT  # noqa: E402

TOPIC = "failover"


def partition_state(pv) -> dict:
    return json.loads(pv.zk.get(pv.root + LAYOUT.partition_state(TOPIC, 0))[0])


async def wait_until(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"gave up waiting for {what} after {timeout:g}s")
        await asyncio.sleep(0.01)


async def trials(args, zk: str, pv, brokers: dict, start) -> list[tuple[float, float]]:
    producer = AsyncProducer(app_id=APP, secret=SECRET, zk=zk, cache_dir=STATE / "sdk-cache-failover",
                             send_timeout=60)
    await producer.connect(TOPIC)
    acks: list[tuple[float, float]] = []  # (sent, acknowledged), monotonic
    failed = [0]
    running = True

    def settled(task: asyncio.Task, sent: float) -> None:
        if task.exception() is None:
            acks.append((sent, time.monotonic()))
        else:
            failed[0] += 1

    async def send_forever() -> None:
        body = b"x" * 1024
        while running:
            sent = time.monotonic()
            task = asyncio.ensure_future(producer.send(TOPIC, body))
            task.add_done_callback(lambda t, sent=sent: settled(t, sent))
            await asyncio.sleep(args.interval_ms / 1000)

    sender = asyncio.ensure_future(send_forever())
    results = []
    try:
        for trial in range(args.trials):
            await wait_until(lambda: partition_state(pv)["leader_epoch"] >= 1 and len(partition_state(pv)["isr"]) == 2,
                             60, "the partition led and in sync")
            await asyncio.sleep(1.0)  # publishes flowing through the current leader
            before = partition_state(pv)
            victim = before["leader"]
            killed = time.monotonic()
            brokers[victim].kill()
            brokers[victim].wait()
            shutil.rmtree(args.workdir / victim / "data")
            await wait_until(lambda b=before: partition_state(pv)["leader_epoch"] > b["leader_epoch"], 60, "an election")
            elected = time.monotonic() - killed
            await wait_until(lambda k=killed: any(sent >= k for sent, _ in acks), 60, "a publish accepted")
            accepted = min(done for sent, done in acks if sent >= killed) - killed
            print(f"  trial {trial + 1}: killed {victim}; elected {elected:.2f} s, accepted {accepted:.2f} s "
                  f"(new leader {partition_state(pv)['leader']})", flush=True)
            results.append((elected, accepted))
            (args.workdir / victim / "data").mkdir()
            brokers[victim] = start(victim)  # empty: it catches up as a follower
    finally:
        running = False
        await sender
        print(f"  {len(acks):,} publishes acknowledged, {failed[0]} failed")
        await producer.close()
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--session-timeout-s", type=float, default=2.0)
    parser.add_argument("--interval-ms", type=float, default=5.0)
    args = parser.parse_args()
    lock = hold_bench_lock()  # noqa: F841  (held until the process ends)
    nodes = [f"bench-b{i}" for i in range(3)]
    with bench_chroot("sy-failover-bench", topics=(), min_insync=1) as (zk, pv):
        pv.topic(TOPIC, replication_factor=2)
        pv.grant(TOPIC, APP)
        pv.placement(TOPIC, 1, 2, nodes)
        args.workdir = Path(tempfile.mkdtemp(prefix="failover-", dir=STATE))
        secret = args.workdir / "cluster-secret"
        secret.write_text(uuid.uuid4().hex + uuid.uuid4().hex)
        secret.chmod(0o600)
        os.environ["SWITCHYARD_BROKER_CLUSTER_SECRET_FILE"] = str(secret)  # the brokers inherit the file's name

        def start(node: str):
            return start_broker(zk, args.workdir / node / "data", "batch", False,
                                port=BROKER_PORT + 2 * nodes.index(node),
                                extra=("--node-id", node, "--zk-session-timeout-s", str(args.session_timeout_s)))

        brokers = {}
        try:
            for node in nodes:
                (args.workdir / node / "data").mkdir(parents=True)
                brokers[node] = start(node)
            loop = new_event_loop()
            results = loop.run_until_complete(trials(args, zk, pv, brokers, start))
            loop.close()
        finally:
            for proc in brokers.values():
                proc.terminate()
                proc.wait(timeout=30)
            shutil.rmtree(args.workdir, ignore_errors=True)
    elected, accepted = zip(*results, strict=True)
    print(f"failover bench: 3 brokers, 1 partition, replication factor 2, min_insync 1, session timeout "
          f"{args.session_timeout_s:g} s, a 1 KiB publish every {args.interval_ms:g} ms, {os.cpu_count()} cores, "
          f"{len(results)} trials")
    print(f"  kill -> elected  median {statistics.median(elected):.2f} s (trials: "
          f"{', '.join(f'{v:.2f}' for v in elected)})")
    print(f"  kill -> accepted median {statistics.median(accepted):.2f} s (trials: "
          f"{', '.join(f'{v:.2f}' for v in accepted)}); target <= 5 s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
