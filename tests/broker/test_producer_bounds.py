"""The producer's time bounds against real brokers: a batch sent and held unanswered by its broker fails with
`SendTimeout` once the send timeout passes (before, only queued messages did; a sent batch waited for the broker),
and closing a producer first lets what it queued be acknowledged (before, close failed it) — within a bound."""

from __future__ import annotations

import asyncio
import signal

import pytest

from broker_core.client import AsyncProducer, SendTimeout
from broker_core.client.errors import ConnectionLost
from tests.broker.conftest import wait_for
from tests.broker.test_replication import in_sync, replicated


def frozen_broker(cluster):
    """A broker the producer is connected to, then stopped (SIGSTOP: its socket stays open, nothing answers)."""
    cluster.standard("orders")
    return cluster.broker()


def test_a_batch_the_broker_holds_unanswered_fails_after_the_send_timeout(cluster):
    """A leader holds a publish until its follower stored it; the follower is frozen, so the leader (alive, its
    connection answering pings) does not answer the publish for its ack timeout (5 s). The send fails with
    `SendTimeout` once its own 1 s passed, saying it may have been stored."""
    leader, follower = replicated(cluster, min_insync=2)
    wait_for(lambda: in_sync(leader) == 2, 20, "the follower in sync")

    async def go():
        async with AsyncProducer(**cluster.client_kwargs(send_timeout=1.0)) as producer:
            await producer.send("orders", b"answered")
            follower.kill(signal.SIGSTOP)
            try:
                with pytest.raises(SendTimeout) as timed_out:
                    await asyncio.wait_for(producer.send("orders", b"held"), 15)
                assert "has not answered" in str(timed_out.value)
                assert next(iter(producer.stats().values()))["in_flight_batches"] == 0
            finally:
                follower.kill(signal.SIGCONT)

    asyncio.run(go())


def test_close_lets_queued_messages_be_acknowledged_first(cluster):
    frozen_broker(cluster)

    async def go():
        producer = AsyncProducer(**cluster.client_kwargs())
        await producer.connect("orders")
        sent = [producer.send_nowait("orders", b"m%d" % i) for i in range(2_000)]
        await producer.close()
        return sent

    sent = asyncio.run(go())
    assert all(f.done() and f.exception() is None for f in sent), "every queued message acknowledged"
    assert cluster.brokers[0].stats()["topics"]["orders"]["published"] == 2_000


def test_close_is_bounded_and_fails_what_is_left(cluster):
    broker = frozen_broker(cluster)

    async def go():
        producer = AsyncProducer(**cluster.client_kwargs(send_timeout=30))
        await producer.send("orders", b"answered")
        broker.kill(signal.SIGSTOP)
        try:
            pending = producer.send_nowait("orders", b"never answered")
            await asyncio.wait_for(producer.close(timeout=0.5), 10)
            return pending
        finally:
            broker.kill(signal.SIGCONT)

    pending = asyncio.run(go())
    assert isinstance(pending.exception(), ConnectionLost)
