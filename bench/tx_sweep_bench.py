"""Transaction back-check bench: 10,000 stale prepared messages on a real broker, resolved by the sweep
through a real Celery worker, answered by a producer's check listener (or --http: an HTTP check URL).

    SWITCHYARD_KEEP_SERVICES=1 ./dev test --co -q >/dev/null   # starts PostgreSQL, Redis, ZooKeeper; keeps them; writes env.sh
    . .devstack/test/env.sh && .venv/bin/python bench/tx_sweep_bench.py [--messages 10000] [--http]

It uses a database of its own (switchyard_txbench, dropped and re-created), a fresh ZooKeeper chroot, one
broker process and one `celery worker --pool=solo`; it stops them and removes its data at the end unless
--keep. A producer process prepares the messages (AsyncProducer.send_transactional whose local
transaction never ends) and exits; then the sweep (queued like beat would, every second) finds them and
the check tasks resolve them in batches. Prints the time from the first sweep to the last resolution
(target ≤ 60 s) and the checks per second.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.stack import drop_database, scratch, stack_zookeeper, use_database  # noqa: E402
from devstack.waiting import wait_for  # noqa: E402

BENCH_DB = "switchyard_txbench"
APP, SECRET, TOPIC = "bench-tx", "bench-tx-secret", "bench.tx"

PREPARER = textwrap.dedent("""
    import asyncio, os, sys
    from broker_core.client import AsyncProducer

    async def main():
        count = int(sys.argv[5])
        prepared = 0
        done = asyncio.Event()
        never = asyncio.Event()

        async def hang(message_id):
            nonlocal prepared
            prepared += 1
            if prepared == count:
                done.set()
            await never.wait()   # the local transaction never ends

        producer = AsyncProducer(app_id=sys.argv[1], secret=sys.argv[2], zk=sys.argv[3], cache_dir=sys.argv[4])
        tasks = [asyncio.create_task(producer.send_transactional(sys.argv[6], b"order", hang, message_type="paid",
                                                                 business_id="bench-%d" % i))
                 for i in range(count)]
        await asyncio.wait_for(done.wait(), 300)
        print(prepared, flush=True)
        os._exit(0)   # gone without committing anything

    asyncio.run(main())
