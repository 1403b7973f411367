"""A producer in its own process, for the killed-producer tests.

    python -m tests.broker.tx_producer_proc prepare <zk> <topic> <count>
        prepares <count> messages, prints each id on a line, then dies with os._exit (no commit, no close)
    python -m tests.broker.tx_producer_proc listen <zk> <topic> <answers.json>
        a new producer with a check listener answering from the JSON file {message_id: answer}
        (absent: "unknown"); prints "ready" once connected to every broker, then runs until killed
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from broker_core.client import Producer
from tests.broker.conftest import APP, SECRET


def main() -> None:
    mode, zk, topic, arg = sys.argv[1:5]
    cache = Path(os.environ.get("SY_TEST_CACHE", "/tmp/sy-broker/sdk-cache"))
    if mode == "prepare":
        producer = Producer(app_id=APP, secret=SECRET, zk=zk, cache_dir=cache)
        for i in range(int(arg)):
            prepared = producer.prepare(topic, f"tx body {i}".encode(), message_type="order.created")
            print(prepared.message_id, flush=True)
        os._exit(0)  # killed before committing: no EndTx, no goodbye
    answers_path = Path(arg)

    def listener(check):
        answers = json.loads(answers_path.read_text())
        return answers.get(check.message_id, "unknown")

    producer = Producer(app_id=APP, secret=SECRET, zk=zk, cache_dir=cache, check_listener=listener)
    producer.connect(topic, timeout=20)
    print("ready", flush=True)
    while True:
        time.sleep(1)


if __name__ == "__main__":
    main()
