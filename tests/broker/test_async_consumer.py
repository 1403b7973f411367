"""AsyncConsumer through a real broker: a handler that returns acks its message, one that raises nacks it
and the message comes back after the binding's backoff — for a coroutine handler (a task per batch) and a
plain one (run inline on the loop)."""

from __future__ import annotations

import asyncio
import time

import pytest

from broker_core.client import AsyncConsumer, AsyncProducer
from tests.broker.conftest import APP


async def until(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.02)


@pytest.mark.parametrize("kind", ["coroutine", "plain"])
def test_async_consumer_acks_on_return_and_nacks_on_raise(cluster, kind):
    cluster.standard("orders")
    cluster.pv.binding("orders", "billing", APP, backoff_initial_ms=400)
    broker = cluster.broker()
    seen: list[tuple[bytes, int, float]] = []  # (body, attempt, when)

    def record(m):
        seen.append((m.body, m.attempt, time.monotonic()))
        if m.body == b"refuse once" and m.attempt == 1:
            raise RuntimeError("not now")

    async def handle_async(m):
        await asyncio.sleep(0)  # a real coroutine: it yields to the loop before deciding
        record(m)

    async def go():
        consumer = AsyncConsumer("orders", "billing", handle_async if kind == "coroutine" else record,
                                 **cluster.client_kwargs())
        await consumer.start()
        try:
            async with AsyncProducer(**cluster.client_kwargs()) as producer:
                await producer.send("orders", b"fine")
                await producer.send("orders", b"refuse once")
            await until(lambda: len(seen) == 3, 10, "two deliveries and one redelivery")
            await until(lambda: broker.group_stats("orders", "billing").get("acked") == 2, 5, "both acks")
            await asyncio.sleep(0.6)  # longer than the backoff: a second redelivery would show now
            return consumer.acked, consumer.nacked
        finally:
            await consumer.stop()

    acked, nacked = asyncio.run(go())
    assert sorted((body, attempt) for body, attempt, _ in seen) == [
        (b"fine", 1), (b"refuse once", 1), (b"refuse once", 2)]
    refused = [when for body, _, when in seen if body == b"refuse once"]
    assert refused[1] - refused[0] >= 0.35, "redelivered only after the binding's backoff (400 ms)"
    assert (acked, nacked) == (2, 1)
    stats = broker.group_stats("orders", "billing")
    assert (stats["acked"], stats["nacked"], stats["redelivered"], stats["depth"], stats["in_flight"]) == (
        2, 1, 1, 0, 0)
