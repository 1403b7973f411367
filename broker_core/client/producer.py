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
`send_timeout` fails with `SendTimeout` (it may still have been stored).

Transaction messages (`send_transactional`, or `prepare` + `end_transaction`): the message is
stored prepared (never delivered), the local transaction runs, then the producer commits it
(delivered) or rolls it back (never delivered) on the broker that stored it. With
`check_listener=fn` the producer keeps a connection to every live broker of the cluster and answers
the brokers' back-checks with fn(check) -> "commit" | "rollback" | "unknown"
(`broker_core.client.transactions`).
"""

from __future__ import annotations

import asyncio
import bisect
import inspect
import logging
import os
import random
import socket
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from broker_core import protocol as p
from broker_core.client._loop import LoopThread
from broker_core.client.connection import BrokerConnection
from broker_core.client.discovery import Discovery, Locator
from broker_core.client.errors import AuthError, BrokerError, ConnectionLost, SendTimeout, SwitchyardError
from broker_core.client.transactions import CheckAnswerer, CheckSessions, PreparedMessage, TxCheck, TxResult
from broker_core.protocol import M_BODY

log = logging.getLogger("broker_core.client.producer")


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


class _Batch:
    __slots__ = ("topic", "messages", "waiters", "deadline")

    def __init__(self, topic: str, messages: list[list], waiters: list, deadline: float):
        self.topic = topic
        self.messages = messages
        self.waiters = waiters
        self.deadline = deadline


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

    def expire(self, now: float) -> list:
        """Remove the messages whose send timeout passed; returns their waiters."""
        end = bisect.bisect_right(self.deadlines, now)
        waiters = self.waiters[:end]
        self.bytes -= sum(len(m[M_BODY]) + 64 for m in self.messages[:end])
        del self.messages[:end], self.waiters[:end], self.deadlines[:end]
        return waiters


class _Link:
    """The producer's connection to one cluster, with its queue and in-flight batches."""

    def __init__(self, producer: AsyncProducer, discovery: Discovery):
        self.producer = producer
        self.discovery = discovery
        self.loop = asyncio.get_running_loop()
        self.conn: BrokerConnection | None = None
        self.queued: dict[str, _Queued] = {}  # by topic
        self.retry: deque[_Batch] = deque()
        self.in_flight: dict[int, _Batch] = {}
        self._flush_scheduled = False
        self._connecting: asyncio.Task | None = None
        self._sweeper = self.loop.create_task(self._sweep())
        self.checks = CheckSessions(producer, discovery) if producer.check_listener is not None else None
        self.extra: dict = {}  # address -> connection opened to end a transaction on another broker
        self.closed = False
        self.failovers = 0
        self.last_error: BaseException | None = None

    def submit(self, topic: str, messages: list[list], waiter) -> None:
        """Queue messages of one send_many (all settled through one _Waiter)."""
        q = self.queued.get(topic) or self.queued.setdefault(topic, _Queued())
        q.messages += messages
        q.waiters += [waiter] * len(messages)
        q.deadlines += [time.monotonic() + self.producer.send_timeout] * len(messages)
        q.bytes += sum(len(m[M_BODY]) + 64 for m in messages)
        if len(q.messages) >= self.producer.max_batch:
            self._flush()  # a full batch goes now: the broker stores it while we pack the next
        else:
            self._schedule()

    def submit_one(self, topic: str, message: list, future: asyncio.Future) -> None:
        q = self.queued.get(topic) or self.queued.setdefault(topic, _Queued())
        q.messages.append(message)
        q.waiters.append(future)
        q.deadlines.append(time.monotonic() + self.producer.send_timeout)
        q.bytes += len(message[M_BODY]) + 64
        if len(q.messages) >= self.producer.max_batch:
            self._flush()
        elif not self._flush_scheduled:
            self._flush_scheduled = True
            self.loop.call_soon(self._flush)

    def _schedule(self) -> None:
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self.loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        conn = self.conn
        if conn is None or not conn.is_open:
            self._ensure_connecting()
            return
        window = self.producer.window
        while self.retry and len(self.in_flight) < window:
            self._send(conn, self.retry.popleft())
        max_batch, max_bytes = self.producer.max_batch, self.producer.max_batch_bytes
        for topic, q in list(self.queued.items()):
            while q.messages and len(self.in_flight) < window:
                self._send(conn, _Batch(topic, *q.cut(max_batch, max_bytes)))
            if not q.messages:
                del self.queued[topic]

    def _send(self, conn: BrokerConnection, batch: _Batch) -> None:
        ref = conn.next_ref()
        self.in_flight[ref] = batch
        answer = conn.request(p.Publish(ref, batch.topic, batch.messages))
        answer.add_done_callback(lambda f, ref=ref: self._answered(ref, f))

    def _answered(self, ref: int, answer: asyncio.Future) -> None:
        batch = self.in_flight.pop(ref, None)
        if batch is None:
            return
        exc = answer.exception()
        if exc is None:
            _resolve(batch.waiters, batch.messages)
        elif isinstance(exc, ConnectionLost):
            self.retry.append(batch)  # sent again, same ids, once connected
        else:
            for w in batch.waiters:
                _reject(w, exc)
        if self.queued or self.retry:
            self._schedule()

    def _ensure_connecting(self) -> None:
        if self.closed or (self._connecting is not None and not self._connecting.done()):
            return
        if self.conn is not None and self.conn.is_open:
            return  # connected: a second connection would replace this one and leak it
        self._connecting = self.loop.create_task(self._connect())

    async def _connect(self) -> None:
        producer = self.producer
        delay = 0.05
        tried: set = set()
        while not self.closed:
            candidates = self.discovery.candidates()
            fresh = [b for b in candidates if b not in tried] or candidates
            if fresh:
                address = random.choice(fresh)
                tried.add(address)
                try:
                    conn = await BrokerConnection.open(address, timeout=producer.connect_timeout,
                                                       **producer.conn_args())
                except AuthError as exc:
                    self.last_error = exc
                    self._fail_all(exc)  # a wrong secret does not get better by retrying
                    return
                except (OSError, SwitchyardError, TimeoutError) as exc:
                    self.last_error = exc
                    log.debug("producer: %s unreachable: %s", address, exc)
                else:
                    if self.conn is not None:
                        self.failovers += 1
                    self.conn = conn
                    conn.closed.add_done_callback(lambda _f: self._schedule())
                    log.debug("producer connected to %s", address)
                    self._schedule()
                    return
            if len(tried) >= len(candidates):
                tried.clear()
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)

    def _fail_all(self, exc: BaseException) -> None:
        for q in self.queued.values():
            for w in q.waiters:
                _reject(w, exc)
        self.queued.clear()
        while self.retry:
            for w in self.retry.popleft().waiters:
                _reject(w, exc)

    async def _sweep(self) -> None:
        """Fail queued messages whose send timeout passed (the broker never got them)."""
        while not self.closed:
            await asyncio.sleep(0.25)
            now = time.monotonic()
            timeout = SendTimeout(f"not acknowledged within {self.producer.send_timeout}s"
                                  + (f" (last error: {self.last_error})" if self.last_error else ""))
            for topic, q in list(self.queued.items()):
                if q.deadlines and q.deadlines[0] <= now:
                    for w in q.expire(now):
                        _reject(w, timeout)
                    if not q.messages:
                        del self.queued[topic]
            if self.retry:
                keep_batches = deque()
                for batch in self.retry:
                    if batch.deadline <= now:
                        for w in batch.waiters:
                            _reject(w, SendTimeout(f"not acknowledged within {self.producer.send_timeout}s"))
                    else:
                        keep_batches.append(batch)
                self.retry = keep_batches

    async def close(self) -> None:
        self.closed = True
        self._sweeper.cancel()
        if self._connecting is not None:
            self._connecting.cancel()
        if self.conn is not None:
            self.conn.close()
        for conn in self.extra.values():
            conn.close()
        if self.checks is not None:
            await self.checks.close()
        self._fail_all(ConnectionLost("producer closed"))

    async def connection_to(self, address, timeout: float) -> BrokerConnection:
        """An open connection to one broker (where a prepared message lives)."""
        for conn in (self.conn, self.checks.connection(address) if self.checks else None, self.extra.get(address)):
            if conn is not None and conn.is_open and conn.address == address:
                return conn
        conn = await BrokerConnection.open(address, timeout=timeout, **self.producer.conn_args())
        self.extra[address] = conn
        return conn

    def idle(self) -> bool:
        return not (self.queued or self.retry or self.in_flight)


