"""Consumers: `AsyncConsumer` (asyncio) and `Consumer` (plain threads).

    def handle(message):                      # raise to refuse it (nack): it comes back after the
        save(message.body)                    # binding's backoff; return to ack it
    consumer = Consumer("orders", "billing", handle, app_id="billing-svc", secret="...",
                        zk="zk1:2181/switchyard/prod-a")
    consumer.start()  ...  consumer.stop()

The consumer connects to every live broker of the cluster (messages stored on any of them must be
drained), subscribes on each with `credit` messages in flight at most, and follows the broker list:
new brokers are joined, lost connections are retried and re-subscribed by themselves.

`AsyncConsumer` runs an `async def` handler as a task per delivered batch, and a plain function
inline on the loop (keep it short). `Consumer` runs the handler on its own worker thread, so a slow
handler never holds up heartbeats; acks go back in batches.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import queue
import socket
import threading
import time
from collections.abc import Callable

from broker_core import protocol as p
from broker_core.client._loop import LoopThread
from broker_core.client.connection import BrokerAddress, BrokerConnection
from broker_core.client.discovery import Discovery, Locator
from broker_core.client.errors import AuthError, BrokerError, ConnectionLost, SwitchyardError

log = logging.getLogger("broker_core.client.consumer")

REFUSALS = (p.E_NO_BINDING, p.E_AUTH_FAILED, p.E_NOT_AUTHENTICATED)


class ReceivedMessage:
    """A delivered message. `attempt` counts deliveries to this group (1 the first time)."""

    __slots__ = ("topic", "group", "broker", "seq", "attempt", "_m")

    def __init__(self, topic: str, group: str, broker: str, seq: int, attempt: int, m: list):
        self.topic = topic
        self.group = group
        self.broker = broker
        self.seq = seq
        self.attempt = attempt
        self._m = m

    id = property(lambda self: self._m[p.M_ID])
    message_type = property(lambda self: self._m[p.M_TYPE])
    key = property(lambda self: self._m[p.M_KEY])
    business_id = property(lambda self: self._m[p.M_BUSINESS_ID])
    headers = property(lambda self: self._m[p.M_HEADERS])
    body = property(lambda self: self._m[p.M_BODY])
    ttl_ms = property(lambda self: self._m[p.M_TTL_MS])
    timestamp_ms = property(lambda self: self._m[p.M_TIMESTAMP_MS])

    def __repr__(self) -> str:
        return (f"<ReceivedMessage {self.topic}/{self.group} id={self.id} type={self.message_type!r} "
                f"attempt={self.attempt} {len(self.body)} bytes>")


class Nack(Exception):
    """Raise from a handler to refuse a message with a chosen delay (ms) instead of the backoff; the broker
    caps it at the binding's longest backoff (`backoff.max_ms`)."""

    def __init__(self, reason: str = "", delay_ms: int = -1):
        super().__init__(reason)
        self.delay_ms = delay_ms


