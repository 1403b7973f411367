"""The producer's link to one cluster: a connection to one of its brokers, the messages queued for it, the
batches awaiting the broker's answer, failover to another broker, send timeouts.

A topic placed on partitions (issue 20, `/placement/<topic>`) is sent partition by partition: each message's
partition is chosen by `choose_partition` (its key's hash, else one round-robin turn per batch) and each batch
goes to its partition's leader over a connection to that broker: the one its `/partition-state/<topic>/<p>`
names (elected, issue 20), else the placement's first replica. A broker that answers `not_leader` (the partition
moved, or a leader was elected) gets the batch sent again once ZooKeeper names the new leader.

A link serves every topic whose route sends there now. When a topic's route moves (`hand_over`), its queued
messages go to the new cluster's link; its batches in flight finish here (`AsyncProducer.resend` decides where
one goes again after a lost connection).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import random
import time
from collections import deque
from typing import Protocol

from broker_core import protocol as p
from broker_core.client._batching import _Batch, _Queued, _reject, _resolve, choose_partition
from broker_core.client.connection import BrokerConnection
from broker_core.client.discovery import Discovery
from broker_core.client.errors import AuthError, BrokerError, ConnectionLost, SendTimeout, SwitchyardError
from broker_core.client.options import ClientOptions
from broker_core.layout import mapping_of
from broker_core.protocol import M_BODY, M_DELIVER_AT_MS, M_KEY

log = logging.getLogger("broker_core.client.producer")

REFUSED_WAIT_S = 0.05  # a batch refused `stale_mapping` is sent again after this (the new placement is read by then)


class LinkOwner(Protocol):
    """What a link reads of, and hands back to, its producer (`producer.AsyncProducer` is one): the link never
    imports the producer that creates it."""

    options: ClientOptions
    send_timeout: float
    max_batch: int
    max_batch_bytes: int
    window: int

    def conn_args(self) -> dict:
        """How the producer's connections introduce themselves (`BrokerConnection.open` arguments)."""
        ...

    def moved_away(self, link: _Link, topic: str) -> bool: ...

    def resend(self, link: _Link, batch: _Batch, exc: BaseException) -> None: ...

    def unused(self, link: _Link) -> bool: ...

    def forget(self, link: _Link) -> None: ...


