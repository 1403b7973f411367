"""Producers: `AsyncProducer` (asyncio) and `Producer` (plain threads; runs its own loop thread).

    producer = Producer(app_id="orders-svc", secret="...", zk="zk1:2181/switchyard/prod-a")
    message_id = producer.send("orders", b"{...}", message_type="order.created", key="o-17")
    ids = producer.send_many("orders", [Message(b"a"), Message(b"b", message_type="order.paid")])
    producer.close()

A send returns once the broker has stored the message (durable under its fsync policy) and raises
`BrokerError` when the broker refuses it (no grant, unknown topic, ...).

Batching: sends are queued and written once per event-loop turn, many messages per frame, with up
to `window` frames awaiting the broker's answer; under load batches grow by themselves.

Failover: on a lost connection the producer connects to another live broker of the cluster (or the
same one when it comes back) and sends again every batch that was not acknowledged, with the same
message ids — a message can then be stored twice, never lost. A message not acknowledged within
`send_timeout` (counted from the send, whether it is still queued or already sent and unanswered) fails with
`SendTimeout` (it may still have been stored).

Closing: `close(timeout=None)` first lets what is queued or in flight be acknowledged, for at most `timeout`
seconds (default `send_timeout`; 0: not at all), then fails what is left with `ConnectionLost("producer closed")`
(it may still have been stored) and closes the connections.

Routes (docs/routing.md): each topic's messages go to the cluster its route names for producers
(`broker_core.client.locator`). When the route changes, new and queued messages go to the new cluster
at once; batches already sent finish where they went (sent again there after a lost connection while
that cluster is still in the route, else to the new cluster, with the same ids). A cluster's
connection is closed once no route of the producer's topics names it and nothing waits on it.

A producer that cannot start says why, within about `connect_timeout`: `RouteUnknown`,
`ControlPlaneUnreachable`, `ZooKeeperUnreachable`, `NoBrokers` (`broker_core.client.errors`).

Delayed messages (issue 21): `send(..., delay=seconds)` or `send(..., deliver_at=datetime or Unix seconds)`,
up to 30 days ahead (also `Message(delay=..)` in `send_many`, and `send_nowait`). The send returns once the broker
has stored the message in its schedule (durable like any message); the message is delivered when it is due,
never before (a broker restart in between loses none), to the groups bound then. A bad delay raises
`InvalidDelay` (a ValueError) before anything is sent: negative, more than 30 days, not a number, a naive
datetime, or both forms. Transactional and ordered topics refuse delayed messages (`BrokerError` with code
"delay_not_supported"). On a placed topic they go to the leader of partition 0 (on a replicated topic its
replicas keep the schedule: acknowledged once `min_insync` of them hold it). Consumers see the due time as
`message.deliver_at_ms`.

Transaction messages (`send_transactional`, or `prepare` + `end_transaction`): the message is
stored prepared (never delivered), the local transaction runs, then the producer commits it
(delivered) or rolls it back (never delivered) on the broker that stored it (also after the topic
moved). With `check_listener=fn` the producer keeps a connection to every live broker of every
cluster its topics' routes name and answers
the brokers' back-checks with fn(check) -> "commit" | "rollback" | "unknown"
(`broker_core.client.transactions`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from datetime import datetime

from broker_core import protocol as p
from broker_core.client._batching import IdMaker, Message, _Batch, _Queued, _reject, _Waiter  # noqa: F401 (_Queued: tests)
from broker_core.client._delay import InvalidDelay, due_ms
from broker_core.client._link import _Link
from broker_core.client._loop import LoopThread
from broker_core.client._tx_sending import TransactionSending
from broker_core.client.connection import BrokerAddress, BrokerConnection
from broker_core.client.errors import AuthError, BrokerError, ConnectionLost, SendTimeout
from broker_core.client.options import ClientOptions
from broker_core.client.routes import Route
from broker_core.client.transactions import CheckAnswerer, CheckSessions, PreparedMessage, TxCheck, TxResult

log = logging.getLogger("broker_core.client.producer")


class AsyncProducer(TransactionSending):
    """Takes app_id and secret, its own settings below, and the other keyword arguments of `ClientOptions`
    (where the brokers are; client_id, heartbeat_ms, connect_timeout, cache_dir, api_token)."""

    def __init__(
        self,
        app_id: str,
        secret: str,
        *,
        send_timeout: float = 30.0,
        max_batch: int = 512,
        max_batch_bytes: int = 1024 * 1024,
        window: int = 16,
        check_listener: Callable[[TxCheck], object] | None = None,
        **options,
    ):
        self.options = ClientOptions(app_id=app_id, secret=secret, **options).named("producer")
        self.locator = self.options.locator()
        self.check_listener = check_listener
        self._answerer = CheckAnswerer(check_listener) if check_listener is not None else None
        self.send_timeout = send_timeout
        self.max_batch = max_batch
        self.max_batch_bytes = max_batch_bytes
        self.window = window
        self.new_id = IdMaker()
        self._links: dict[str, _Link] = {}  # by cluster (its connect string)
        self._topic_links: dict[str, _Link] = {}  # topic -> the link of the cluster its route sends to now
        self._starting: dict[str, asyncio.Task] = {}
        # sends waiting for their topic's link, per topic, and the last of them: later sends queue behind them
        self._waiting_link: dict[str, int] = {}
        self._last_waiting: dict[str, asyncio.Future] = {}
        self._checks: dict[str, CheckSessions] = {}  # by cluster, with a check listener
        self._extra: dict[BrokerAddress, BrokerConnection] = {}  # opened to end a transaction elsewhere
        self._closing: set[asyncio.Task] = set()
        self.route_changes = 0

    async def __aenter__(self) -> AsyncProducer:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    # -- routes ---------------------------------------------------------------------------------

    async def _link(self, topic: str) -> _Link:
        """The link of the topic's produce cluster; the first call finds the route and a broker, or raises
        why it cannot (RouteUnknown, ControlPlaneUnreachable, ZooKeeperUnreachable, NoBrokers)."""
        link = self._topic_links.get(topic)
        if link is not None:
            return link
        task = self._starting.get(topic)
        if task is None:
            task = self._starting[topic] = asyncio.get_running_loop().create_task(self._start_topic(topic))
            task.add_done_callback(lambda _t: self._starting.pop(topic, None))
        return await asyncio.shield(task)

    async def _link_in_order(self, topic: str) -> _Link:
        """`_link`, for a send: behind every send of the topic still waiting for it, so that messages are queued
        in the order they were sent. (Sends waiting for the first link wake up one loop turn after it is made;
        a send made in that turn found the link and was queued first: a key's messages swapped.)"""
        loop = asyncio.get_running_loop()
        before, mine = self._last_waiting.get(topic), loop.create_future()
        self._last_waiting[topic] = mine
        self._waiting_link[topic] = self._waiting_link.get(topic, 0) + 1
        try:
            if before is not None and not before.done():
                await before
            return await self._link(topic)
        finally:
            self._waiting_link[topic] -= 1
            mine.set_result(None)  # the next one goes on after this one queued its message (same loop step)

    async def _start_topic(self, topic: str) -> _Link:
        loop = asyncio.get_running_loop()
        started = loop.time()
        route = await self.locator.route(topic)
        remaining = self.options.connect_timeout - (loop.time() - started)
        await self.locator.ready_discovery(route.produce_zk, route.produce, max(remaining, 0.05))
        await self._link_to(route).follow(topic, self.options.connect_timeout - (loop.time() - started))
        if topic not in self._topic_links:
            self.locator.on_route(topic, lambda new: self._route_changed(topic, new))
            self._topic_links[topic] = self._link_to(self.locator.current(topic))
            self._sync_checks()
        return self._topic_links[topic]

    def _link_to(self, route: Route) -> _Link:
        link = self._links.get(route.produce_zk)
        if link is None:
            discovery = self.locator.discovery_for(route.produce_zk, route.produce)
            link = self._links[route.produce_zk] = _Link(self, route.produce_zk, discovery)
        return link

    def _route_changed(self, topic: str, route: Route) -> None:
        """On the loop: the topic's route changed. New and queued messages go to the produce cluster now."""
        old, new = self._topic_links.get(topic), self._link_to(route)
        self._topic_links[topic] = new
        named = set(route.zks)
        for link in list(self._links.values()):
            if link is not new:
                link.hand_over(topic, new, with_retries=link.zk not in named)
        new.watch(topic)  # its placement in the new cluster
        new._ensure_connecting()
        self._sync_checks()
        if old is not new:
            self.route_changes += 1
            log.info("producer: %s now sends to cluster %s (route version %d)", topic, route.produce, route.version)

    def route(self, topic: str) -> Route | None:
        """The route the producer follows for `topic` (None before its first send or connect)."""
        return self.locator.current(topic) if topic in self._topic_links else None

    def moved_away(self, link: _Link, topic: str) -> bool:
        """Whether the topic's messages go to another cluster than `link`'s now."""
        current = self._topic_links.get(topic)
        return current is not None and current is not link

    def resend(self, link: _Link, batch: _Batch, exc: BaseException) -> None:
        """A batch sent through `link` got no answer (or its cluster no longer has the topic): it goes again,
        with the same ids, through `link` while its cluster is in the route, else to the produce cluster."""
        route = self.locator.current(batch.topic)
        target = link
        if route is not None and (link.zk not in route.zks or not isinstance(exc, ConnectionLost)):
            target = self._topic_links.get(batch.topic, link)
        if target.closed:  # the producer is closing
            for w in batch.waiters:
                _reject(w, ConnectionLost("producer closed"))
            return
        target.retry.append(batch)
        target._schedule()

    def unused(self, link: _Link) -> bool:
        """A link nothing needs: no topic sends there, no route names its cluster, nothing waits on it."""
        return (link.idle() and link not in self._topic_links.values() and not self._starting
                and link.zk not in self.locator.named_clusters())

    def forget(self, link: _Link) -> None:
        if self._links.get(link.zk) is link:
            del self._links[link.zk]

    def _sync_checks(self) -> None:
        """With a check listener: check sessions on every cluster the routes name, and only there."""
        if self.check_listener is None:
            return
        wanted = self.locator.named_clusters()
        for zk in wanted - self._checks.keys():
            self._checks[zk] = CheckSessions(self, self.locator.discovery_for(zk))
        for zk in self._checks.keys() - wanted:
            closing = asyncio.get_running_loop().create_task(self._checks.pop(zk).close())
            self._closing.add(closing)
            closing.add_done_callback(self._closing.discard)

    def _array(self, m: Message, now_ms: int) -> list:
        if type(m.body) is not bytes:
            raise TypeError("a message body must be bytes")
        array = [m.id or self.new_id(), m.message_type, m.key, m.business_id, m.headers or {}, m.body, m.ttl_ms,
                 m.delivery_limit, 0, now_ms]
        due = due_ms(m.delay, m.deliver_at, now_ms)
        if due:
            array.append(due)
        return array

    async def send(self, topic: str, body: bytes, **fields) -> str:
        """Store one message; returns its id once the broker acknowledged it. `fields` are those of
        `send_nowait` (message_type, key, business_id, headers, ttl_ms, delivery_limit, message_id, delay,
        deliver_at: see "Delayed messages" above)."""
        if topic not in self._topic_links or self._waiting_link.get(topic):
            await self._link_in_order(topic)
        return await self.send_nowait(topic, body, **fields)

    def conn_args(self) -> dict:
        """How this producer's connections introduce themselves (with the check listener, if any)."""
        args = self.options.conn_args()
        if self._answerer is not None:
            args.update(features={p.FEATURE_CHECK_LISTENER: True}, on_check=self._answerer)
        return args

    async def connect(self, topic: str, timeout: float | None = None) -> None:
        """Find the topic's route and connect to a broker of its produce cluster now (sends do it lazily).
        With a check listener, also wait (within the timeout) until every live broker of every cluster the
        route names has a check connection."""
        link = await self._link(topic)
        link._ensure_connecting()
        deadline = time.monotonic() + (timeout if timeout is not None else self.options.connect_timeout)
        while link.conn is None or not link.conn.is_open:
            if isinstance(link.last_error, AuthError):
                raise link.last_error
            if time.monotonic() > deadline:
                raise SendTimeout(f"no broker of cluster {link.discovery.name} answered within the connect "
                                  f"timeout (last error: {link.last_error})")
            await asyncio.sleep(0.01)
            link = self._topic_links[topic]  # the route may have moved meanwhile
            link._ensure_connecting()
        while not self.checks_connected() and time.monotonic() < deadline:
            refused = next((c.last_error for c in self._checks.values() if isinstance(c.last_error, AuthError)), None)
            if refused is not None:
                raise refused
            await asyncio.sleep(0.01)

    def checks_connected(self) -> bool:
        """With a check listener: every live broker of every cluster the routes name has a check connection
        (without one: True)."""
        if self.check_listener is None:
            return True
        return len(self._checks) == len(self.locator.named_clusters()) and all(
            c.connected() for c in self._checks.values())

    # -- transaction messages -------------------------------------------------------------------

    def send_nowait(self, topic: str, body: bytes, *, message_type: str = "default", key: str | None = None,
                    business_id: str | None = None, headers: dict[str, str] | None = None, ttl_ms: int = 0,
                    delivery_limit: int = 0, message_id: str | None = None, delay: float | None = None,
                    deliver_at: datetime | float | None = None) -> asyncio.Future:
        """Queue one message; returns a future of its id. No coroutine per message: the fast way to
        pipeline many sends. The topic's cluster must be known (`await connect(topic)` once). `delay`
        (seconds) or `deliver_at` (a time): deliver it then, up to 30 days ahead (`InvalidDelay` otherwise)."""
        link = self._topic_links.get(topic)
        if link is None:
            raise RuntimeError(f"call `await connect({topic!r})` before send_nowait")
        if type(body) is not bytes:
            raise TypeError("a message body must be bytes")
        now_ms = int(time.time() * 1000)
        array = [message_id or self.new_id(), message_type, key, business_id, headers or {}, body, ttl_ms,
                 delivery_limit, 0, now_ms]
        if delay is not None or deliver_at is not None:
            due = due_ms(delay, deliver_at, now_ms)
            if due:
                array.append(due)
        future = link.loop.create_future()
        link.submit_one(topic, array, future)
        return future

    async def send_many(self, topic: str, messages: Iterable[Message | bytes]) -> list[str]:
        """Store many messages; returns their ids once the broker acknowledged all of them."""
        now_ms = int(time.time() * 1000)
        arrays = [self._array(m if isinstance(m, Message) else Message(m), now_ms) for m in messages]
        if not arrays:
            return []
        ids = [a[p.M_ID] for a in arrays]
        link = self._topic_links.get(topic)
        if link is None or self._waiting_link.get(topic):
            link = await self._link_in_order(topic)
        future = asyncio.get_running_loop().create_future()
        link.submit(topic, arrays, _Waiter(future, len(arrays), ids))
        return await future

    async def flush(self, timeout: float | None = None) -> None:
        """Wait until nothing is queued or awaiting an answer."""
        deadline = time.monotonic() + (timeout if timeout is not None else self.send_timeout)
        while not all(link.idle() for link in self._links.values()):
            if time.monotonic() > deadline:
                raise SendTimeout("flush did not finish in time")
            await asyncio.sleep(0.005)

    async def close(self, timeout: float | None = None) -> None:
        """Let what is queued or in flight be acknowledged (for at most `timeout` seconds, default the send
        timeout; 0: not at all), fail what is left (`ConnectionLost`) and close the connections."""
        if timeout is None or timeout > 0:
            try:
                await self.flush(timeout)
            except SendTimeout:
                pass  # what is still waiting is failed below
        if self._answerer is not None:
            self._answerer.cancel()
        for link in list(self._links.values()):
            await link.close()
        for checks in self._checks.values():
            await checks.close()
        for conn in self._extra.values():
            conn.close()
        self._links.clear()
        self._topic_links.clear()
        self._checks.clear()
        self.locator.stop()

    def stats(self) -> dict:
        """Per cluster (its connect string): queued messages, batches in flight or waiting to be sent again,
        failovers, the broker connected to."""
        return {zk: link.stats() for zk, link in self._links.items()}


class Producer:
    """The synchronous producer: same arguments and methods as AsyncProducer, blocking."""

    def __init__(self, app_id: str, secret: str, **kwargs):
        self._thread = LoopThread("switchyard-producer")
        self._timeout = kwargs.get("send_timeout", 30.0) + 5

        async def make() -> AsyncProducer:
            return AsyncProducer(app_id, secret, **kwargs)

        self._async = self._thread.run(make())

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def send(self, topic: str, body: bytes, **kwargs) -> str:
        return self._thread.run(self._async.send(topic, body, **kwargs), self._timeout)

    def send_async(self, topic: str, body: bytes, **kwargs):
        """Queue a send; returns a concurrent.futures.Future of the message id."""
        return self._thread.submit(self._async.send(topic, body, **kwargs))

    def send_many(self, topic: str, messages: Iterable[Message | bytes]) -> list[str]:
        return self._thread.run(self._async.send_many(topic, list(messages)), self._timeout)

    def flush(self, timeout: float | None = None) -> None:
        self._thread.run(self._async.flush(timeout))

    def route(self, topic: str) -> Route | None:
        """The route followed for `topic` now (None before its first send or connect)."""
        return self._thread.apply(self._async.route, topic)

    def stats(self) -> dict:
        return self._thread.apply(self._async.stats)

    def checks_connected(self) -> bool:
        return self._thread.apply(self._async.checks_connected)

    def connect(self, topic: str, timeout: float | None = None) -> None:
        """Connect now (with a check listener: to every live broker of the topic's cluster)."""
        self._thread.run(self._async.connect(topic, timeout))

    def prepare(self, topic: str, body: bytes, **kwargs) -> PreparedMessage:
        return self._thread.run(self._async.prepare(topic, body, **kwargs), self._timeout)

    def end_transaction(self, prepared: PreparedMessage, commit: bool) -> str:
        return self._thread.run(self._async.end_transaction(prepared, commit), self._timeout)

    def send_transactional(self, topic: str, body: bytes, local_transaction: Callable, **kwargs) -> TxResult:
        """Prepare, run `local_transaction(message_id)` in the calling thread, then commit (it returned)
        or roll back (it raised; the exception propagates)."""
        prepared = self.prepare(topic, body, **kwargs)
        try:
            local_transaction(prepared.message_id)
        except BaseException:
            self._thread.run(self._async._end_quietly(prepared, False), self._timeout)
            raise
        return TxResult(prepared.message_id, self._thread.run(self._async._end_quietly(prepared, True), self._timeout))

    def close(self, timeout: float | None = None) -> None:
        """As AsyncProducer.close: what is queued or in flight gets up to `timeout` seconds (default the send
        timeout) to be acknowledged first."""
        bound = self._async.send_timeout if timeout is None else timeout
        try:
            self._thread.run(self._async.close(timeout), bound + 10)
        finally:
            self._thread.stop()


__all__ = ["AsyncProducer", "Producer", "Message", "BrokerError", "InvalidDelay", "TxCheck", "TxResult", "PreparedMessage"]