""")


def free_port_pair() -> int:
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port < 65000:
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port + 1))
                    return port
                except OSError:
                    continue
    raise SystemExit("no free port pair")


def start(name: str, argv: list[str], env: dict, logs: Path) -> subprocess.Popen:
    log = open(logs / f"{name}.log", "wb")
    return subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def stop(proc: subprocess.Popen | None) -> None:
    if proc is None or proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--http", action="store_true", help="answer through an HTTP check URL, not a listener")
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(143))  # clean up (broker, worker, database) when stopped
    zk_connect = stack_zookeeper()
    os.environ.setdefault("SWITCHYARD_BROKER_ADMIN_TOKEN", "tx-bench-" + uuid.uuid4().hex)

    use_database(BENCH_DB)
    from django.contrib.auth.models import User
    from kazoo.client import KazooClient

    from apps.accounts.models import Team
    from apps.clusters import actions as cluster_actions
    from apps.provisioning.desired import topic_doc
    from apps.topics.models import App, Topic
    from apps.transactions.models import PreparedMessage
    from apps.transactions.tasks import sweep_all
    from broker_core.cluster.provision import Provisioner
    from broker_core.layout import LAYOUT
    from control_plane.celery import app as celery_app

    chroot = f"/tx-bench-{uuid.uuid4().hex[:8]}"
    state, logs = scratch("sy-tx-bench-")
    zk = KazooClient(hosts=zk_connect, timeout=10)
    zk.start(timeout=15)
    broker = worker = listener = server = None
    try:
        admin = User.objects.create_superuser("bench-admin", "", "x")
        team = Team.objects.create(name="bench", display_name="Bench")
        cluster = cluster_actions.create_cluster(actor=admin, name="txbench", environment="dev", region="local",
                                                 zk_connect=zk_connect, zk_chroot=chroot,
                                                 backcheck_allow_private=True)  # the check server is on loopback
        topic = Topic.objects.create(name=TOPIC, team=team, environment="dev", cluster=cluster,
                                     message_types=["paid"], expected_peak_mps=10, retention_hours=24,
                                     transactional=True, tx_check_delay_s=1, tx_check_interval_s=5, tx_check_max=15)
        pv = Provisioner(zk, chroot, cluster="txbench")
        pv.meta()
        pv.app(APP, SECRET)
        pv._put(LAYOUT.topic(TOPIC), topic_doc(topic))
        pv.grant(TOPIC, APP)
        port = free_port_pair()
        env = {**os.environ}
        broker = start("tx-bench-broker", [sys.executable, "-m", "broker_core", "--cluster", "txbench", "--zk",
                                           f"{zk_connect}{chroot}", "--data-dir", str(state / "broker"), "--port",
                                           str(port), "--metrics-port", str(port + 1), "--node-id", "txbench-b0"],
                       env, logs)  # the admin token travels in env (SWITCHYARD_BROKER_ADMIN_TOKEN), never argv
        wait_for(lambda: zk.exists(f"{chroot}{LAYOUT.broker('txbench-b0')}"), 30, "the broker to register",
                 error=SystemExit)
        client = {"app_id": APP, "secret": SECRET, "zk": f"{zk_connect}{chroot}", "cache_dir": str(state / "sdk")}

        t0 = time.monotonic()
        out = subprocess.run([sys.executable, "-c", PREPARER, APP, SECRET, client["zk"], client["cache_dir"],
                              str(args.messages), TOPIC], cwd=ROOT, capture_output=True, text=True, timeout=600)
        if out.returncode != 0 or out.stdout.strip() != str(args.messages):
            raise SystemExit(f"the preparing producer failed: {out.stderr[-3000:]}")
        print(f"{args.messages:,} messages prepared by a producer that then exited, in {time.monotonic() - t0:.1f} s")

        if args.http:
            class Handler(BaseHTTPRequestHandler):
                def do_POST(self):
                    self.rfile.read(int(self.headers["Content-Length"]))
                    body = b'{"state": "commit"}'
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)

                def log_message(self, *a):
                    pass

            server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
            threading.Thread(target=server.serve_forever, daemon=True).start()
            App.objects.create(app_id=APP, team=team, secret_hash="x", check_hosts=["127.0.0.1"],
                               check_url=f"http://127.0.0.1:{server.server_port}/check")
            how = "HTTP check URL"
        else:
            from broker_core.client import Producer

            # a producer with a check listener keeps a connection to every live broker of its cluster
            listener = Producer(**client, check_listener=lambda check: "commit")
            listener.send(TOPIC, b"hello", message_type="paid")  # connected (with its listener) from here on
            how = "a restarted producer's check listener"
        time.sleep(1.2)  # every message is past the 1 s delay

        celery_app.control.purge()
        worker = start("tx-bench-worker", [sys.executable, "-m", "celery", "-A", "control_plane", "worker",
                                           "--pool=solo", "-l", "warning", "-n", f"txbench-{os.getpid()}@%h",
                                           "--without-gossip", "--without-mingle", "--without-heartbeat"],
                       {**env, "SWITCHYARD_DB_NAME": BENCH_DB}, logs)
        wait_for(lambda: celery_app.control.ping(timeout=0.5), 60, "the worker", error=SystemExit)

        def resolved() -> int:
            return PreparedMessage.objects.filter(cluster=cluster).exclude(state="prepared").count()

        start_at = time.monotonic()
        last_sweep = 0.0
        while resolved() < args.messages:
            if time.monotonic() - start_at > 300:
                raise SystemExit(f"only {resolved():,} resolved after 300 s")
            if time.monotonic() - last_sweep >= 1.0:  # what beat does, every second here
                sweep_all.delay()
                last_sweep = time.monotonic()
            time.sleep(0.1)
        elapsed = time.monotonic() - start_at
        committed = PreparedMessage.objects.filter(cluster=cluster, state="committed").count()
        from apps.transactions.models import TxCheck

        checks = TxCheck.objects.filter(message__cluster=cluster).count()
        print(f"{args.messages:,} stale prepared messages resolved by the sweep through one Celery worker "
              f"(--pool=solo), answered by {how}: {elapsed:.1f} s (target ≤ 60 s); {committed:,} committed; "
              f"{checks:,} checks, {checks / elapsed:,.0f} checks/s")
        print(json.dumps({"messages": args.messages, "seconds": round(elapsed, 2), "committed": committed,
                          "checks": checks, "checks_per_s": round(checks / elapsed), "via": how}))
        return 0 if elapsed <= 60 and committed == args.messages else 1
    finally:
        if listener is not None:
            listener.close()
        if server is not None:
            server.shutdown()
        stop(worker)
        stop(broker)
        if not args.keep:
            try:
                zk.delete(chroot, recursive=True)
            except Exception:
                pass
            shutil.rmtree(state, ignore_errors=True)
        zk.stop()
        zk.close()
        if not args.keep:
            drop_database(BENCH_DB)


if __name__ == "__main__":
    sys.exit(main())
