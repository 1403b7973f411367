"""The producer's queues: messages waiting to be sent, batches, and the waiters settled by the broker's answers."""

from __future__ import annotations

import asyncio
import bisect
import random
import uuid
from dataclasses import dataclass, field
from datetime import datetime

from broker_core.layout import physical_partition
from broker_core.protocol import M_BODY


@dataclass
class Message:
    body: bytes
    message_type: str = "default"
    key: str | None = None
    business_id: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    ttl_ms: int = 0
    delivery_limit: int = 0
    id: str | None = None
    delay: float | None = None  # seconds from now (at most 30 days): delivered then, not before
    deliver_at: datetime | float | None = None  # or a time (aware datetime, or Unix seconds)


class IdMaker:
    """UUID-formatted ids: random per producer, then a counter (cheaper than uuid4 per message)."""

    def __init__(self) -> None:
        self.prefix = str(uuid.uuid4())[:24]
        self.counter = random.getrandbits(32) << 12

    def __call__(self) -> str:
        self.counter += 1
        return f"{self.prefix}{self.counter & 0xFFFFFFFFFFFF:012x}"


class _Waiter:
    """Completion of one send or one send_many (counts down its messages)."""

    __slots__ = ("future", "remaining", "ids")

    def __init__(self, future: asyncio.Future, count: int, ids: list[str] | str):
        self.future = future
        self.remaining = count
        self.ids = ids

    def ok(self, n: int) -> None:
        self.remaining -= n
        if self.remaining <= 0 and not self.future.done():
            self.future.set_result(self.ids)

    def fail(self, exc: BaseException) -> None:
        if not self.future.done():
            self.future.set_exception(exc)


def _resolve(waiters: list, messages: list[list]) -> None:
    """A batch was stored: settle each message's waiter (a future of one send, or a `_Waiter`
    counting down a send_many)."""
    counting, n = None, 0
    for w, m in zip(waiters, messages, strict=True):
        if type(w) is _Waiter:
            if w is not counting:
                if counting is not None:
                    counting.ok(n)
                counting, n = w, 0
            n += 1
        elif not w.done():
            w.set_result(m[0])
    if counting is not None:
        counting.ok(n)


def _reject(waiter, exc: BaseException) -> None:
    if type(waiter) is _Waiter:
        waiter.fail(exc)
    elif not waiter.done():
        waiter.set_exception(exc)


def choose_partition(key: str | None, partitions: int, turn: int) -> int:
    """The partition a message goes to (the one place the SDK decides it): by its key's hash when it has a key
    (stable: its logic partition, `layout.physical_partition`, the function the broker checks ordered topics
    with), else `turn` (the producer's round robin, one turn per batch)."""
    if key is not None:
        return physical_partition(key, partitions)
    return turn % partitions


class _Batch:
    __slots__ = ("topic", "messages", "waiters", "deadline", "partition")

    def __init__(self, topic: str, messages: list[list], waiters: list, deadline: float,
                 partition: int | None = None):
        self.topic = topic
        self.messages = messages
        self.waiters = waiters
        self.deadline = deadline
        self.partition = partition  # None: a topic without placement (any broker takes it)


class _Queued:
    """Messages of one topic waiting to be sent, as parallel lists (batches are cut by slicing)."""

    __slots__ = ("messages", "waiters", "deadlines", "bytes")

    def __init__(self) -> None:
        self.messages: list[list] = []
        self.waiters: list = []  # per message: a Future (one send) or a _Waiter (a send_many)
        self.deadlines: list[float] = []  # per message, never decreasing
        self.bytes = 0

    def cut(self, max_batch: int, max_bytes: int) -> tuple[list[list], list, float]:
        """Take the next batch: at most max_batch messages and (past the first) max_bytes."""
        n = len(self.messages)
        if n <= max_batch and self.bytes <= max_bytes:
            end, size = n, self.bytes
        else:
            end, size = 0, 0
            for m in self.messages[:max_batch]:
                if end and size + len(m[M_BODY]) + 64 > max_bytes:
                    break
                size += len(m[M_BODY]) + 64
                end += 1
        messages, waiters, deadline = self.messages[:end], self.waiters[:end], self.deadlines[0]
        del self.messages[:end], self.waiters[:end], self.deadlines[:end]
        self.bytes -= size
        return messages, waiters, deadline

    def add(self, message: list, waiter, deadline: float) -> None:
        """Queue one message last (`send_nowait`'s own path inlines this: it is the per-message hot path)."""
        self.messages.append(message)
        self.waiters.append(waiter)
        self.deadlines.append(deadline)
        self.bytes += len(message[M_BODY]) + 64

    def add_first(self, message: list, waiter, deadline: float) -> None:
        """Queue one message first (a refused one, queued again ahead of what came since)."""
        self.messages.insert(0, message)
        self.waiters.insert(0, waiter)
        self.deadlines.insert(0, deadline)
        self.bytes += len(message[M_BODY]) + 64

    def prepend(self, other: _Queued) -> None:
        """Put the messages of `other` (queued earlier, for another cluster) before these."""
        self.messages[:0] = other.messages
        self.waiters[:0] = other.waiters
        self.deadlines[:0] = other.deadlines
        self.bytes += other.bytes

    def expire(self, now: float) -> list:
        """Remove the messages whose send timeout passed; returns their waiters."""
        end = bisect.bisect_right(self.deadlines, now)
        waiters = self.waiters[:end]
        self.bytes -= sum(len(m[M_BODY]) + 64 for m in self.messages[:end])
        del self.messages[:end], self.waiters[:end], self.deadlines[:end]
        return waiters
