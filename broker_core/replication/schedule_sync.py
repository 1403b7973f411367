"""A replicated topic's schedule of delayed messages (issue 20): kept by the replicas of its partition 0.

The leader of partition 0 keeps the active schedule (`delivery/delayed.py`); every other replica of partition 0
keeps a passive copy, which publishes nothing until it is promoted. Frames: `ReplicaSchedule` (ops, leader to
follower) and `ReplicaScheduled` (a number the follower holds durably, with every one before it).

Leader (`ScheduleLeading`, held by partition 0's `PartitionLeader`):
- A publish's delayed messages, once stored here, go to the followers as a "schedule" op numbered in order; the
  producer's reply waits until `min_insync` replicas (the leader included) and every replica of the ISR hold
  them, as a publish's does, and fails with `not_enough_replicas` after the ack timeout (they may still be
  delivered), or `not_leader` when the leader is deposed.
- Every `THROUGH_EVERY_S`, "through" T once T moved: every message due at or before T was delivered (appended to
  partition 0, itself replicated, before it left the schedule). A follower's copy drops those; a promoted one
  delivers what is left, so a failover delivers again at most what came due since the last T.
- A follower that (re)connects gets "reset" (its copy is emptied), then the schedule as it stands: the schedule
  log read from its start up to where it ended then (`read_pending`, about CHUNK_BYTES per step, only while the
  follower's connection has room), without what is settled, then "synced". It counts as in sync (joins the
  ISR, may be elected) only once it answered "synced". What is scheduled meanwhile goes to it as to every follower.

Follower (`ScheduleFollowing`): applies the ops in order to the topic's passive copy (`DelayedMessages.replicate`,
`settle_through`); "reset" empties the copy through the node (`reset(then)`), ops coming meanwhile wait.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections import deque
from collections.abc import Callable

from broker_core import protocol as p
from broker_core.replication.catch_up import OUT_BYTES, WAIT_S, waiting_bytes
from broker_core.replication.leader import NotEnoughReplicas, NotLeading

log = logging.getLogger("broker_core.replication")

THROUGH_EVERY_S = 0.05
CHUNK_BYTES = 1024 * 1024  # schedule log read per snapshot step
OPS_PER_FRAME = 64
RETRY_S = 1.0  # a snapshot read that failed is tried again after this


class ScheduleLeading:
    """The schedule of `topic` replicated from partition 0's `leader` (a PartitionLeader)."""

    def __init__(self, leader, topic):
        self.leader = leader
        self.topic = topic  # delivery.topic.Topic: its `delayed` is the active schedule
        self._numbers = itertools.count(1)
        self.pending: deque[tuple[int, float, Callable, int]] = deque()  # (number, since, reply, count)
        self.conns: dict[int, object] = {}  # by id: followers' connections that got a reset
        self.acked: dict[int, int] = {}  # by id(conn): the highest number it holds durably
        self.synced_at: dict[int, int] = {}  # by id(conn): the number of its "synced" op, until answered
        self.synced: set[int] = set()  # ids of connections whose copy is complete
        self.snapshots: dict[int, _Snapshot] = {}
        self.sent_through = -1
        self._next_through = 0.0
        self.snapshot_entries = 0

    # -- scheduling ------------------------------------------------------------------------------

    def scheduled(self, app_id, received_ms: int, arrays: list, reply: Callable) -> Callable | None:
        """Delayed messages about to be stored here: sent to the followers; returns the reply to call once they are
        durable here (answered once the replicas hold them too), or None when refused (answered already)."""
        refused = self.leader.admit()
        if refused is not None:
            reply(refused, 0, 0)
            return None
        number = next(self._numbers)
        self._send([["schedule", number, app_id, received_ms, arrays]])

        def durable(exc: BaseException | None, first_seq: int, count: int) -> None:
            if exc is not None:
                reply(exc, first_seq, count)
            elif self.leader.deposed:
                reply(self._not_leading("while storing these delayed messages"), 0, 0)
            else:
                self.pending.append((number, time.monotonic(), reply, count))
                self.release()
        return durable

    def _send(self, ops: list) -> None:
        frame = p.ReplicaSchedule(self.leader.topic, self.leader.partition, ops)
        for conn in self.conns.values():
            conn.send(frame)

    def stored(self, conn, number: int) -> None:
        if id(conn) not in self.conns:
            return
        if number > self.acked.get(id(conn), 0):
            self.acked[id(conn)] = number
        if self.synced_at.get(id(conn)) is not None and number >= self.synced_at[id(conn)]:
            del self.synced_at[id(conn)]
            self.synced.add(id(conn))
            log.info("topic %s: follower %s holds the schedule of delayed messages", self.leader.topic,
                     conn.client_id)
            self.leader.schedule_synced(conn)
        self.release()

    def release(self) -> None:
        if self.leader.deposed:
            return
        needed = self.leader.min_insync()
        acked: dict[str, int] = {}  # per node, over its synced connections
        for cid in self.synced:
            node = self.conns[cid].client_id
            acked[node] = max(acked.get(node, 0), self.acked.get(cid, 0))
        while self.pending:
            number = self.pending[0][0]
            if 1 + sum(n >= number for n in acked.values()) < needed or not self.leader.isr_holds(acked, number):
                return
            _, _, reply, count = self.pending.popleft()
            reply(None, 0, count)

    def is_synced(self, conn) -> bool:
        return id(conn) in self.synced

    # -- followers ---------------------------------------------------------------------------

    def fetch(self, conn) -> None:
        """A follower (re)connected: its copy is emptied and sent anew."""
        self.gone(conn)
        self.conns[id(conn)] = conn
        conn.send(p.ReplicaSchedule(self.leader.topic, self.leader.partition, [["reset"]]))
        snapshot = self.snapshots[id(conn)] = _Snapshot(self, conn)
        snapshot.start()

    def gone(self, conn) -> None:
        cid = id(conn)
        for table in (self.conns, self.acked, self.synced_at):
            table.pop(cid, None)
        self.synced.discard(cid)
        snapshot = self.snapshots.pop(cid, None)
        if snapshot is not None:
            snapshot.stop()

    def snapshot_sent(self, conn, through: int) -> None:
        number = next(self._numbers)
        self.synced_at[id(conn)] = number
        self.snapshots.pop(id(conn), None)
        conn.send(p.ReplicaSchedule(self.leader.topic, self.leader.partition,
                                    [["through", through], ["synced", number]]))

    # -- time ----------------------------------------------------------------------------------

    def tick(self, now: float) -> None:
        if now >= self._next_through and self.conns:
            self._next_through = now + THROUGH_EVERY_S
            through = self.topic.delayed.settled_through(int(time.time() * 1000))
            if through > self.sent_through:
                self.sent_through = through
                self._send([["through", through]])
        timeout = self.leader.ack_timeout_s
        while self.pending and now - self.pending[0][1] > timeout:
            self.pending.popleft()[2](NotEnoughReplicas(
                f"fewer than {self.leader.min_insync()} replicas of partition 0 of topic {self.leader.topic!r} "
                f"stored these delayed messages within {timeout:g}s: not acknowledged (they may still be "
                "delivered)"), 0, 0)

    def step_down(self, why: str) -> None:
        while self.pending:
            self.pending.popleft()[2](self._not_leading(f"({why})"), 0, 0)
        for snapshot in self.snapshots.values():
            snapshot.stop()
        self.snapshots.clear()
        delayed = self.topic.delayed
        if delayed is not None and delayed.replicas is self:
            delayed.deactivate()

    def _not_leading(self, when: str) -> Exception:
        return NotLeading(f"partition 0 of topic {self.leader.topic!r}: this broker stopped leading it {when}: not "
                          "acknowledged (they may still be delivered)")

    def stats(self) -> dict:
        return {"synced": len(self.synced), "snapshots": len(self.snapshots), "pending": len(self.pending),
                "through_ms": self.sent_through, "snapshot_entries": self.snapshot_entries}


