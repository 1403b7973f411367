"""A consumer process for the tests: subscribes, prints each message id it gets, never acks (its
handler blocks), so everything it received stays in flight until the process dies.

    python -m tests.broker.consumer_proc ZK CACHE_DIR TOPIC GROUP APP SECRET CREDIT
"""

from __future__ import annotations

import os
import sys
import threading

from broker_core.client import Consumer


def main() -> None:
    zk, cache_dir, topic, group, app, secret, credit = sys.argv[1:8]
    block = threading.Event()

    def handle(message):
        os.write(1, f"got {message.id}\n".encode())  # one write: handlers in several threads never interleave
        block.wait()  # never returns: no ack

    consumer = Consumer(topic, group, handle, app_id=app, secret=secret, zk=zk, cache_dir=cache_dir,
                        credit=int(credit), ack_timeout_ms=120_000, heartbeat_ms=1000)
    consumer.start()
    print("subscribed", flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    main()
