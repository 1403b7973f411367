"""Shared pieces of the transaction tests with real brokers: the control-plane cluster and topic over a
broker test cluster's chroot, a producer process that dies in its local transaction, sweeps through the
real Celery worker, and a tiny HTTP check server."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from broker_core.layout import LAYOUT
from devstack.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]


def control_plane_cluster(admin, broker_cluster):
    """The Django cluster the sweep walks: the broker test cluster's ZooKeeper chroot."""
    from apps.clusters import actions

    return actions.create_cluster(actor=admin, name=broker_cluster.name[:40].strip("-").lower().replace("_", "-"),
                                  environment="dev", region="local", zk_connect=broker_cluster.zk_hosts,
                                  zk_chroot=broker_cluster.chroot, storage_level="file",
                                  backcheck_allow_private=True)  # the tests' check servers are on 127.0.0.1


def transactional_topic(cp_cluster, broker_cluster, name="orders", *, delay=1, interval=1, max_checks=3,
                        team="payments"):
    """A transactional topic row with short back-check timing, and its document (as the control plane
    writes it) in the broker cluster's ZooKeeper."""
    from apps.accounts.models import Team
    from apps.provisioning.desired import topic_doc
    from apps.topics.models import Topic

    topic = Topic.objects.create(
        name=name, team=Team.objects.get(name=team), environment="dev", cluster=cp_cluster,
        message_types=["created", "paid"], expected_peak_mps=100, retention_hours=24, storage_level="file",
        transactional=True, tx_check_delay_s=delay, tx_check_interval_s=interval, tx_check_max=max_checks)
    broker_cluster.pv._put(LAYOUT.topic(name), topic_doc(topic))
    return topic


def drive_sweeps(predicate, timeout: float = 60, every: float = 0.7, what: str = "the sweep's outcome"):
    """Beat's part, faster: queue the sweep task on the real worker until predicate() holds."""
    from apps.transactions.tasks import sweep_all

    def swept():
        value = predicate()
        if not value:
            sweep_all.delay()
        return value

    return wait_for(swept, timeout, what, interval=every)


DYING_PRODUCER = textwrap.dedent("""
    import os, sys, threading, time
    from broker_core.client import Producer

    kwargs = dict(app_id=sys.argv[1], secret=sys.argv[2], zk=sys.argv[3], cache_dir=sys.argv[4])
    topic, count = sys.argv[5], int(sys.argv[6])
    producer = Producer(**kwargs)

    def hang(message_id):
        os.write(1, (message_id + "\\n").encode())  # one write: two threads' lines never interleave
        time.sleep(3600)   # the local transaction never ends: the process is killed in it

    for i in range(count):
        threading.Thread(target=producer.send_transactional, args=(topic, b"tx-%d" % i, hang),
                         kwargs={"business_id": "dying-%d" % i, "message_type": "paid"}, daemon=True).start()
    time.sleep(3600)
""")


def prepare_and_die(broker_cluster, topic: str, count: int, app: str, secret: str) -> list[str]:
    """A producer process prepares `count` messages, is killed inside its local transactions, and is gone."""
    proc = subprocess.Popen([sys.executable, "-c", DYING_PRODUCER, app, secret, broker_cluster.zk,
                             str(broker_cluster.cache_dir), topic, str(count)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=ROOT, text=True)
    ids = []
    try:
        deadline = time.monotonic() + 30
        while len(ids) < count and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                raise AssertionError(f"the producer exited: {proc.stderr.read()[-3000:]}")
            ids.append(line.strip())
    finally:
        proc.kill()
        proc.wait()
    assert len(ids) == count and all(re.fullmatch(r"[0-9a-f-]{36}", i) for i in ids), f"not message ids: {ids}"
    return ids


class CheckServer:
    """A real HTTP check URL: answers {"state": decide(payload)} and remembers what it was asked."""

    def __init__(self, decide):
        self.asked: list[dict] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                payload = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.asked.append(payload)
                body = json.dumps({"state": decide(payload)}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/tx-check"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()
