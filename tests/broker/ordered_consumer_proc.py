"""A consumer process for the ordered rescale test: subscribes, and for each message prints
`<monotonic time> <key> <index>` (the body is `key:index`), takes HANDLE_S seconds more, and returns (then the SDK
acknowledges it).

    SWITCHYARD_TEST_SECRET=... python -m tests.broker.ordered_consumer_proc ZK CACHE_DIR TOPIC GROUP APP CREDIT HANDLE_S

The app's secret comes from the environment, never the command line. CLOCK_MONOTONIC is one clock for every process
of the machine, so the test can merge what several consumers printed in the order they handled it.
"""

from __future__ import annotations

import os
import sys
import threading
import time

from broker_core.client import Consumer


def main() -> None:
    zk, cache_dir, topic, group, app, credit, handle_s = sys.argv[1:8]
    out = sys.stdout
    pause = float(handle_s)  # each message takes this long to handle (a backlog builds behind a fast producer)

    def handle(message):
        key, index = message.body.decode().split(":")
        out.write(f"{time.monotonic():.6f} {key} {index}\n")
        out.flush()
        time.sleep(pause)

    consumer = Consumer(topic, group, handle, app_id=app, secret=os.environ["SWITCHYARD_TEST_SECRET"], zk=zk,
                        cache_dir=cache_dir, credit=int(credit), heartbeat_ms=1000)
    consumer.start()
    out.write("subscribed\n")
    out.flush()
    threading.Event().wait()


if __name__ == "__main__":
    main()
