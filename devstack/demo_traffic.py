"""A little producer/consumer traffic on the demo clusters (dev-a and prod-a), for `./dev up`.

    python devstack/demo_traffic.py [CLUSTER ...]      (ZooKeeper from $SWITCHYARD_ZK)

Per cluster: one producer sends a few messages a second on the topic `demo-orders` (types
order.created / order.paid / order.shipped); the group `demo-billing` (clustering, two consumers)
acks them, refusing one now and then so retries show in the traces, and `demo-audit` (broadcast)
sees everything. It runs until stopped (`./dev down` stops it by its PID).
"""

from __future__ import annotations

import logging
import os
import random
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kazoo.client import KazooClient  # noqa: E402

from broker_core.client import Consumer, Message, Producer, SwitchyardError  # noqa: E402
from broker_core.layout import LAYOUT  # noqa: E402
from broker_core.provision import Provisioner  # noqa: E402

log = logging.getLogger("demo-traffic")

CLUSTERS = ("dev-a", "prod-a")
APP_ID = "demo-traffic"
SECRET = "demo-traffic-secret"  # demo only: a real app's secret comes from the control plane
TOPIC = "demo-orders"
TYPES = ("order.created", "order.paid", "order.shipped")


def seed_demo_layout(zk: KazooClient, cluster: str) -> None:
    """DEMO SEEDING. Write a demo app, topic, grant and two bindings straight into the cluster's
    ZooKeeper when they are absent, so the demo has traffic before anyone uses the approval
    workflow. In real use the control plane is the only writer of these nodes (its reconcile
    will list them as unexpected); nothing that exists already is touched."""
    pv = Provisioner(zk, f"/switchyard/{cluster}", cluster=cluster)
    if not pv.exists(LAYOUT.META):
        pv.meta()
    if not pv.exists(LAYOUT.app(APP_ID)):
        pv.app(APP_ID, SECRET, team="demo", iterations=60_000)
    if not pv.exists(LAYOUT.topic(TOPIC)):
        pv.topic(TOPIC, message_types=list(TYPES))
    if not pv.exists(LAYOUT.grant(TOPIC, APP_ID)):
        pv.grant(TOPIC, APP_ID)
    if not pv.exists(LAYOUT.binding(TOPIC, "demo-billing")):
        pv.binding(TOPIC, "demo-billing", APP_ID, mode="clustering", delivery_limit=5, backoff_initial_ms=500)
    if not pv.exists(LAYOUT.binding(TOPIC, "demo-audit")):
        pv.binding(TOPIC, "demo-audit", APP_ID, mode="broadcast", selector="order.*")


def billing_handler(message) -> None:
    if random.random() < 0.05 and message.attempt == 1:
        raise RuntimeError("demo: billing service busy, try again")  # a nack: redelivered after backoff


def run_cluster(zk_hosts: str, cluster: str, stop: threading.Event) -> None:
    zk = f"{zk_hosts}/switchyard/{cluster}"
    kwargs = {"app_id": APP_ID, "secret": SECRET, "zk": zk, "client_id": f"demo-{cluster}"}
    consumers: list[Consumer] = []
    producer = None
    while not stop.is_set():
        try:
            if not consumers:
                consumers = [Consumer(TOPIC, "demo-billing", billing_handler, **kwargs).start(timeout=10)
                             for _ in range(2)]
                consumers.append(Consumer(TOPIC, "demo-audit", lambda m: None, **kwargs).start(timeout=10))
                producer = Producer(**kwargs)
                log.info("%s: traffic started", cluster)
            n = random.randint(1, 4)
            producer.send_many(TOPIC, [Message(f'{{"order": {random.randint(1, 99999)}}}'.encode(),
                                               message_type=random.choice(TYPES),
                                               business_id=f"order-{random.randint(1, 99999)}")
                                       for _ in range(n)])
        except SwitchyardError as exc:
            log.warning("%s: %s; retrying in 5 s", cluster, exc)
            for c in consumers:
                c.stop()
            consumers = []
            if producer is not None:
                producer.close()
                producer = None
            stop.wait(5)
            continue
        stop.wait(random.uniform(0.5, 1.5))
    for c in consumers:
        c.stop()
    if producer is not None:
        producer.close()


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s demo-traffic %(levelname)s %(message)s")
    logging.getLogger("kazoo").setLevel(logging.WARNING)
    zk_hosts = os.environ.get("SWITCHYARD_ZK", "127.0.0.1:27102")
    clusters = sys.argv[1:] or list(CLUSTERS)
    zk = KazooClient(hosts=zk_hosts, timeout=10)
    while True:
        try:
            zk.start(timeout=15)
            for cluster in clusters:
                seed_demo_layout(zk, cluster)
            break
        except Exception as exc:  # kazoo raises several kinds (timeouts, connection loss) while it starts
            log.warning("ZooKeeper %s not ready (%s); retrying", zk_hosts, exc)
            time.sleep(2)
    zk.stop()
    zk.close()
    stop = threading.Event()
    threads = [threading.Thread(target=run_cluster, args=(zk_hosts, c, stop), name=c, daemon=True) for c in clusters]
    for t in threads:
        t.start()
    try:
        while any(t.is_alive() for t in threads):
            time.sleep(1)
    except KeyboardInterrupt:
        stop.set()
    return 0


if __name__ == "__main__":
    sys.exit(main())