class AsyncProducer:
    def __init__(
        self,
        app_id: str,
        secret: str,
        *,
        zk: str | None = None,
        control_plane: str | None = None,
        environment: str | None = None,
        brokers: list[str] | None = None,
        client_id: str | None = None,
        send_timeout: float = 30.0,
        connect_timeout: float = 5.0,
        heartbeat_ms: int = 5000,
        max_batch: int = 512,
        max_batch_bytes: int = 1024 * 1024,
        window: int = 16,
        cache_dir=None,
        api_token: str | None = None,
        check_listener: Callable[[TxCheck], object] | None = None,
    ):
        self.app_id = app_id
        self.check_listener = check_listener
        self._answerer = CheckAnswerer(check_listener) if check_listener is not None else None
        self.secret = secret
        self.locator = Locator(zk=zk, control_plane=control_plane, environment=environment, brokers=brokers,
                               cache_dir=cache_dir, api_token=api_token, start_timeout=connect_timeout)
        self.client_id = client_id or f"producer-{socket.gethostname()}-{os.getpid()}"
        self.send_timeout = send_timeout
        self.connect_timeout = connect_timeout
        self.heartbeat_ms = heartbeat_ms
        self.max_batch = max_batch
        self.max_batch_bytes = max_batch_bytes
        self.window = window
        self.new_id = IdMaker()
        self._links: dict[str, _Link] = {}  # by cluster
        self._topic_links: dict[str, _Link] = {}

    async def __aenter__(self) -> AsyncProducer:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def _link(self, topic: str) -> _Link:
        link = self._topic_links.get(topic)
        if link is None:
            cluster = await self.locator.cluster_of(topic)
            link = self._links.get(cluster)
            if link is None:
                discovery = await self.locator.discovery(topic)
                link = self._links.get(cluster)  # another task may have made it meanwhile
                if link is None:
                    link = self._links[cluster] = _Link(self, discovery)
            self._topic_links[topic] = link
        return link

    def _array(self, m: Message, now_ms: int) -> list:
        if type(m.body) is not bytes:
            raise TypeError("a message body must be bytes")
        return [m.id or self.new_id(), m.message_type, m.key, m.business_id, m.headers or {}, m.body, m.ttl_ms,
                m.delivery_limit, 0, now_ms]

    async def send(self, topic: str, body: bytes, **fields) -> str:
        """Store one message; returns its id once the broker acknowledged it. `fields` are those of
        `send_nowait` (message_type, key, business_id, headers, ttl_ms, delivery_limit, message_id)."""
        if topic not in self._topic_links:
            await self._link(topic)
        return await self.send_nowait(topic, body, **fields)

    def conn_args(self) -> dict:
        """How this producer's connections introduce themselves (with the check listener, if any)."""
        args = {"app_id": self.app_id, "secret": self.secret, "client_id": self.client_id,
                "heartbeat_ms": self.heartbeat_ms}
        if self._answerer is not None:
            args.update(features={p.FEATURE_CHECK_LISTENER: True}, on_check=self._answerer)
        return args

    async def connect(self, topic: str, timeout: float | None = None) -> None:
        """Find the topic's cluster and connect to one of its brokers now (sends do it lazily). With a
        check listener, also wait (within the timeout) until every live broker has a check connection."""
        link = self._topic_links.get(topic) or await self._link(topic)
        link._ensure_connecting()
        deadline = time.monotonic() + (timeout if timeout is not None else self.connect_timeout)
        while link.conn is None or not link.conn.is_open:
            if isinstance(link.last_error, AuthError):
                raise link.last_error
            if time.monotonic() > deadline:
                raise SendTimeout(f"no broker of the cluster answered (last error: {link.last_error})")
            await asyncio.sleep(0.01)
        while link.checks is not None and not link.checks.connected() and time.monotonic() < deadline:
            if isinstance(link.checks.last_error, AuthError):
                raise link.checks.last_error
            await asyncio.sleep(0.01)

    # -- transaction messages -------------------------------------------------------------------

    async def prepare(self, topic: str, body: bytes, *, message_type: str = "default", key: str | None = None,
                      business_id: str | None = None, headers: dict[str, str] | None = None,
                      message_id: str | None = None) -> PreparedMessage:
        """Store a prepared message (never delivered until committed); returns once it is durable.

        The topic must be transactional. On a lost connection it is sent again with the same id (the
        same broker keeps one copy; another broker would hold a second one, which a back-check settles).
        """
        if type(body) is not bytes:
            raise TypeError("a message body must be bytes")
        message_id = message_id or self.new_id()
        array = [message_id, message_type, key, business_id, headers or {}, body, 0, 0, p.FLAG_PREPARED,
                 int(time.time() * 1000)]
        deadline = time.monotonic() + self.send_timeout
        link = self._topic_links.get(topic) or await self._link(topic)
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise SendTimeout(f"prepared message {message_id} not acknowledged within {self.send_timeout}s")
            await self.connect(topic, timeout=remaining)
            conn = link.conn
            try:
                await asyncio.wait_for(conn.request(p.Publish(conn.next_ref(), topic, [array])), remaining)
            except ConnectionLost:
                await asyncio.sleep(0.05)
                continue
            except TimeoutError:
                continue
            return PreparedMessage(message_id, topic, conn.address)

    async def end_transaction(self, prepared: PreparedMessage, commit: bool) -> str:
        """Commit or roll back a prepared message on the broker that stored it; returns its state
        ("committed" / "rolled_back": a back-check may have settled it first)."""
        link = self._topic_links.get(prepared.topic) or await self._link(prepared.topic)
        deadline = time.monotonic() + self.send_timeout
        delay = 0.05
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise SendTimeout(f"could not end transaction message {prepared.message_id} within "
                                  f"{self.send_timeout}s; a back-check will settle it")
            try:
                conn = await link.connection_to(prepared.broker, min(remaining, self.connect_timeout))
                answer = await asyncio.wait_for(
                    conn.request(p.EndTx(conn.next_ref(), prepared.topic, prepared.message_id, commit)), remaining)
                return answer.state
            except BrokerError:
                raise
            except (OSError, SwitchyardError, TimeoutError) as exc:
                log.debug("ending %s on %s: %s", prepared.message_id, prepared.broker, exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)

    async def send_transactional(self, topic: str, body: bytes, local_transaction: Callable, *,
                                 message_type: str = "default", key: str | None = None,
                                 business_id: str | None = None, headers: dict[str, str] | None = None) -> TxResult:
        """Prepare, run `local_transaction(message_id)` (sync or async), then commit when it returns or
        roll back when it raises (the exception propagates after the rollback)."""
        prepared = await self.prepare(topic, body, message_type=message_type, key=key, business_id=business_id,
                                      headers=headers)
        try:
            outcome = local_transaction(prepared.message_id)
            if inspect.isawaitable(outcome):
                await outcome
        except BaseException:
            await self._end_quietly(prepared, commit=False)
            raise
        return TxResult(prepared.message_id, await self._end_quietly(prepared, commit=True))

    async def _end_quietly(self, prepared: PreparedMessage, commit: bool) -> str:
        """End a transaction; when the broker cannot be reached in time the back-check decides."""
        try:
            return await self.end_transaction(prepared, commit)
        except SendTimeout as exc:
            log.warning("%s", exc)
            return p.TX_PREPARED

    def send_nowait(self, topic: str, body: bytes, *, message_type: str = "default", key: str | None = None,
                    business_id: str | None = None, headers: dict[str, str] | None = None, ttl_ms: int = 0,
                    delivery_limit: int = 0, message_id: str | None = None) -> asyncio.Future:
        """Queue one message; returns a future of its id. No coroutine per message: the fast way to
        pipeline many sends. The topic's cluster must be known (`await connect(topic)` once)."""
        link = self._topic_links.get(topic)
        if link is None:
            raise RuntimeError(f"call `await connect({topic!r})` before send_nowait")
        if type(body) is not bytes:
            raise TypeError("a message body must be bytes")
        message_id = message_id or self.new_id()
        future = link.loop.create_future()
        link.submit_one(topic, [message_id, message_type, key, business_id, headers or {}, body, ttl_ms,
                                delivery_limit, 0, int(time.time() * 1000)], future)
        return future

    async def send_many(self, topic: str, messages: Iterable[Message | bytes]) -> list[str]:
        """Store many messages; returns their ids once the broker acknowledged all of them."""
        now_ms = int(time.time() * 1000)
        arrays = [self._array(m if isinstance(m, Message) else Message(m), now_ms) for m in messages]
        if not arrays:
            return []
        ids = [a[p.M_ID] for a in arrays]
        link = self._topic_links.get(topic) or await self._link(topic)
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

    async def close(self) -> None:
        if self._answerer is not None:
            self._answerer.cancel()
        for link in self._links.values():
            await link.close()
        self._links.clear()
        self._topic_links.clear()
        self.locator.stop()

    def stats(self) -> dict:
        return {cluster: {"queued": sum(len(q.messages) for q in link.queued.values()),
                          "in_flight_batches": len(link.in_flight),
                          "retrying_batches": len(link.retry), "failovers": link.failovers,
                          "broker": str(link.conn.address) if link.conn else None}
                for cluster, link in self._links.items()}


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

    def close(self) -> None:
        try:
            self._thread.run(self._async.close(), 10)
        finally:
            self._thread.stop()


__all__ = ["AsyncProducer", "Producer", "Message", "BrokerError", "TxCheck", "TxResult", "PreparedMessage"]
