"""Governance bench: provision 10,000 bindings into a real ZooKeeper, time reconciling them, and measure
approve → visible-in-ZooKeeper latency through a real Celery worker.

    SWITCHYARD_KEEP_SERVICES=1 ./dev test --co -q >/dev/null   # starts PostgreSQL, Redis, ZooKeeper; keeps them; writes env.sh
    . .devstack/test/env.sh && .venv/bin/python bench/governance_bench.py [--bindings 10000] [--samples 200]

It uses a database of its own (switchyard_bench, dropped and re-created) and a fresh ZooKeeper chroot;
both are removed at the end unless --keep. Targets: reconcile of 10,000 bindings ≤ 5 s; p99 ≤ 1 s.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.stack import drop_database, stack_zookeeper, use_database  # noqa: E402

BENCH_DB = "switchyard_bench"


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * len(ordered) + 0.5) - 1))]


def setup_world(zk_connect: str, chroot: str):
    from django.contrib.auth.models import Group, User

    from apps.accounts.models import Team
    from apps.accounts.roles import sync_role_groups
    from apps.clusters import actions as cluster_actions

    sync_role_groups()
    admin = User.objects.create_superuser("bench-admin", "", "x")
    admin.groups.add(Group.objects.get(name="admin"))
    owners = Team.objects.create(name="bench-owner", display_name="Owner")
    consumers = Team.objects.create(name="bench-consumer", display_name="Consumer")
    lead = User.objects.create_user("bench-lead")
    lead.groups.add(Group.objects.get(name="approver"))
    owners.members.add(lead)
    dev = User.objects.create_user("bench-dev")
    dev.groups.add(Group.objects.get(name="developer"))
    consumers.members.add(dev)
    cluster = cluster_actions.create_cluster(actor=admin, name="bench", environment="dev", region="local",
                                             zk_connect=zk_connect, zk_chroot=chroot)
    return cluster, owners, consumers, lead, dev


def bulk_bindings(cluster, owners, consumers, n: int, per_topic: int = 100):
    """Rows for n bindings (n/per_topic topics × per_topic consumer apps), as approvals would leave them."""
    from apps.bindings.models import Binding
    from apps.provisioning.models import SyncState
    from apps.topics.models import App, Topic
    from broker_core.auth import hash_secret

    topics = Topic.objects.bulk_create([
        Topic(name=f"bench-owner.t{i:04d}", team=owners, environment="dev", cluster=cluster,
              message_types=["created", "paid"], expected_peak_mps=10, retention_hours=24)
        for i in range(max(1, n // per_topic))])
    secret_hash = hash_secret("bench-secret")  # one hash for all
    apps = App.objects.bulk_create([App(app_id=f"bench-app-{j:03d}", team=consumers, secret_hash=secret_hash)
                                    for j in range(per_topic)])
    bindings = Binding.objects.bulk_create([
        Binding(topic=t, app=a, group=f"g-{a.app_id}") for t in topics for a in apps][:n], batch_size=2000)
    SyncState.objects.bulk_create(
        [SyncState(cluster=cluster, kind="topic", object_id=t.pk, path=f"/topics/{t.name}", desired_revision=1)
         for t in topics]
        + [SyncState(cluster=cluster, kind="app", object_id=a.pk, path=f"/apps/{a.app_id}", desired_revision=1)
           for a in apps]
        + [SyncState(cluster=cluster, kind="binding", object_id=b.pk, path=f"/bindings/{b.topic.name}/{b.group}",
                     desired_revision=1) for b in bindings], batch_size=2000)
    return len(bindings)


def start_worker(env: dict) -> subprocess.Popen:
    from control_plane.celery import app

    app.control.purge()
    log_path = Path(os.environ.get("SWITCHYARD_STATE", "/tmp")) / "logs" / "governance-bench-worker.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log = open(log_path, "wb")
    proc = subprocess.Popen([sys.executable, "-m", "celery", "-A", "control_plane", "worker", "--pool=solo",
                             "-l", "warning", "-n", f"bench-{os.getpid()}@%h", "--without-gossip",
                             "--without-mingle", "--without-heartbeat"],
                            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the worker exited ({proc.returncode}); see {log_path}")
        try:
            if app.control.ping(timeout=0.5):
                return proc
        except Exception:
            pass
    raise SystemExit("the worker did not start within 60 s")


def stop_worker(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)


def measure_latency(cluster, owners, consumers, lead, dev, samples: int, zk, chroot: str) -> list[float]:
    from apps.bindings import actions as binding_actions
    from apps.governance.workflow import State
    from apps.topics import actions as topic_actions
    from apps.topics.models import Topic

    app, _ = topic_actions.create_app(actor=dev, app_id="bench-latency", team=consumers)
    per_topic = 90
    topics = Topic.objects.bulk_create([
        Topic(name=f"bench-owner.latency-{i}", team=owners, environment="dev", cluster=cluster,
              message_types=["paid"], expected_peak_mps=10, retention_hours=24)
        for i in range((samples + per_topic - 1) // per_topic)])
    latencies = []
    for i in range(samples):
        topic = topics[i // per_topic]
        application = binding_actions.create_binding_application(actor=dev, topic=topic, app=app,
                                                                 group=f"lat-{i}", reason="bench")
        path = f"{chroot}/bindings/{topic.name}/lat-{i}"
        landed = threading.Event()

        def watch(event, landed=landed):
            landed.set()

        if zk.exists(path, watch=watch) is not None:
            raise SystemExit(f"{path} exists before approval")
        start = time.monotonic()
        approved = binding_actions.approve_binding_application(actor=lead, application=application)
        assert approved.state == State.APPROVED
        if not landed.wait(30):
            raise SystemExit(f"binding {i} did not reach ZooKeeper within 30 s")
        latencies.append(time.monotonic() - start)
    return latencies


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bindings", type=int, default=10_000)
    parser.add_argument("--samples", type=int, default=200, help="approvals timed for the latency figures")
    parser.add_argument("--keep", action="store_true", help="keep the bench database and znodes")
    args = parser.parse_args()
    zk_connect = stack_zookeeper()

    use_database(BENCH_DB)
    from kazoo.client import KazooClient

    from apps.audit.context import action_context
    from apps.provisioning.reconcile import reconcile
    from broker_core.cluster.zk_acl import control_credential
    from control_plane import actors

    chroot = f"/bench-{uuid.uuid4().hex[:8]}"
    zk = KazooClient(hosts=zk_connect, timeout=10, auth_data=control_credential().auth_data)  # its nodes have ACLs
    zk.start(timeout=10)
    worker = None
    try:
        with action_context("cli"):
            cluster, owners, consumers, lead, dev = setup_world(zk_connect, chroot)
            t = time.monotonic()
            count = bulk_bindings(cluster, owners, consumers, args.bindings)
            print(f"database rows for {count} bindings: {time.monotonic() - t:.2f} s")

            t = time.monotonic()
            run = reconcile(cluster, repair=True, actor=actors.RECONCILE)
            print(f"provision {run.repaired} objects into ZooKeeper (pipelined, one transaction each, read back, "
                  f"audited): {time.monotonic() - t:.2f} s")
            assert run.missing == run.repaired == run.checked, (run.missing, run.repaired, run.checked)

            timings = []
            for _ in range(3):
                t = time.monotonic()
                run = reconcile(cluster, actor=actors.RECONCILE)
                timings.append(time.monotonic() - t)
                assert run.drift_count == 0, run.items[:3]
            print(f"reconcile {run.checked} objects ({count} bindings) against ZooKeeper, no drift: "
                  f"best {min(timings):.2f} s, worst {max(timings):.2f} s (target ≤ 5 s)")

            sample = [f"{chroot}/bindings/bench-owner.t0000/g-bench-app-{j:03d}" for j in range(0, 100, 10)]
            for path in sample:
                zk.set(path, b'{"hand":"edit"}')
            t = time.monotonic()
            run = reconcile(cluster, repair=True, actor=actors.RECONCILE)
            print(f"reconcile with {run.different} hand-edited nodes and repair them: "
                  f"{time.monotonic() - t:.2f} s")

        env = {**os.environ, "SWITCHYARD_DB_NAME": BENCH_DB}
        worker = start_worker(env)
        with action_context("cli"):
            latencies = measure_latency(cluster, owners, consumers, lead, dev, args.samples, zk, chroot)
        print(f"approve → visible in ZooKeeper over {len(latencies)} approvals (one worker, --pool=solo): "
              f"p50 {statistics.median(latencies) * 1000:.0f} ms, p99 {percentile(latencies, 99) * 1000:.0f} ms, "
              f"max {max(latencies) * 1000:.0f} ms (target p99 ≤ 1000 ms)")
    finally:
        if worker is not None:
            stop_worker(worker)
        if not args.keep:
            zk.delete(chroot, recursive=True)
            drop_database(BENCH_DB)
        zk.stop()
        zk.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