class _Snapshot:
    """The leader's schedule as it stands, sent to one follower a chunk at a time."""

    def __init__(self, owner: ScheduleLeading, conn):
        self.owner, self.conn = owner, conn
        self.store = owner.topic.delayed.store
        self.point = self.store.snapshot_point()  # what is scheduled after it goes to the follower as it comes
        self.cursor = None
        self.stopped = False
        self._handle: asyncio.Handle | None = None

    def start(self) -> None:
        self._later(0.0)

    def stop(self) -> None:
        self.stopped = True
        if self._handle is not None:
            self._handle.cancel()

    def _later(self, delay: float) -> None:
        loop = asyncio.get_running_loop()
        self._handle = loop.call_later(delay, self._step) if delay else loop.call_soon(self._step)

    def _step(self) -> None:
        if self.stopped or getattr(self.conn, "closed", False):
            return
        if waiting_bytes(self.conn) >= OUT_BYTES:
            self._later(WAIT_S)  # the follower has not read what was sent yet
            return
        self.store.read_pending(self.cursor, self.point, CHUNK_BYTES, self._read)

    def _read(self, entries: list[list], cursor, exc: BaseException | None) -> None:
        if self.stopped:
            return
        if exc is not None:
            log.error("topic %s: reading the schedule for follower %s failed (tried again): %s",
                      self.owner.leader.topic, getattr(self.conn, "client_id", "?"), exc)
            self._later(RETRY_S)
            return
        through = self.owner.topic.delayed.settled_through(int(time.time() * 1000))
        ops: list[list] = []
        for due_ms, app_id, received_ms, fields in entries:
            if due_ms <= through:
                continue  # delivered already
            if ops and ops[-1][2] == app_id and ops[-1][3] == received_ms:
                ops[-1][4].append(fields)
            else:
                ops.append(["schedule", 0, app_id, received_ms, [fields]])
            self.owner.snapshot_entries += 1
        for i in range(0, len(ops), OPS_PER_FRAME):
            self.conn.send(p.ReplicaSchedule(self.owner.leader.topic, self.owner.leader.partition,
                                             ops[i:i + OPS_PER_FRAME]))
        if cursor is None:
            self.stopped = True
            self.owner.snapshot_sent(self.conn, through)
            return
        waiting = cursor == self.cursor and not entries  # the point's part is not written yet
        self.cursor = cursor
        self._later(WAIT_S if waiting else 0.0)


