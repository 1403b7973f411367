"""A consumer's subscriptions on one cluster: a session per live broker (kept open: reconnect and
re-subscribe), acks and nacks sent back on the connection each message came from.

A cluster that leaves the topic's route is retired gently: no new deliveries (credit 0), what was delivered
is handled and acknowledged (up to `drain_timeout`), then the sessions close; anything still unanswered then
goes back to the group on that cluster (redelivered there, never lost).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Protocol

from broker_core import protocol as p
from broker_core.client.connection import BrokerAddress, BrokerConnection
from broker_core.client.discovery import BrokerFollower, Discovery
from broker_core.client.errors import AuthError, BrokerError, ConnectionLost, SwitchyardError
from broker_core.client.options import ClientOptions

log = logging.getLogger("broker_core.client.consumer")


class ReceivedMessage:
    """A delivered message. `attempt` counts deliveries to this group (1 the first time); `cluster` and
    `broker` say where it came from (its ack goes back there)."""

    __slots__ = ("topic", "group", "broker", "seq", "attempt", "_m", "cluster")

    def __init__(self, topic: str, group: str, broker: str, seq: int, attempt: int, m: list, cluster: str = ""):
        self.topic = topic
        self.group = group
        self.broker = broker  # the node id of the broker it came from
        self.seq = seq
        self.attempt = attempt
        self._m = m
        self.cluster = cluster  # the route's name of the cluster it came from

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


class SessionOwner(Protocol):
    """What sessions read of their consumer, and hand it (`consumer.AsyncConsumer` is one): a session never
    imports the consumer that creates it."""

    topic: str
    group: str
    options: ClientOptions  # who it is, its heartbeat and connect timeout
    credit: int
    ack_timeout_ms: int
    resubscribe_delay: float
    forget_after: float
    received: int  # counters the sessions raise
    subscriptions: int

    def dispatch(self, session: _BrokerSession, conn: BrokerConnection, messages: list[ReceivedMessage]) -> None:
        """Hand delivered messages to the consumer's handler (it acks or nacks them through `session`)."""
        ...


class _BrokerSession:
    """The consumer's connection to one broker, kept open (reconnect + re-subscribe) until dropped."""

    def __init__(self, cluster: _ClusterSubscription, address: BrokerAddress):
        self.cluster = cluster
        self.consumer = cluster.consumer
        self.address = address
        self.conn: BrokerConnection | None = None
        self.sub_id: int | None = None
        self.dropped = False
        self.retiring = False  # its cluster left the route: no reconnecting
        self.outstanding = 0  # delivered on this connection, not answered yet
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
        while not (self.dropped or self.retiring):
            if self.cluster.brokers.gone_too_long(self.address):
                log.info("consumer: %s left the cluster's broker list %ds ago; no longer retrying it",
                         self.address, consumer.forget_after)
                self.cluster.sessions.pop(self.address, None)
                return
            try:
                conn = await BrokerConnection.open(
                    self.address, timeout=consumer.options.connect_timeout, on_deliver=self._delivered,
                    on_unsubscribed=self._unsubscribed, **consumer.options.conn_args())
            except (OSError, SwitchyardError, TimeoutError) as exc:
                if isinstance(exc, AuthError):
                    self.refusal = exc
                    self.subscribed.set()
                log.debug("consumer: %s unreachable: %s", self.address, exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)
                continue
            self.conn = conn
            self.outstanding = 0
            try:
                answer = await asyncio.wait_for(conn.request(p.Subscribe(
                    conn.next_ref(), consumer.topic, consumer.group, consumer.credit, consumer.ack_timeout_ms)),
                    consumer.options.connect_timeout)
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
            if not (self.dropped or self.retiring):
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
        topic, group, cluster = consumer.topic, consumer.group, self.cluster.name
        try:
            messages = [ReceivedMessage(topic, group, node, item[0], item[1], item[2], cluster)
                        for item in ev.items]
        except (IndexError, TypeError) as exc:
            log.error("consumer: undecodable delivery from %s: %s", self.address, exc)
            conn.close()
            return
        consumer.received += len(messages)
        if conn is self.conn:
            self.outstanding += len(messages)
        consumer.dispatch(self, conn, messages)

    # called on the loop with the outcome of a batch
    def settle(self, conn: BrokerConnection, acks: list[int], nacks: list[list]) -> None:
        if conn is not self.conn or not conn.is_open:
            return  # the broker put them back in the queue when the connection went
        self.outstanding -= len(acks) + len(nacks)
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

    async def quiesce(self, timeout: float) -> None:
        """Take no more deliveries (credit 0); wait (up to `timeout`) until what was delivered is answered."""
        self.retiring = True
        conn, sub_id = self.conn, self.sub_id
        if conn is None or not conn.is_open or sub_id is None:
            return
        deadline = time.monotonic() + timeout
        try:
            conn.send(p.Ready(sub_id, 0))
            await asyncio.wait_for(conn.ping(), timeout)  # what the broker delivered before the Ready has arrived
        except (SwitchyardError, TimeoutError) as exc:
            log.debug("consumer: quiescing %s: %s", self.address, exc)
        while self.outstanding > 0 and conn.is_open and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        if self.outstanding > 0 and conn.is_open:
            log.warning("consumer: %d messages from %s not answered within %.0fs; they go back to the group there",
                        self.outstanding, self.address, timeout)

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


class _ClusterSubscription:
    """The consumer on one cluster of the route: a session per live broker, following the broker list."""

    def __init__(self, consumer: SessionOwner, zk: str, name: str, discovery: Discovery):
        self.consumer = consumer
        self.zk = zk
        self.name = name
        self.discovery = discovery
        # a session per listed broker; one that left the list is dropped after `forget_after` away (and disconnected)
        self.brokers: BrokerFollower[_BrokerSession] = BrokerFollower(
            discovery, lambda address: _BrokerSession(self, address), consumer.forget_after)
        self.sessions = self.brokers.items

    def _detach(self) -> None:
        self.brokers.close()

    async def retire(self, timeout: float) -> None:
        """The cluster left the route: finish what it delivered, acknowledge it, then close."""
        self._detach()
        try:
            await asyncio.gather(*(s.quiesce(timeout) for s in list(self.sessions.values())))
        finally:
            await self.stop()
        log.info("consumer %s/%s: no longer subscribed on cluster %s", self.consumer.topic, self.consumer.group,
                 self.name)

    async def stop(self) -> None:
        self._detach()
        for session in list(self.sessions.values()):
            await session.drop()
        self.sessions.clear()
