"""Topic migration bench: a producer at a steady rate and a consumer group of two, all with the SDK, keep
running while the topic moves between two clusters of real brokers, driven by a real Celery worker.

    SWITCHYARD_KEEP_SERVICES=1 ./dev test --co -q >/dev/null   # starts PostgreSQL, Redis, ZooKeeper; keeps them; writes env.sh
    . .devstack/test/env.sh && .venv/bin/python bench/migration_bench.py [--rate 2000] [--backlog 100000]

Two runs: the topic moves from cluster a to b with no backlog, then back from b to a after a backlog of
`--backlog` messages was built with nobody consuming (the consumers start with the move). For each: the
migration time (start of the move to its end), messages lost (acknowledged to the producer, never consumed:
must be 0), duplicates, producer errors and the longest publish stall (the longest a send waited for its
acknowledgement, and the longest time without any acknowledgement). Targets: no producer error, stall ≤ 1 s,
the migration with a 100,000-message backlog ≤ 60 s. It prints figures; it asserts nothing.

It uses a database of its own (switchyard_movebench, dropped and re-created), fresh ZooKeeper chroots, one
broker per cluster, a `celery worker --pool=solo`, and the producer and each consumer in a process of its own;
it stops them and removes its data at the end unless --keep.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from kazoo.client import KazooClient  # noqa: E402

from bench.stack import drop_database, scratch, stack_zookeeper, use_database  # noqa: E402
from bench.tx_sweep_bench import free_port_pair, start, stop  # noqa: E402
from broker_core.cluster.zk_acl import control_credential  # noqa: E402
from devstack.waiting import wait_for  # noqa: E402

BENCH_DB = "switchyard_movebench"
TEAM, TOPIC, GROUP = "bench", "bench.moving", "movers"

PRODUCER = textwrap.dedent("""
    import asyncio, json, os, sys, time
    from broker_core.client import AsyncProducer

    async def main():
        client, topic, rate, stop_file, out = json.loads(sys.argv[1]), sys.argv[2], float(sys.argv[3]), sys.argv[4], sys.argv[5]
        producer = AsyncProducer(**client)
        await producer.connect(topic)
        loop = asyncio.get_running_loop()
        acked, errors, pending = [], [], set()
        worst = [0.0]
        last_ack = [loop.time()]
        gap = [0.0]

        async def one(i):
            t0 = loop.time()
            try:
                acked.append(await producer.send(topic, b"m-%d" % i, message_type="paid"))
                now = loop.time()
                gap[0] = max(gap[0], now - last_ack[0])
                last_ack[0] = now
            except Exception as exc:
                errors.append(f"{type(exc).__name__}: {exc}")
            worst[0] = max(worst[0], loop.time() - t0)

        print("ready", flush=True)
        start, n = loop.time(), 0
        while not os.path.exists(stop_file):
            due = int((loop.time() - start) * rate)
            while n < due:
                task = asyncio.create_task(one(n))
                pending.add(task)
                task.add_done_callback(pending.discard)
                n += 1
            await asyncio.sleep(0.002)
        await asyncio.gather(*pending)
        await producer.close()
        elapsed = loop.time() - start
        with open(out, "w") as f:
            json.dump({"acked": acked, "errors": errors, "sent": n, "worst_s": worst[0], "gap_s": gap[0],
                       "rate": n / elapsed}, f)

    asyncio.run(main())
""")

CONSUMER = textwrap.dedent("""
    import asyncio, json, os, sys
    from broker_core.client import AsyncConsumer

    async def main():
        client, topic, group, stop_file, out = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]
        got = []
        consumer = AsyncConsumer(topic, group, lambda m: got.append(m.id), credit=2000, **client)
        await consumer.start()
        print("ready", flush=True)
        while not os.path.exists(stop_file):
            await asyncio.sleep(0.05)
            with open(out + ".count", "w") as f:
                f.write(str(len(got)))
        await consumer.stop()
        with open(out, "w") as f:
            json.dump(got, f)

    asyncio.run(main())
""")

BACKLOG = textwrap.dedent("""
    import asyncio, json, sys
    from broker_core.client import AsyncProducer, Message

    async def main():
        client, topic, count = json.loads(sys.argv[1]), sys.argv[2], int(sys.argv[3])
        async with AsyncProducer(**client) as producer:
            ids = []
            for i in range(0, count, 1000):
                ids += await producer.send_many(topic, [Message(b"b-%d" % j, message_type="paid")
                                                        for j in range(i, min(count, i + 1000))])
        json.dump(ids, sys.stdout)

    asyncio.run(main())
