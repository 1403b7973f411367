"""A producer queues a topic's messages in the order they were sent, also while it is still finding the topic's
route and placement (its first sends wait for it). Before the fix, the sends waiting for the topic's link woke up
one loop turn after the link was made, and a send made in that turn found the link and was queued first: a key's
messages swapped (found by `test_ordered_rescale.py`'s pipelining test under CPU load: a key's message 1230 was
stored before its message 0). Real broker, real ZooKeeper; the sends are made one per event loop turn, so some of
them are made while the first ones wait."""

from __future__ import annotations

import asyncio
import threading
import time

from broker_core.client import AsyncProducer, Consumer
from tests.broker.conftest import wait_for
from tests.broker.test_ordered import check_key_order, ordered_cluster


def test_sends_made_while_the_first_ones_wait_for_the_topics_link_are_stored_in_order(cluster):
    ordered_cluster(cluster, partitions=1)
    count, rounds = 3000, 5  # (each round a new producer: a new start, a new chance for the race)

    async def send_one_per_turn(key: str) -> None:
        producer = AsyncProducer(**cluster.client_kwargs(send_timeout=30))
        try:
            sends = []
            for i in range(count):  # (the first ones wait for the route, the placement and a connection)
                sends.append(asyncio.ensure_future(producer.send("orders", f"{key}:{i}".encode(), key=key)))
                await asyncio.sleep(0)
            await asyncio.gather(*sends)
        finally:
            await producer.close()

    keys = [f"k{r}" for r in range(rounds)]
    for key in keys:
        asyncio.run(send_one_per_turn(key))
    lock, seen = threading.Lock(), []

    def handle(m) -> None:
        key, index = m.body.decode().split(":")
        with lock:
            seen.append((time.monotonic(), key, int(index)))

    with Consumer("orders", "billing", handle, **cluster.client_kwargs(credit=500)):
        wait_for(lambda: len({(k, i) for _, k, i in seen}) == count * rounds, 30, "every message handled")
    with lock:
        check_key_order(list(seen), dict.fromkeys(keys, count))
