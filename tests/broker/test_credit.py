"""Per-consumer credit (NSQ's RDY) through a real broker: it bounds what is in flight, `Ready` changes it,
and the binding's max_in_flight caps it."""

from __future__ import annotations

import threading
import time

from broker_core.client import Message, Producer
from tests.broker.conftest import APP, SECRET, wait_for
from tests.broker.helpers import RawConsumer


class InFlightSampler:
    """Polls the broker's /stats for the group's in_flight figure every 10 ms, on its own thread."""

    def __init__(self, broker, topic: str, group: str):
        self.samples: list[int] = []
        self._stop = threading.Event()
        self._args = (broker, topic, group)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        broker, topic, group = self._args
        while not self._stop.wait(0.01):
            try:
                self.samples.append(broker.group_stats(topic, group).get("in_flight", 0))
            except OSError:
                pass

    def most(self, start: int = 0, end: int | None = None) -> int:
        return max(self.samples[start:end])

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


def test_credit_bounds_what_is_in_flight_ready_raises_it_and_the_binding_caps_it(cluster):
    cluster.standard("orders")
    cluster.pv.binding("orders", "billing", APP, max_in_flight=12)
    broker = cluster.broker()
    with Producer(**cluster.client_kwargs()) as producer:
        ids = producer.send_many("orders", [Message(f"order {i}".encode()) for i in range(50)])
    raw = RawConsumer(broker.address, APP, SECRET, "orders", "billing", credit=5, ack_timeout_ms=60_000)
    sampler = InFlightSampler(broker, "orders", "billing")
    try:
        raw.start()
        wait_for(lambda: len(raw.deliveries) == 5, 5, "the first five deliveries")
        time.sleep(0.3)  # a sixth would have arrived by now
        assert len(raw.deliveries) == 5
        stats = broker.group_stats("orders", "billing")
        assert (stats["in_flight"], stats["depth"]) == (5, 45)

        # each ack frees one credit, which the broker fills at once, never past 5
        acked = 0
        while acked < 15:
            raw.ack([raw.deliveries[acked][0]])
            acked += 1
            wait_for(lambda n=acked + 5: len(raw.deliveries) == n, 5, "the freed credit to be used")
        assert raw.max_unanswered == 5
        assert sampler.most() == 5
        credit_five = len(sampler.samples)

        raw.ready(8)
        wait_for(lambda: raw.unanswered() == 8, 5, "the raised credit to be used")
        time.sleep(0.3)
        assert raw.unanswered() == 8 and broker.group_stats("orders", "billing")["in_flight"] == 8

        raw.ready(1000)  # more than the binding allows
        wait_for(lambda: raw.unanswered() == 12, 5, "credit up to the binding's max_in_flight")
        time.sleep(0.3)
        assert raw.unanswered() == 12 and broker.group_stats("orders", "billing")["in_flight"] == 12

        while acked < 50:  # drain the rest at the capped credit
            delivered = len(raw.deliveries)
            raw.ack([seq for seq, _, _, _ in raw.deliveries[acked:delivered]])
            acked = delivered
            wait_for(lambda n=acked: len(raw.deliveries) > n or n == 50, 5, "more deliveries")
        wait_for(lambda: broker.group_stats("orders", "billing")["acked"] == 50, 5, "every ack")
        assert sorted(raw.ids()) == sorted(ids), "each message delivered once"
        assert raw.max_unanswered == 12
        assert sampler.most(0, credit_five) == 5 and sampler.most(credit_five) == 12
    finally:
        sampler.stop()
        raw.close()