class _Link:
    """The producer's connection to one cluster (`zk`: its connect string), with its queue and in-flight batches."""

    def __init__(self, producer: LinkOwner, zk: str, discovery: Discovery):
        self.producer = producer
        self.zk = zk
        self.discovery = discovery
        self.loop = asyncio.get_running_loop()
        self.conn: BrokerConnection | None = None
        self.queued: dict[str | tuple[str, int], _Queued] = {}  # by topic; (topic, partition) on a placed topic
        self.retry: deque[_Batch] = deque()
        self.in_flight: dict[int, _Batch] = {}  # by a number of this link (refs are per connection)
        self._numbers = itertools.count(1)
        self.placements: dict[str, dict[int, str]] = {}  # placed topic -> partition -> its leader's node id
        self.mapped: dict[str, int] = {}  # placed topic -> how many of its partitions keys map to (layout.Mapping)
        # topics whose mapping changed: nothing of them is sent until what is in flight under the old one is answered
        # (stored, or refused and queued again), then what waits is queued again by the new mapping (`_remap`)
        self.remapping: set[str] = set()
        self._next_mapped: dict[str, int] = {}  # a remapping topic -> what its keys map to once it is done
        # topic -> batches refused `stale_mapping` (with their send numbers), and when the last one was: nothing
        # of the topic is sent until every batch of it in flight is answered; then they are queued again, first
        self._refused: dict[str, list[tuple[int, _Batch]]] = {}
        self._refused_at: dict[str, float] = {}
        self._remapped: dict[str, int] = {}  # topic -> how often refused batches were queued again (`Publish.remapped`)
        self._elected: dict[tuple[str, int], str] = {}  # (topic, partition) -> the leader its partition state names
        self._placement_read: dict[str, asyncio.Future] = {}
        self.leaders: dict[str, BrokerConnection] = {}  # node id -> the connection to that partition leader
        self._leader_connecting: dict[str, asyncio.Task] = {}
        self._turn = 0  # round robin over partitions: one turn per flush (a batch per partition)
        self.not_leader = 0  # batches a broker refused as not the partition's leader (sent again)
        self.stale_mapping = 0  # batches of an ordered topic refused as sent to another partition (chosen again)
        self._flush_scheduled = False
        self._connecting: asyncio.Task | None = None
        self._sweeper = self.loop.create_task(self._sweep())
        self.closed = False
        self.failovers = 0
        self.last_error: BaseException | None = None

    # -- placement ------------------------------------------------------------------------------

    def watch(self, topic: str) -> asyncio.Future:
        """Follow the topic's placement; the future is done once it was read the first time."""
        read = self._placement_read.get(topic)
        if read is None:
            read = self._placement_read[topic] = self.loop.create_future()
            self.discovery.watch_placement(topic, lambda doc: self._placement(topic, doc))
        return read

    async def follow(self, topic: str, timeout: float) -> None:
        """Read the topic's placement before its first message is queued (not read in time: any broker)."""
        try:
            await asyncio.wait_for(asyncio.shield(self.watch(topic)), max(timeout, 0.05))
        except TimeoutError:
            log.warning("producer: the placement of %s was not read within %.2gs; sending to any broker", topic,
                        timeout)

    def _placement(self, topic: str, doc: dict | None) -> None:
        leaders = None
        if doc:
            try:
                leaders = {int(part["id"]): str(part["replicas"][0]) for part in doc["partitions"]}
                mapped = mapping_of(doc).partitions
                if self.mapped.setdefault(topic, mapped) != mapped or topic in self.remapping:
                    self._next_mapped[topic] = mapped  # (until then, keys are queued by the mapping before)
                    self.remapping.add(topic)
            except (KeyError, TypeError, ValueError, IndexError):
                log.warning("producer: the placement of %s is unreadable; sending to any broker", topic)
        if leaders and sorted(leaders) == list(range(len(leaders))):
            for pid, part in enumerate(doc["partitions"]):
                if len(part["replicas"]) > 1 and (topic, pid) not in self._elected:
                    self._elected[topic, pid] = ""
                    self.discovery.watch_partition_state(
                        topic, pid, lambda st, t=topic, q=pid: self._partition_state(t, q, st))
                leaders[pid] = self._elected.get((topic, pid)) or leaders[pid]
            self.placements[topic] = leaders
        else:
            self.placements.pop(topic, None)
        read = self._placement_read.get(topic)
        if read is not None and not read.done():
            read.set_result(None)
        self._schedule()

    def _partition_state(self, topic: str, partition: int, doc: dict | None) -> None:
        leader = str(doc.get("leader") or "") if isinstance(doc, dict) and doc.get("leader_epoch") else ""
        self._elected[topic, partition] = leader
        leaders = self.placements.get(topic)
        if leader and leaders is not None and partition in leaders and leaders[partition] != leader:
            log.info("producer: partition %d of %s is led by %s now", partition, topic, leader)
            leaders[partition] = leader
            self._schedule()

    def _key(self, topic: str, m: list):
        leaders = self.placements.get(topic)
        if leaders is None:
            return topic
        if len(m) > M_DELIVER_AT_MS and m[M_DELIVER_AT_MS]:  # delayed: partition 0's replicas keep the schedule
            return topic, 0
        return topic, choose_partition(m[M_KEY], self.mapped.get(topic) or len(leaders), self._turn)

    # -- queueing -----------------------------------------------------------------------------

    def submit(self, topic: str, messages: list[list], waiter) -> None:
        """Queue messages of one send_many (all settled through one _Waiter)."""
        if topic in self.placements:
            by_key: dict = {}
            for m in messages:
                by_key.setdefault(self._key(topic, m), []).append(m)
            self._turn += 1
            for key, some in by_key.items():
                self._submit(key, some, waiter)
        else:
            self._submit(topic, messages, waiter)

    def _queue(self, key) -> _Queued:
        return self.queued.get(key) or self.queued.setdefault(key, _Queued())

    def _submit(self, key, messages: list[list], waiter) -> None:
        q = self._queue(key)
        q.messages += messages
        q.waiters += [waiter] * len(messages)
        q.deadlines += [time.monotonic() + self.producer.send_timeout] * len(messages)
        q.bytes += sum(len(m[M_BODY]) + 64 for m in messages)
        if len(q.messages) >= self.producer.max_batch:
            self._flush()  # a full batch goes now: the broker stores it while we pack the next
        else:
            self._schedule()

    def submit_one(self, topic: str, message: list, future: asyncio.Future) -> None:
        key = self._key(topic, message) if topic in self.placements else topic
        # self._queue(key).add(...), inlined: this runs once per message sent
        q = self.queued.get(key) or self.queued.setdefault(key, _Queued())
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
        for topic in list(self._refused):
            self._settle_refused(topic)
        for topic in list(self.remapping):
            self._remap(topic)
        held = self.remapping | self._refused.keys()
        window = self.producer.window
        waiting: deque[_Batch] = deque()
        while self.retry and len(self.in_flight) < window:
            batch = self.retry.popleft()
            conn = self._conn_for(batch.topic, batch.partition) if batch.topic not in held else None
            if conn is None:
                waiting.append(batch)
            else:
                self._send(conn, batch)
        self.retry.extendleft(reversed(waiting))
        max_batch, max_bytes = self.producer.max_batch, self.producer.max_batch_bytes
        for key, q in list(self.queued.items()):
            topic, partition = (key, None) if type(key) is str else key
            conn = self._conn_for(topic, partition) if topic not in held else None
            if conn is None:
                continue
            while q.messages and len(self.in_flight) < window:
                self._send(conn, _Batch(topic, *q.cut(max_batch, max_bytes), partition))
            if not q.messages:
                del self.queued[key]
        self._turn += 1

    def _remap(self, topic: str) -> None:
        """The topic's key mapping changed (a rescale): once nothing of it is in flight or refused and not queued
        again, what waits (batches to send again first, then each queue in its order) is queued by the new mapping,
        so one key's messages are stored in the order they were sent."""
        if topic in self._refused or any(b.topic == topic for b in self.in_flight.values()):
            return
        self.remapping.discard(topic)
        self.mapped[topic] = self._next_mapped.pop(topic)
        retries = [b for b in self.retry if b.topic == topic]
        self.retry = deque(b for b in self.retry if b.topic != topic)
        olds = [(k, self.queued.pop(k)) for k in [k for k in self.queued if type(k) is tuple and k[0] == topic]]
        items = [(m, w, b.deadline) for b in retries for m, w in zip(b.messages, b.waiters, strict=True)]
        for _, q in olds:
            items += zip(q.messages, q.waiters, q.deadlines, strict=True)
        for m, w, deadline in items:
            self._queue(self._key(topic, m)).add(m, w, deadline)
        if items:
            log.info("producer: %d messages of %s queued again by its new key mapping", len(items), topic)

    def tx_target(self, topic: str, key: str | None, partition: int | None = None
                  ) -> tuple[int | None, BrokerConnection | None]:
        """Where a transaction message goes now: its partition (chosen by its key, else the next turn, when not
        given; None: the topic has no placement) and the open connection to that partition's leader (None while
        one is being opened)."""
        leaders = self.placements.get(topic)
        if leaders is None:
            partition = None
        elif partition is None:
            self._turn += 1
            partition = choose_partition(key, self.mapped.get(topic) or len(leaders), self._turn)
        return partition, self._conn_for(topic, partition)

    def leads(self, topic: str, partition: int, node_id: str) -> bool:
        """Whether the placement read names `node_id` as the partition's leader now."""
        return self.placements.get(topic, {}).get(partition) == node_id

    def _conn_for(self, topic: str, partition: int | None) -> BrokerConnection | None:
        """The open connection a batch goes through now (None: one is being opened; the flush comes again)."""
        leader = self.placements.get(topic, {}).get(partition) if partition is not None else None
        own = self.leaders.get(leader) if leader is not None else None
        if own is not None and own.is_open:  # (kept once made: batches over two connections could swap)
            return own
        conn = self.conn
        if leader is None or (conn is not None and conn.is_open and conn.address.node_id == leader):
            if conn is None or not conn.is_open:
                self._ensure_connecting()
                return None
            return conn
        task = self._leader_connecting.get(leader)
        if task is None or task.done():
            self._leader_connecting[leader] = self.loop.create_task(self._connect_leader(leader))
        return None

    async def _connect_leader(self, node_id: str) -> None:
        delay = 0.02
        while not self.closed and any(node_id in leaders.values() for leaders in self.placements.values()):
            address = next((b for b in self.discovery.candidates() if b.node_id == node_id), None)
            if address is not None:
                try:
                    conn = await self._open(address)
                except AuthError:
                    return
                if conn is not None:
                    old = self.leaders.get(node_id)
                    if old is not None:
                        old.close()
                    self.leaders[node_id] = conn
                    conn.closed.add_done_callback(lambda _f: self._schedule())
                    self._schedule()
                    return
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.5)

    def _send(self, conn: BrokerConnection, batch: _Batch) -> None:
        number = next(self._numbers)
        self.in_flight[number] = batch
        remapped = None if batch.partition is None else self._remapped.get(batch.topic, 0)
        answer = conn.request(p.Publish(conn.next_ref(), batch.topic, batch.messages, batch.partition, remapped))
        answer.add_done_callback(lambda f, number=number: self._answered(number, f))

    def _answered(self, number: int, answer: asyncio.Future) -> None:
        batch = self.in_flight.pop(number, None)
        if batch is None:
            return
        exc = answer.exception()
        if exc is None:
            _resolve(batch.waiters, batch.messages)
        elif isinstance(exc, BrokerError) and exc.code == p.E_NOT_LEADER:
            self.not_leader += 1  # the partition moved: sent again once the placement names its new leader
            self.retry.append(batch)
            self.loop.call_later(0.05, self._schedule)
            return
        elif isinstance(exc, BrokerError) and exc.code == p.E_STALE_MAPPING:
            self.stale_mapping += 1  # an ordered topic's partitions changed: each message's partition chosen again
            self._refused.setdefault(batch.topic, []).append((number, batch))
            self._refused_at[batch.topic] = self.loop.time()
            self.loop.call_later(REFUSED_WAIT_S, self._schedule)  # (time for the new placement to be read)
            return
        elif isinstance(exc, ConnectionLost) or (isinstance(exc, BrokerError) and exc.code == p.E_UNKNOWN_TOPIC
                                                 and self.producer.moved_away(self, batch.topic)):
            self.producer.resend(self, batch, exc)  # sent again, same ids, here or where the route goes now
        else:
            for w in batch.waiters:
                _reject(w, exc)
        if self.queued or self.retry or self._refused or self.remapping:
            self._schedule()

    def _settle_refused(self, topic: str) -> None:
        """Batches of the topic refused `stale_mapping` are queued again in the order they were first sent (ahead of
        what was queued since), once nothing else of the topic is in flight and the placement had time to be read."""
        if any(b.topic == topic for b in self.in_flight.values()):
            return
        wait = self._refused_at[topic] + REFUSED_WAIT_S - self.loop.time()
        if wait > 0:
            self.loop.call_later(wait, self._schedule)
            return
        del self._refused_at[topic]
        self._remapped[topic] = self._remapped.get(topic, 0) + 1  # (what was sent before is refused: p.Publish)
        for _, batch in sorted(self._refused.pop(topic), key=lambda nb: nb[0], reverse=True):
            self._requeue(batch)

    def _requeue(self, batch: _Batch) -> None:
        """A batch refused with `stale_mapping`: its messages queued again, each to the partition its key maps to
        under the placement read now (ahead of what was queued since, one key's messages keep their order)."""
        for m, w in zip(reversed(batch.messages), reversed(batch.waiters), strict=True):
            self._queue(self._key(batch.topic, m)).add_first(m, w, batch.deadline)
        self._schedule()

    def hand_over(self, topic: str, other: _Link, with_retries: bool) -> None:
        """The topic's route moved to `other`'s cluster: its queued messages go there (before any it has),
        and with `with_retries` (this cluster is no longer in the route) the batches waiting to be sent again."""
        q = self.queued.pop(topic, None)
        if q is not None:
            mine = other.queued.get(topic)
            if mine is not None:
                mine.prepend(q)
            else:
                other.queued[topic] = q
        if with_retries and self.retry:
            moving = [b for b in self.retry if b.topic == topic]
            self.retry = deque(b for b in self.retry if b.topic != topic)
            other.retry.extend(moving)
        if q is not None or other.retry:
            other._schedule()

    def _ensure_connecting(self) -> None:
        if self.closed or (self._connecting is not None and not self._connecting.done()):
            return
        if self.conn is not None and self.conn.is_open:
            return  # connected: a second connection would replace this one and leak it
        self._connecting = self.loop.create_task(self._connect())

    async def _open(self, address) -> BrokerConnection | None:
        """A connection to the broker at `address`; None if it cannot be reached now (`last_error` says why). A
        refused secret fails every message waiting here and raises AuthError: it does not get better by retrying."""
        try:
            return await BrokerConnection.open(address, timeout=self.producer.options.connect_timeout,
                                               **self.producer.conn_args())
        except AuthError as exc:
            self.last_error = exc
            self._fail_all(exc)
            raise
        except (OSError, SwitchyardError, TimeoutError) as exc:
            self.last_error = exc
            log.debug("producer: %s unreachable: %s", address, exc)
            return None

    async def _connect(self) -> None:
        delay = 0.05
        tried: set = set()
        while not self.closed:
            candidates = self.discovery.candidates()
            if not candidates:  # a cluster just named by the route: its broker list is on its way
                await asyncio.sleep(0.02)
                continue
            fresh = [b for b in candidates if b not in tried] or candidates
            if fresh:
                address = random.choice(fresh)
                tried.add(address)
                try:
                    conn = await self._open(address)
                except AuthError:
                    return
                if conn is not None:
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
        """Fail messages whose send timeout passed: queued ones (the broker never got them) and batches sent but
        never answered; close the link once no route names its cluster and nothing waits on it."""
        while not self.closed:
            await asyncio.sleep(0.25)
            if self.producer.unused(self):
                await self.close()
                return
            now = time.monotonic()
            timeout = SendTimeout(f"not acknowledged within {self.producer.send_timeout}s"
                                  + (f" (last error: {self.last_error})" if self.last_error else ""))
            for topic, q in list(self.queued.items()):
                if q.deadlines and q.deadlines[0] <= now:
                    for w in q.expire(now):
                        _reject(w, timeout)
                    if not q.messages:
                        del self.queued[topic]
            expired = [number for number, batch in self.in_flight.items() if batch.deadline <= now]
            if expired:  # sent, never answered (a broker that stopped answering): failed, its answer ignored
                unanswered = SendTimeout(f"not acknowledged within {self.producer.send_timeout}s: sent, and the "
                                         "broker has not answered (it may have been stored)")
                for number in expired:
                    for w in self.in_flight.pop(number).waiters:
                        _reject(w, unanswered)
                self._schedule()
            if self.retry:
                keep_batches = deque()
                for batch in self.retry:
                    if batch.deadline <= now:
                        for w in batch.waiters:
                            _reject(w, timeout)
                    else:
                        keep_batches.append(batch)
                self.retry = keep_batches

    async def close(self) -> None:
        self.closed = True
        self.producer.forget(self)
        if self._sweeper is not asyncio.current_task():
            self._sweeper.cancel()
        if self._connecting is not None:
            self._connecting.cancel()
        if self.conn is not None:
            self.conn.close()
        for task in self._leader_connecting.values():
            task.cancel()
        for conn in self.leaders.values():
            conn.close()
        self._fail_all(ConnectionLost("producer closed"))

    def idle(self) -> bool:
        return not (self.queued or self.retry or self.in_flight)

    def stats(self) -> dict:
        return {"queued": sum(len(q.messages) for q in self.queued.values()), "in_flight_batches": len(self.in_flight),
                "retrying_batches": len(self.retry), "failovers": self.failovers,
                "partition_leaders": len(self.leaders), "not_leader": self.not_leader,
                "stale_mapping": self.stale_mapping,
                "broker": str(self.conn.address) if self.conn else None}