class ScheduleFollowing:
    """A follower's side: the ops of partition 0's leader applied to `topic`'s passive schedule copy.
    `reset(then)`: the node empties the copy, then calls `then()`."""

    def __init__(self, topic, reset: Callable[[Callable[[], None]], None]):
        self.topic = topic
        self.reset = reset
        self.queue: deque[tuple[list, object]] = deque()
        self.resetting = False
        self.generation = 0  # a reset starts a new one: answers of the emptied copy's adds are not sent
        self.added = self.durable = 0
        self.synced_wait: deque[tuple[int, int, object]] = deque()  # (adds before it, number, link)
        self.resets = self.replicated = 0

    def on_ops(self, ops: list, link) -> None:
        for op in ops:
            self.queue.append((op, link))
        self._drain()

    def _drain(self) -> None:
        while self.queue and not self.resetting:
            op, link = self.queue.popleft()
            kind = op[0]
            if kind == "reset":
                self.resetting = True
                self.generation += 1
                self.added = self.durable = 0
                self.synced_wait.clear()
                self.resets += 1
                self.reset(self._reset_done)
            elif kind == "schedule":
                _, number, app_id, received_ms, arrays = op
                self.added += 1
                self.replicated += len(arrays)
                generation = self.generation
                self.topic.delayed.replicate(app_id, received_ms, arrays,
                                             lambda exc, n=number, g=generation, li=link: self._stored(g, n, li, exc))
            elif kind == "through":
                self.topic.delayed.settle_through(op[1])
            elif kind == "synced":
                self.synced_wait.append((self.added, op[1], link))
                self._answer_synced()

    def _reset_done(self) -> None:
        self.resetting = False
        self._drain()

    def _stored(self, generation: int, number: int, link, exc: BaseException | None) -> None:
        if generation != self.generation:
            return
        if exc is not None:  # the leader gets no answer: its ack times out; asked anew from a new connection
            log.error("topic %s: storing the leader's delayed messages failed: %s; reconnecting",
                      self.topic.name, exc)
            transport = getattr(link, "transport", None)
            if transport is not None:
                transport.close()
            return
        self.durable += 1
        if number:
            link.send(p.ReplicaScheduled(self.topic.name, 0, number))
        self._answer_synced()

    def _answer_synced(self) -> None:
        while self.synced_wait and self.synced_wait[0][0] <= self.durable:
            _, number, link = self.synced_wait.popleft()
            link.send(p.ReplicaScheduled(self.topic.name, 0, number))

    def stats(self) -> dict:
        return {"resets": self.resets, "replicated": self.replicated, "resetting": self.resetting}