class _BrokerSession:
    """The consumer's connection to one broker, kept open (reconnect + re-subscribe) until dropped."""

    def __init__(self, consumer: AsyncConsumer, address: BrokerAddress):
        self.consumer = consumer
        self.address = address
        self.conn: BrokerConnection | None = None
        self.sub_id: int | None = None
        self.dropped = False
        self.subscribed = asyncio.Event()
        self.refusal: BaseException | None = None
        self._acks: list[int] = []
        self._nacks: list[list] = []
        self._flush_scheduled = False
        self.loop = asyncio.get_running_loop()
        self.task = self.loop.create_task(self._run())

    async def _run(self) -> None:
        consumer = self.consumer
        delay = 0.05
        while not self.dropped:
            if consumer.gone_too_long(self.address):
                log.info("consumer: %s left the cluster's broker list %ds ago; no longer retrying it",
                         self.address, consumer.forget_after)
                consumer.sessions.pop(self.address, None)
                return
            try:
                conn = await BrokerConnection.open(
                    self.address, timeout=consumer.connect_timeout, app_id=consumer.app_id, secret=consumer.secret,
                    client_id=consumer.client_id, heartbeat_ms=consumer.heartbeat_ms, on_deliver=self._delivered,
                    on_unsubscribed=self._unsubscribed)
            except (OSError, SwitchyardError, TimeoutError) as exc:
                if isinstance(exc, AuthError):
                    self.refusal = exc
                    self.subscribed.set()
                log.debug("consumer: %s unreachable: %s", self.address, exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)
                continue
            self.conn = conn
            try:
                answer = await asyncio.wait_for(conn.request(p.Subscribe(
                    conn.next_ref(), consumer.topic, consumer.group, consumer.credit, consumer.ack_timeout_ms)),
                    consumer.connect_timeout)
            except BrokerError as exc:
                self.refusal = exc
                self.subscribed.set()
                log.warning("consumer: %s refused %s/%s: %s", self.address, consumer.topic, consumer.group, exc)
                conn.close()
                await asyncio.sleep(consumer.resubscribe_delay)
                continue
            except (SwitchyardError, TimeoutError) as exc:
                log.debug("consumer: subscribe on %s failed: %s", self.address, exc)
                conn.close()
                await asyncio.sleep(delay)
                continue
            self.sub_id = answer.sub_id
            self.refusal = None
            self.subscribed.set()
            delay = 0.05
            consumer.subscriptions += 1
            await conn.closed
            self.sub_id = None
            if not self.dropped:
                log.info("consumer: connection to %s lost; reconnecting", self.address)

    def _unsubscribed(self, conn: BrokerConnection, ev: p.Unsubscribed) -> None:
        log.warning("consumer: broker %s ended the subscription: %s", self.address, ev.reason)
        conn.close()  # _run connects again and retries the subscription after a pause

    def _delivered(self, conn: BrokerConnection, ev: p.Deliver) -> None:
        consumer = self.consumer
        if self.sub_id is None:
            self.sub_id = ev.sub_id  # deliveries can arrive in the same read as the Subscribed answer
        elif ev.sub_id != self.sub_id:
            return
        node = conn.welcome.node_id if conn.welcome else str(self.address)
        topic, group = consumer.topic, consumer.group
        try:
            messages = [ReceivedMessage(topic, group, node, item[0], item[1], item[2]) for item in ev.items]
        except (IndexError, TypeError) as exc:
            log.error("consumer: undecodable delivery from %s: %s", self.address, exc)
            conn.close()
            return
        consumer.received += len(messages)
        consumer.dispatch(self, conn, messages)

    # called on the loop with the outcome of a batch
    def settle(self, conn: BrokerConnection, acks: list[int], nacks: list[list]) -> None:
        if conn is not self.conn or not conn.is_open:
            return  # the broker put them back in the queue when the connection went
        self._acks.extend(acks)
        self._nacks.extend(nacks)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self.loop.call_soon(self._flush_acks)

    def _flush_acks(self) -> None:
        self._flush_scheduled = False
        conn = self.conn
        acks, self._acks = self._acks, []
        nacks, self._nacks = self._nacks, []
        if conn is None or not conn.is_open or self.sub_id is None:
            return
        try:
            if acks:
                conn.send(p.Ack(self.sub_id, acks))
            if nacks:
                conn.send(p.Nack(self.sub_id, nacks))
        except ConnectionLost:
            pass

    async def drop(self) -> None:
        self.dropped = True
        if self.conn is not None:
            self._flush_acks()
            self.conn.close()
        self.task.cancel()
        try:
            await self.task
        except (asyncio.CancelledError, Exception):
            pass


class AsyncConsumer:
    def __init__(
        self,
        topic: str,
        group: str,
        handler: Callable,
        *,
        app_id: str,
        secret: str,
        zk: str | None = None,
        control_plane: str | None = None,
        environment: str | None = None,
        brokers: list[str] | None = None,
        client_id: str | None = None,
        credit: int = 1000,
        ack_timeout_ms: int = 0,
        heartbeat_ms: int = 5000,
        connect_timeout: float = 5.0,
        resubscribe_delay: float = 2.0,
        forget_after: float = 600.0,
        cache_dir=None,
        api_token: str | None = None,
    ):
        self.topic = topic
        self.group = group
        self.handler = handler
        self.is_async = inspect.iscoroutinefunction(handler)
        self.app_id = app_id
        self.secret = secret
        self.locator = Locator(zk=zk, control_plane=control_plane, environment=environment, brokers=brokers,
                               cache_dir=cache_dir, api_token=api_token, start_timeout=connect_timeout)
        self.client_id = client_id or f"consumer-{socket.gethostname()}-{os.getpid()}"
        self.credit = credit
        self.ack_timeout_ms = ack_timeout_ms
        self.heartbeat_ms = heartbeat_ms
        self.connect_timeout = connect_timeout
        self.resubscribe_delay = resubscribe_delay
        self.sessions: dict[BrokerAddress, _BrokerSession] = {}
        self.discovery: Discovery | None = None
        self.received = self.acked = self.nacked = 0
        self.subscriptions = 0
        self._tasks: set[asyncio.Task] = set()
        self._left: dict[BrokerAddress, float] = {}  # brokers no longer listed, since when
        self.forget_after = forget_after
        self.stopped = False

    async def start(self, timeout: float | None = None) -> None:
        """Subscribe on every live broker. Raises the broker's refusal (no binding, wrong secret)."""
        timeout = timeout if timeout is not None else self.connect_timeout
        self.discovery = await self.locator.discovery(self.topic)
        self.discovery.listeners.append(self._brokers_changed)
        brokers = await self.discovery.wait_for_brokers(timeout)
        self._brokers_changed(brokers)
        sessions = list(self.sessions.values())
        await asyncio.wait([asyncio.ensure_future(s.subscribed.wait()) for s in sessions], timeout=timeout)
        refusals = [s.refusal for s in sessions if s.refusal is not None]
        if refusals:
            await self.stop()
            raise refusals[0]
        if not any(s.sub_id for s in sessions):
            log.warning("consumer %s/%s: no broker answered within %.0fs; still trying", self.topic, self.group,
                        timeout)

    def _brokers_changed(self, brokers: list[BrokerAddress]) -> None:
        if self.stopped:
            return
        now = time.monotonic()
        for address in brokers:
            self._left.pop(address, None)
            if address not in self.sessions:
                self.sessions[address] = _BrokerSession(self, address)
        # A broker that left the list keeps its session for a while: it may be restarting with
        # messages on disk. After `forget_after` seconds away (and disconnected) it is dropped.
        for address in self.sessions:
            if address not in brokers:
                self._left.setdefault(address, now)

    def gone_too_long(self, address: BrokerAddress) -> bool:
        left = self._left.get(address)
        return left is not None and time.monotonic() - left > self.forget_after

    def dispatch(self, session: _BrokerSession, conn: BrokerConnection, messages: list[ReceivedMessage]) -> None:
        if self.is_async:
            task = asyncio.get_running_loop().create_task(self._run_async(session, conn, messages))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        else:
            acks, nacks = run_handler(self.handler, messages)
            self.acked += len(acks)
            self.nacked += len(nacks)
            session.settle(conn, acks, nacks)

    async def _run_async(self, session: _BrokerSession, conn: BrokerConnection,
                         messages: list[ReceivedMessage]) -> None:
        acks, nacks = [], []
        for m in messages:
            try:
                await self.handler(m)
                acks.append(m.seq)
            except Nack as exc:
                nacks.append([m.seq, exc.delay_ms, str(exc)])
            except Exception as exc:
                nacks.append([m.seq, -1, f"{exc.__class__.__name__}: {exc}"[:200]])
        self.acked += len(acks)
        self.nacked += len(nacks)
        session.settle(conn, acks, nacks)

    async def dead_letters(self, limit: int = 100) -> list[dict]:
        """The group's dead letters on every broker this consumer is connected to."""
        out = []
        for session in self.sessions.values():
            conn = session.conn
            if conn is None or not conn.is_open:
                continue
            answer = await conn.request(p.ListDeadLetters(conn.next_ref(), self.topic, self.group, limit))
            out.extend(dict(entry, broker=session.address.node_id) for entry in answer.entries)
        return out

    async def stop(self) -> None:
        self.stopped = True
        if self.discovery is not None and self._brokers_changed in self.discovery.listeners:
            self.discovery.listeners.remove(self._brokers_changed)
        for session in list(self.sessions.values()):
            await session.drop()
        self.sessions.clear()
        for task in list(self._tasks):
            task.cancel()
        self.locator.stop()

    def connected_brokers(self) -> list[str]:
        return [str(s.address) for s in self.sessions.values() if s.sub_id is not None]


