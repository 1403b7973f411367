"""Small tools shared by the broker tests."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import defaultdict

from broker_core import protocol as p
from broker_core.client._loop import LoopThread
from broker_core.client.connection import BrokerAddress, BrokerConnection


class Received:
    """Thread-safe record of what each consumer got: name -> list of (message id, attempt, time)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.by_consumer: dict[str, list] = defaultdict(list)

    def handler(self, name: str, fail=None):
        def handle(m):
            with self.lock:
                self.by_consumer[name].append((m.id, m.attempt, time.monotonic()))
            if fail is not None and fail(m):
                raise RuntimeError("refused by the test handler")
        return handle

    def ids(self, name: str) -> list[str]:
        with self.lock:
            return [i for i, _, _ in self.by_consumer[name]]

    def count(self, *names: str) -> int:
        with self.lock:
            return sum(len(self.by_consumer[n]) for n in names)


class RawConsumer:
    """A bare protocol consumer running its own loop thread; it records deliveries and never acks
    unless told to."""

    def __init__(self, address: str, app_id: str, secret: str, topic: str, group: str, *, credit: int = 100,
                 ack_timeout_ms: int = 0, heartbeat_ms: int = 1000):
        host, port = address.rsplit(":", 1)
        self.address = BrokerAddress("raw", host, int(port))
        self.args = (app_id, secret, topic, group, credit, ack_timeout_ms, heartbeat_ms)
        self.deliveries: list[tuple[int, int, list, float]] = []  # (seq, attempt, message fields, time)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.conn: BrokerConnection | None = None
        self.sub_id = None
        self.unsubscribed: list[str] = []
        # the consumer's own count of deliveries not answered yet (kept on the loop thread, where
        # deliveries arrive and answers are sent) and the most it ever held
        self.answered = 0
        self.max_unanswered = 0

    def _run(self, coro, timeout=10):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def start(self):
        async def go():
            app_id, secret, topic, group, credit, ack_timeout_ms, heartbeat_ms = self.args
            self.conn = await BrokerConnection.open(self.address, app_id=app_id, secret=secret, client_id="raw",
                                                    heartbeat_ms=heartbeat_ms, on_deliver=self._deliver,
                                                    on_unsubscribed=self._unsub)
            answer = await self.conn.request(p.Subscribe(self.conn.next_ref(), topic, group, credit, ack_timeout_ms))
            self.sub_id = answer.sub_id
            return answer
        return self._run(go())

    def _deliver(self, conn, ev):
        now = time.monotonic()
        for seq, attempt, fields in ev.items:
            self.deliveries.append((seq, attempt, fields, now))
        self.max_unanswered = max(self.max_unanswered, self.unanswered())

    def _unsub(self, conn, ev):
        self.unsubscribed.append(ev.reason)

    def ids(self) -> list[str]:
        return [f[p.M_ID] for _, _, f, _ in self.deliveries]

    def unanswered(self) -> int:
        return len(self.deliveries) - self.answered

    def ack(self, seqs):
        seqs = list(seqs)
        self.loop.call_soon_threadsafe(self._answer, p.Ack(self.sub_id, seqs), len(seqs))

    def nack(self, items):
        """items: [seq, delay_ms (-1: the binding's backoff), reason]"""
        items = list(items)
        self.loop.call_soon_threadsafe(self._answer, p.Nack(self.sub_id, items), len(items))

    def ready(self, credit: int):
        self.loop.call_soon_threadsafe(lambda: self.conn.send(p.Ready(self.sub_id, credit)))

    def _answer(self, event, count: int) -> None:
        self.answered += count
        self.conn.send(event)

    def request(self, event_factory):
        async def go():
            return await self.conn.request(event_factory(self.conn.next_ref()))
        return self._run(go())

    def close(self):
        if self.conn is not None:
            self.loop.call_soon_threadsafe(self.conn.close)
        try:
            self._run(LoopThread._cancel_tasks(), timeout=5)
        except Exception:
            pass
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
