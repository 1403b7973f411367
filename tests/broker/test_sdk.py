"""SDK pieces that need no broker: batch cutting, send timeouts, ids."""

from __future__ import annotations

import asyncio
import re
import uuid

import pytest

from broker_core import protocol as p
from broker_core.client import AsyncProducer, SendTimeout
from broker_core.client.producer import IdMaker, _Queued


def queued(sizes: list[int], deadline: float = 10.0) -> _Queued:
    q = _Queued()
    for i, size in enumerate(sizes):
        q.messages.append(p.message(f"m{i}", "t", b"x" * size))
        q.waiters.append(i)
        q.deadlines.append(deadline + i)
        q.bytes += size + 64
    return q


def test_batches_are_cut_by_count_and_by_bytes():
    q = queued([10] * 5)
    messages, waiters, deadline = q.cut(max_batch=3, max_bytes=1 << 20)
    assert [m[p.M_ID] for m in messages] == ["m0", "m1", "m2"] and waiters == [0, 1, 2] and deadline == 10.0
    assert len(q.messages) == 2 and q.bytes == 2 * 74
    q = queued([600, 600, 600])
    assert [m[p.M_ID] for m in q.cut(max_batch=100, max_bytes=1000)[0]] == ["m0"]
    q = queued([5000])  # a message larger than max_bytes still goes, alone
    assert len(q.cut(max_batch=100, max_bytes=1000)[0]) == 1 and q.bytes == 0


def test_expired_messages_leave_the_queue():
    q = queued([10] * 4, deadline=1.0)  # deadlines 1, 2, 3, 4
    assert q.expire(now=2.5) == [0, 1]
    assert [m[p.M_ID] for m in q.messages] == ["m2", "m3"] and q.bytes == 2 * 74


def test_a_send_with_no_reachable_broker_times_out():
    async def go():
        producer = AsyncProducer("app", "secret", brokers=["127.0.0.1:27588"], send_timeout=0.6)
        try:
            with pytest.raises(SendTimeout):
                await producer.send("orders", b"x")
        finally:
            await producer.close()

    asyncio.run(go())


def test_ids_are_uuid_shaped_and_unique():
    make = IdMaker()
    ids = [make() for _ in range(10_000)]
    assert len(set(ids)) == len(ids)
    assert all(re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}", i) for i in ids[:50])
    assert uuid.UUID(ids[0]).version == 4