def run_handler(handler: Callable, messages: list[ReceivedMessage]) -> tuple[list[int], list[list]]:
    acks: list[int] = []
    nacks: list[list] = []
    for m in messages:
        try:
            handler(m)
            acks.append(m.seq)
        except Nack as exc:
            nacks.append([m.seq, exc.delay_ms, str(exc)])
        except Exception as exc:
            nacks.append([m.seq, -1, f"{exc.__class__.__name__}: {exc}"[:200]])
    return acks, nacks


class Consumer:
    """The synchronous consumer: the handler runs on a worker thread of its own."""

    def __init__(self, topic: str, group: str, handler: Callable[[ReceivedMessage], object], **kwargs):
        self._thread = LoopThread("switchyard-consumer")
        self._work: queue.SimpleQueue = queue.SimpleQueue()
        self._handler = handler
        self._worker = threading.Thread(target=self._work_loop, name="switchyard-handler", daemon=True)

        async def make() -> AsyncConsumer:
            return AsyncConsumer(topic, group, handler, **kwargs)

        self._async = self._thread.run(make())
        self._async.dispatch = self._to_worker  # handlers run on the worker thread, not on the loop

    def _to_worker(self, session: _BrokerSession, conn: BrokerConnection, messages: list[ReceivedMessage]) -> None:
        self._work.put((session, conn, messages))

    def _work_loop(self) -> None:
        while True:
            job = self._work.get()
            if job is None:
                return
            session, conn, messages = job
            acks, nacks = run_handler(self._handler, messages)
            self._async.acked += len(acks)
            self._async.nacked += len(nacks)
            self._thread.call(session.settle, conn, acks, nacks)

    def start(self, timeout: float | None = None) -> Consumer:
        self._worker.start()
        try:
            self._thread.run(self._async.start(timeout))
        except BaseException:
            self._work.put(None)
            self._thread.stop()
            raise
        return self

    def run(self) -> None:
        """Start and block until stop() is called from another thread (or KeyboardInterrupt)."""
        self.start()
        try:
            self._worker.join()
        except KeyboardInterrupt:
            self.stop()

    def dead_letters(self, limit: int = 100) -> list[dict]:
        return self._thread.run(self._async.dead_letters(limit), 30)

    @property
    def stats(self) -> dict:
        a = self._async
        return {"received": a.received, "acked": a.acked, "nacked": a.nacked, "brokers": a.connected_brokers()}

    def stop(self) -> None:
        try:
            self._thread.run(self._async.stop(), 10)
        finally:
            self._work.put(None)
            self._thread.stop()

    def __enter__(self) -> Consumer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
