"""A little producer/consumer traffic on the demo clusters (dev-a and prod-a), for `./dev up`.

    python devstack/demo_traffic.py --secrets-file FILE [CLUSTER ...]   (ZooKeeper from $SWITCHYARD_ZK)

It uses what `manage.py seed_demo --secrets-file FILE` created through the approval workflow (see
apps/governance/demo.py): the app `payments-demo` produces, the app `logistics-demo` consumes; their
secrets are read from FILE. Until provisioning has written the topics and bindings into a cluster's
ZooKeeper, the clients are refused and retry every 5 s.

Per cluster:
- `payments.demo-orders`: a few messages a second (order.created / order.paid / order.shipped). The
  group `shipping` (clustering, two consumers, order.paid only) refuses one now and then so retries
  show, and always refuses "poison" orders, which end in its dead-letter queue (something to re-drive);
  `audit-feed` (broadcast) sees every order.* message.
- `payments.demo-payments` (transactional): a payment every few seconds through `send_transactional`;
  one in ten local transactions fails (rolled back) and one in ten is "forgotten" after the prepare, so
  the control plane's back-checks ask the producer's check listener, which answers commit, rollback or
  (now and then) unknown — those end unresolved after the topic's last check. `ledger` consumes them.
It runs until stopped (`./dev down` stops it by its PID).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from broker_core.client import Consumer, Message, Producer, SwitchyardError  # noqa: E402

log = logging.getLogger("demo-traffic")

CLUSTERS = ("dev-a", "prod-a")
PRODUCER_APP = "payments-demo"  # apps/governance/demo.py makes these
CONSUMER_APP = "logistics-demo"
ORDERS = "payments.demo-orders"
PAYMENTS = "payments.demo-payments"
TYPES = ("order.created", "order.paid", "order.shipped")


def shipping_handler(message) -> None:
    if message.business_id and message.business_id.startswith("poison-"):
        raise RuntimeError("demo: this order can never be shipped")  # dead-lettered after the delivery limit
    if random.random() < 0.05 and message.attempt == 1:
        raise RuntimeError("demo: shipping service busy, try again")  # a nack: redelivered after backoff


class Ledger:
    """The producer's local record of payments whose commit it "forgot": what its check listener answers."""

    def __init__(self):
        self.decisions: dict[str, str] = {}

    def forget(self, message_id: str) -> None:
        self.decisions[message_id] = random.choices(["commit", "rollback", "unknown"], [6, 3, 1])[0]

    def answer(self, check) -> str:
        return self.decisions.get(check.message_id, "commit")


def payment(producer: Producer, ledger: Ledger) -> None:
    body = json.dumps({"payment": random.randint(1, 99999), "cents": random.randint(100, 50000)}).encode()
    business_id = f"pay-{random.randint(1, 999999)}"
    roll = random.random()
    if roll < 0.1:  # the process "crashes" between prepare and commit: back-checks settle it
        prepared = producer.prepare(PAYMENTS, body, message_type="payment.authorized", business_id=business_id)
        ledger.forget(prepared.message_id)
        return

    def local_transaction(message_id: str) -> None:
        if roll < 0.2:
            raise ValueError("demo: card declined")

    try:
        producer.send_transactional(PAYMENTS, body, local_transaction, message_type="payment.authorized",
                                    business_id=business_id)
    except ValueError:
        pass  # rolled back by the SDK


def run_cluster(zk_hosts: str, cluster: str, secrets: dict[str, str], stop: threading.Event) -> None:
    zk = f"{zk_hosts}/switchyard/{cluster}"
    as_producer = {"app_id": PRODUCER_APP, "secret": secrets[PRODUCER_APP], "zk": zk,
                   "client_id": f"demo-producer-{cluster}"}
    as_consumer = {"app_id": CONSUMER_APP, "secret": secrets[CONSUMER_APP], "zk": zk,
                   "client_id": f"demo-consumer-{cluster}"}
    ledger = Ledger()
    consumers: list[Consumer] = []
    producer = None
    beat = 0
    while not stop.is_set():
        try:
            if not consumers:
                consumers = [Consumer(ORDERS, "shipping", shipping_handler, **as_consumer).start(timeout=10)
                             for _ in range(2)]
                consumers.append(Consumer(ORDERS, "audit-feed", lambda m: None, **as_consumer).start(timeout=10))
                consumers.append(Consumer(PAYMENTS, "ledger", lambda m: None, **as_consumer).start(timeout=10))
                producer = Producer(**as_producer, check_listener=ledger.answer)
                log.info("%s: traffic started", cluster)
            n = random.randint(1, 4)
            producer.send_many(ORDERS, [Message(f'{{"order": {random.randint(1, 99999)}}}'.encode(),
                                                message_type=random.choice(TYPES),
                                                business_id=("poison-" if random.random() < 0.01 else "order-")
                                                + str(random.randint(1, 99999)))
                                        for _ in range(n)])
            beat += 1
            if beat % 3 == 0:
                payment(producer, ledger)
        except SwitchyardError as exc:
            log.warning("%s: %s; retrying in 5 s (the demo topics may not be provisioned yet)", cluster, exc)
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
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--secrets-file", type=Path, required=True, help="written by `manage.py seed_demo`")
    parser.add_argument("clusters", nargs="*", default=list(CLUSTERS))
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s demo-traffic %(levelname)s %(message)s")
    logging.getLogger("kazoo").setLevel(logging.WARNING)
    zk_hosts = os.environ.get("SWITCHYARD_ZK", "127.0.0.1:27102")
    try:
        secrets = json.loads(args.secrets_file.read_text())
        missing = {PRODUCER_APP, CONSUMER_APP} - set(secrets)
        if missing:
            raise ValueError(f"no secret for {', '.join(sorted(missing))}")
    except (OSError, ValueError) as exc:
        log.error("cannot read the demo apps' secrets from %s (%s): run `manage.py seed_demo --secrets-file %s`",
                  args.secrets_file, exc, args.secrets_file)
        return 2
    stop = threading.Event()
    threads = [threading.Thread(target=run_cluster, args=(zk_hosts, c, secrets, stop), name=c, daemon=True)
               for c in args.clusters]
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
