"""Consumers: `AsyncConsumer` (asyncio) and `Consumer` (plain threads).

    def handle(message):                      # raise to refuse it (nack): it comes back after the
        save(message.body)                    # binding's backoff; return to ack it
    consumer = Consumer("orders", "billing", handle, app_id="billing-svc", secret="...",
                        zk="zk1:2181/switchyard/prod-a")
    consumer.start()  ...  consumer.stop()

The consumer connects to every live broker of every cluster the topic's route names for consumers
(messages stored on any of them must be drained), subscribes on each with `credit` messages in flight
at most, and follows the broker lists: new brokers are joined, lost connections are retried and
re-subscribed by themselves. It follows the route too (docs/routing.md): a cluster joining the route is
subscribed on at once; a cluster leaving it is retired gently (no new deliveries, what it delivered is
handled and acknowledged there, then its connections close). Acks always go to the connection the
message came from.

A consumer that cannot start says why, within about `connect_timeout`: `RouteUnknown`,
`ControlPlaneUnreachable`, `ZooKeeperUnreachable`, `NoBrokers` (`broker_core.client.errors`), or the
broker's refusal (no binding, wrong secret).

`AsyncConsumer` runs an `async def` handler as a task per delivered batch, and a plain function
inline on the loop (keep it short). `Consumer` runs the handler on its own worker thread, so a slow
handler never holds up heartbeats; acks go back in batches.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import queue
import threading
from collections.abc import Callable

from broker_core import protocol as p
from broker_core.client._loop import LoopThread
from broker_core.client._session import ReceivedMessage, _BrokerSession, _ClusterSubscription
from broker_core.client.connection import BrokerAddress, BrokerConnection
from broker_core.client.options import ClientOptions
from broker_core.client.routes import Route

log = logging.getLogger("broker_core.client.consumer")

REFUSALS = (p.E_NO_BINDING, p.E_AUTH_FAILED, p.E_NOT_AUTHENTICATED)


class Nack(Exception):
    """Raise from a handler to refuse a message with a chosen delay (ms) instead of the backoff; the broker
    caps it at the binding's longest backoff (`backoff.max_ms`)."""

    def __init__(self, reason: str = "", delay_ms: int = -1):
        super().__init__(reason)
        self.delay_ms = delay_ms


class AsyncConsumer:
    """Takes the topic, the group and the handler, its own settings below, and the keyword arguments of
    `ClientOptions` (app_id and secret required; where the brokers are; client_id, heartbeat_ms,
    connect_timeout, cache_dir, api_token)."""

    def __init__(
        self,
        topic: str,
        group: str,
        handler: Callable,
        *,
        credit: int = 1000,
        ack_timeout_ms: int = 0,
        resubscribe_delay: float = 2.0,
        forget_after: float = 600.0,
        drain_timeout: float = 30.0,
        **options,
    ):
        self.topic = topic
        self.group = group
        self.handler = handler
        self.is_async = inspect.iscoroutinefunction(handler)
        self.options = ClientOptions(**options).named("consumer")
        self.locator = self.options.locator()
        self.credit = credit
        self.ack_timeout_ms = ack_timeout_ms
        self.resubscribe_delay = resubscribe_delay
        self.drain_timeout = drain_timeout
        self.clusters: dict[str, _ClusterSubscription] = {}  # by connect string: the clusters subscribed on
        self.received = self.acked = self.nacked = 0
        self.subscriptions = 0
        self.route_changes = 0
        self._tasks: set[asyncio.Task] = set()
        self._retiring: set[asyncio.Task] = set()
        self.forget_after = forget_after
        self.stopped = False

    @property
    def sessions(self) -> dict[BrokerAddress, _BrokerSession]:
        """Every broker session, of every cluster subscribed on."""
        return {a: s for cluster in self.clusters.values() for a, s in cluster.sessions.items()}

    async def start(self, timeout: float | None = None) -> None:
        """Subscribe on every live broker of every cluster the route names for consumers. Raises why it cannot
        (RouteUnknown, ControlPlaneUnreachable, ZooKeeperUnreachable, NoBrokers) or the broker's refusal (no
        binding, wrong secret)."""
        timeout = timeout if timeout is not None else self.options.connect_timeout
        try:
            await self._start(timeout)
        except BaseException:
            await self.stop()
            raise

    async def _start(self, timeout: float) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        route = await self.locator.route(self.topic)
        remaining = max(deadline - loop.time(), 0.05)
        found = await asyncio.gather(*(self.locator.ready_discovery(zk, route.name_of(zk), remaining)
                                       for zk in route.consume_zks), return_exceptions=True)
        failed = [f for f in found if isinstance(f, BaseException)]
        if len(failed) == len(found):
            raise failed[0]
        for exc in failed:  # the others are subscribed on; this one is joined when its brokers show up
            log.warning("consumer %s/%s: %s", self.topic, self.group, exc)
        self.locator.on_route(self.topic, self._route_changed)
        self._follow(self.locator.current(self.topic))
        sessions = list(self.sessions.values())
        if sessions:
            await asyncio.wait([asyncio.ensure_future(s.subscribed.wait()) for s in sessions],
                               timeout=max(deadline - loop.time(), 0.05))
        refusals = [s.refusal for s in sessions if s.refusal is not None]
        if refusals:
            raise refusals[0]
        if not any(s.sub_id for s in sessions):
            log.warning("consumer %s/%s: no broker answered within %.0fs; still trying", self.topic, self.group,
                        timeout)

    def _follow(self, route: Route) -> None:
        """Subscribe on the clusters of `route.consume` not subscribed on yet; retire the others."""
        wanted = route.consume_zks
        for zk in wanted:
            name = route.name_of(zk)
            if zk in self.clusters:
                self.clusters[zk].name = name
            else:
                self.clusters[zk] = _ClusterSubscription(self, zk, name, self.locator.discovery_for(zk, name))
        for zk in [zk for zk in self.clusters if zk not in wanted]:
            task = asyncio.get_running_loop().create_task(self.clusters.pop(zk).retire(self.drain_timeout))
            self._retiring.add(task)
            task.add_done_callback(self._retiring.discard)

    def _route_changed(self, route: Route) -> None:
        if self.stopped:
            return
        self.route_changes += 1
        log.info("consumer %s/%s: route version %d, consuming from %s", self.topic, self.group, route.version,
                 ",".join(route.consume))
        self._follow(route)

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
        if self.locator.current(self.topic) is not None:
            self.locator.remove_route_listener(self.topic, self._route_changed)
        for task in list(self._retiring):
            task.cancel()  # a retiring cluster still closes its sessions (acks flushed)
        await asyncio.gather(*self._retiring, return_exceptions=True)
        for cluster in list(self.clusters.values()):
            await cluster.stop()
        self.clusters.clear()
        for task in list(self._tasks):
            task.cancel()
        self.locator.stop()

    def connected_brokers(self) -> list[str]:
        """The brokers subscribed on now, of every cluster of the route (`node@host:port`)."""
        return [str(s.address) for s in self.sessions.values() if s.sub_id is not None]

    def route(self) -> Route | None:
        """The route the consumer follows (None before start)."""
        return self.locator.current(self.topic)


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

    def route(self) -> Route | None:
        """The route the consumer follows now."""
        return self._thread.apply(self._async.route)

    @property
    def stats(self) -> dict:
        a = self._async
        return {"received": a.received, "acked": a.acked, "nacked": a.nacked, "brokers": a.connected_brokers(),
                "clusters": [c.name for c in a.clusters.values()]}

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