""")


def spawn_script(name: str, script: str, args: list[str], logs: Path) -> subprocess.Popen:
    log = open(logs / f"{name}.log", "wb")
    proc = subprocess.Popen([sys.executable, "-c", script, *args], cwd=ROOT, stdout=subprocess.PIPE, stderr=log,
                            start_new_session=True, text=True)
    line = proc.stdout.readline()
    if line.strip() != "ready":
        raise SystemExit(f"{name} did not start; see {logs / (name + '.log')}")
    return proc


def consumed(work: Path) -> int:
    """Deliveries so far, as the consumer processes count them."""
    total = 0
    for counter in work.glob("got-*.count"):
        try:
            total += int(counter.read_text() or 0)
        except ValueError:  # being rewritten
            pass
    return total


def run_case(label: str, *, topic, source, target, rate: float, backlog: int, client: dict, state: Path,
             logs: Path, admin) -> dict:
    from apps.moves import actions
    from apps.moves.models import TopicMove

    work = state / label
    work.mkdir()
    stop_producing, stop_consuming = work / "stop-producing", work / "stop-consuming"
    client = {role: {**kwargs, "zk": source.zk_hosts} for role, kwargs in client.items()}  # found where it is served
    backlog_ids: list[str] = []
    if backlog:
        t0 = time.monotonic()
        out = subprocess.run([sys.executable, "-c", BACKLOG, json.dumps(client["producer"]), TOPIC, str(backlog)],
                             cwd=ROOT, capture_output=True, text=True, timeout=900)
        if out.returncode != 0:
            raise SystemExit(f"building the backlog failed: {out.stderr[-3000:]}")
        backlog_ids = json.loads(out.stdout)
        print(f"[{label}] backlog of {len(backlog_ids):,} messages on {source.name} in {time.monotonic() - t0:.1f} s")
    consumers = [spawn_script(f"{label}-consumer-{i}", CONSUMER,
                              [json.dumps(client["consumer"]), TOPIC, GROUP, str(stop_consuming),
                               str(work / f"got-{i}")],
                              logs) for i in range(2)]
    producer = spawn_script(f"{label}-producer", PRODUCER, [json.dumps(client["producer"]), TOPIC, str(rate),
                                                            str(stop_producing), str(work / "produced")], logs)
    time.sleep(3)  # steady state before the move
    t0 = time.monotonic()
    move = actions.start_move(actor=admin, topic=topic, target=target, dead_letters="move")
    last, shown_at = None, 0.0
    while True:
        move = TopicMove.objects.get(pk=move.pk)
        step = move.steps.filter(name=move.step).first()
        if move.step != last or time.monotonic() - shown_at >= 2 or not move.active:
            print(f"  {time.monotonic() - t0:5.1f} s  {move.get_step_display()}: {step.summary if step else ''}",
                  flush=True)
            last, shown_at = move.step, time.monotonic()
        if not move.active:
            break
        if time.monotonic() - t0 > 600:
            raise SystemExit(f"[{label}] the move did not end within 600 s")
        time.sleep(0.25)
    took = time.monotonic() - t0
    time.sleep(3)  # publishing on the target for a while
    stop_producing.touch()
    producer.wait(timeout=120)
    produced = json.loads((work / "produced").read_text())
    expected = set(produced["acked"]) | set(backlog_ids)
    seen, quiet_since = consumed(work), time.monotonic()
    while seen < len(expected) and time.monotonic() - quiet_since < 15:  # caught up, or nothing more for 15 s
        time.sleep(0.2)
        if consumed(work) != seen:
            seen, quiet_since = consumed(work), time.monotonic()
    stop_consuming.touch()
    for proc in consumers:
        proc.wait(timeout=120)
    received: list[str] = []
    for i in range(2):
        received += json.loads((work / f"got-{i}").read_text())
    lost = expected - set(received)
    figures = {"case": label, "from": source.name, "to": target.name, "state": move.state, "migration_s": round(took, 1),
               "backlog": len(backlog_ids), "rate": round(produced["rate"]), "acknowledged": len(expected),
               "lost": len(lost), "duplicates": len(received) - len(set(received)),
               "producer_errors": len(produced["errors"]), "longest_stall_s": round(produced["worst_s"], 3),
               "longest_gap_s": round(produced["gap_s"], 3)}
    if produced["errors"]:
        figures["first_errors"] = produced["errors"][:3]
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=float, default=2000, help="messages per second the producer sends")
    parser.add_argument("--backlog", type=int, default=100_000, help="backlog of the second run (0: skip it)")
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(143))  # clean up when stopped
    zk_connect = stack_zookeeper()
    os.environ.setdefault("SWITCHYARD_BROKER_ADMIN_TOKEN", "move-bench-" + uuid.uuid4().hex)

    use_database(BENCH_DB)
    from django.contrib.auth.models import User

    from apps.accounts.models import Team
    from apps.bindings.models import Binding, ProducerGrant
    from apps.clusters import actions as cluster_actions
    from apps.provisioning.desired import topic_units
    from apps.provisioning.provision import push
    from apps.provisioning.zk import Session
    from apps.topics.models import App, Topic
    from broker_core.auth import hash_secret
    from control_plane.celery import app as celery_app

    root = f"/move-bench-{uuid.uuid4().hex[:8]}"
    state, logs = scratch("sy-move-bench-")
    procs: list[subprocess.Popen] = []
    try:
        admin = User.objects.create_superuser("bench-admin", "", "x")
        team = Team.objects.create(name=TEAM, display_name="Bench")
        clusters = {name: cluster_actions.create_cluster(actor=admin, name=name, environment="dev", region="local",
                                                         zk_connect=zk_connect, zk_chroot=f"{root}/{name}")
                    for name in ("bench-a", "bench-b")}
        secrets = {"producer": "bench-producer-secret", "consumer": "bench-consumer-secret"}
        producer_app = App.objects.create(app_id="bench-producer", team=team, secret_hash=hash_secret(secrets["producer"]))
        consumer_app = App.objects.create(app_id="bench-consumer", team=team, secret_hash=hash_secret(secrets["consumer"]))
        topic = Topic.objects.create(name=TOPIC, team=team, environment="dev", cluster=clusters["bench-a"],
                                     message_types=["paid"], expected_peak_mps=5000, retention_hours=24)
        ProducerGrant.objects.create(topic=topic, app=producer_app)
        Binding.objects.create(topic=topic, app=consumer_app, group=GROUP, selector_kind="exact",
                               selector_pattern="paid", mode="clustering", delivery_limit=5, ttl_s=3600,
                               backoff_initial_ms=500, backoff_max_ms=30000, backoff_multiplier=2.0,
                               max_in_flight=5000)
        for cluster in clusters.values():  # the chroot and /brokers (brokers may not create them)
            Session(cluster.zk_connect, cluster.zk_chroot).ensure_skeleton()
        push(clusters["bench-a"], topic_units(topic))  # what an approval provisions, done here at once
        for index, name in enumerate(clusters):
            port = free_port_pair()
            procs.append(start(f"move-bench-broker-{index}",
                               [sys.executable, "-m", "broker_core", "--cluster", name, "--zk",
                                f"{zk_connect}{root}/{name}", "--data-dir", str(state / f"broker-{name}"),
                                "--port", str(port), "--metrics-port", str(port + 1), "--node-id", f"{name}-b0"],
                               {**os.environ}, logs))  # the admin token travels in env, never argv
        zk = KazooClient(hosts=zk_connect, timeout=10)
        zk.start(timeout=15)
        for name in clusters:
            wait_for(lambda n=name: zk.exists(f"{root}/{n}/brokers/{n}-b0"), 30, f"the broker of {name}",
                     error=SystemExit)
        zk.stop()
        celery_app.control.purge()
        procs.append(start("move-bench-worker", [sys.executable, "-m", "celery", "-A", "control_plane", "worker",
                                                 "--pool=solo", "-l", "warning", "-n", f"movebench-{os.getpid()}@%h",
                                                 "--without-gossip", "--without-mingle", "--without-heartbeat"],
                           {**os.environ}, logs))
        wait_for(lambda: celery_app.control.ping(timeout=0.5), 60, "the worker", error=SystemExit)
        client = {role: {"app_id": f"bench-{role}", "secret": secrets[role], "cache_dir": str(state / f"sdk-{role}")}
                  for role in secrets}
        results = [run_case("steady", topic=topic, source=clusters["bench-a"], target=clusters["bench-b"],
                            rate=args.rate, backlog=0, client=client, state=state, logs=logs, admin=admin)]
        if args.backlog:
            topic.refresh_from_db()
            results.append(run_case("backlog", topic=topic, source=clusters["bench-b"], target=clusters["bench-a"],
                                    rate=args.rate, backlog=args.backlog, client=client, state=state, logs=logs,
                                    admin=admin))
        print()
        for r in results:
            print(f"{r['case']}: {r['from']} → {r['to']} {r['state']} in {r['migration_s']} s "
                  f"(backlog {r['backlog']:,}, producer {r['rate']:,}/s); {r['acknowledged']:,} acknowledged, "
                  f"lost {r['lost']}, duplicates {r['duplicates']}, producer errors {r['producer_errors']}, "
                  f"longest stall {r['longest_stall_s'] * 1000:.0f} ms (longest without any ack "
                  f"{r['longest_gap_s'] * 1000:.0f} ms)")
        for r in results:
            print(json.dumps(r))
        return 0
    finally:
        for proc in reversed(procs):
            stop(proc)
        if not args.keep:
            zk = KazooClient(hosts=zk_connect, timeout=10, auth_data=control_credential().auth_data)
            zk.start(timeout=15)
            try:
                zk.delete(root, recursive=True)
            except Exception:
                pass
            zk.stop()
            shutil.rmtree(state, ignore_errors=True)
        if not args.keep:
            drop_database(BENCH_DB)


if __name__ == "__main__":
    sys.exit(main())
