"""A consumer group of an ordered topic (issue 21, docs/ordered-topics.md): per key, one message out at a time.

Messages of one order key reach the group in the order they were stored (one partition holds every message of a
key: `layout.physical_partition`), and the next one goes out only once the one before is finished: acknowledged,
or dead-lettered when the binding's `on_failure` is "dead_letter" (with "block", the default, a message past the
delivery limit is delivered again after the backoff until it is acknowledged, and its key waits).

Each physical partition this broker leads is held by ONE subscription of the group at a time: the holder, with a
generation number that grows at every assignment. Only the holder gets messages of the partition, so two
consumers never work on one partition at once. The assignment moves
- when the holder's subscription ends (its connection closed or its heartbeats stopped): its messages out go
  back to the front of their keys, and the partition to another consumer;
- when the holder lets a message pass its ack timeout: the partition is taken from it (its generation is over),
  every message of the partition it holds goes back, and a later ack of one of them is refused with
  `stale_generation` (the message went, or goes, to the partition's next holder);
- when a consumer joins: a holder with more than its share finishes the messages it has of a partition, then the
  partition goes to a consumer with fewer.

Messages wait per key (`keys`); a key whose head may go now is in its partition's `runnable` queue. The lane's
`waiting` set still names every message waiting, so depth, expiry and position resets work as in `Group`.
Broadcast bindings (refused on ordered topics by the control plane) are delivered as by `Group`.
"""

from __future__ import annotations

import logging
import time
from collections import Counter, deque

from broker_core.delivery.group import ITEM_OVERHEAD, Group
from broker_core.delivery.lanes import Lane, Subscription
from broker_core.layout import Mapping
from broker_core.protocol import E_STALE_GENERATION, M_BODY, M_TTL_MS
from broker_core.storage.partitions import PARTITION_BITS
from broker_core.storage.store import StoredMessage

log = logging.getLogger("broker_core.ordered")

STALE_KEPT = 100_000  # seqs taken from a holder whose late ack is answered `stale_generation` (then forgotten)


class OrderedGroup(Group):
    def __init__(self, *args, **kwargs):
        self.keys: dict[str, deque[StoredMessage]] = {}  # key -> its messages waiting, in order
        self.busy: dict[str, int] = {}  # key -> the seq of its message out (in flight, or back for a retry)
        self.runnable: dict[int, deque[str]] = {}  # partition -> keys whose head may go now
        self.holders: dict[int, Subscription] = {}  # partition -> the subscription holding it
        self.generations: dict[int, int] = {}  # partition -> the generation of its assignment
        self._generation = int(time.time() * 1000)  # grows at every assignment (and across restarts)
        self.moving: set[int] = set()  # partitions whose holder finishes what it has, then gives them up
        self.stale: dict[int, Subscription] = {}  # seq -> the subscription it was taken from
        self.revoked: dict[Subscription, float] = {}  # subscription -> when a partition was last taken from it
        self.reassigned = self.stale_acks = 0
        # a rescale's drain barrier (docs/ordered-topics.md): the mapping version whose moved keys wait, the old
        # partitions whose drain marker for this group is missing, and the keys parked by old partition
        self.barrier: Mapping | None = None
        self.undrained: frozenset[int] = frozenset()
        self.parked: dict[int, list[str]] = {}
        super().__init__(*args, **kwargs)

    def _ordered(self, lane: Lane | None = None) -> bool:
        return self.mode == "clustering" and (lane is None or lane is self.main)

    # -- waiting per key ------------------------------------------------------------------------

    def _intake(self, lane: Lane) -> None:
        """Move what entered the lane to its key's queue: a message of a key out with that very message came back
        (nack, timeout, lost consumer) and goes first; others go last."""
        ready, waiting, keys, busy = lane.ready, lane.waiting, self.keys, self.busy
        while ready:
            m = ready.popleft()
            if m.seq not in waiting:
                continue
            key = m.key or ""
            q = keys.get(key)
            if q is None:
                q = keys[key] = deque()
            if busy.get(key) == m.seq:
                del busy[key]
                q.appendleft(m)
                self._runnable(m.seq >> PARTITION_BITS, key)
            elif self.barrier is not None and q and self._before_moved(key, q, m):
                pass
            else:
                q.append(m)
                if len(q) == 1 and key not in busy:
                    self._runnable(m.seq >> PARTITION_BITS, key)

    def _before_moved(self, key: str, q: deque[StoredMessage], m: StoredMessage) -> bool:
        """While a rescale drains: a message of the key's old partition that reaches memory after messages of
        its new one (a backlog read from disk comes after live messages) goes before them, as it was published.
        Returns whether it was placed so."""
        old = self.barrier.old_partition(key)
        if old is None or m.seq >> PARTITION_BITS != old or q[-1].seq >> PARTITION_BITS == old:
            return False
        at = next(i for i, other in enumerate(q) if other.seq >> PARTITION_BITS != old)
        q.insert(at, m)
        if at == 0 and key not in self.busy:
            self._runnable(old, key)
        return True

    def set_barrier(self, mapping: Mapping | None, undrained: set[int] | frozenset[int]) -> None:
        """The drain barrier of a rescale: a key that mapping moved waits on its new partition until its old one
        is drained for this group (`undrained`: the old partitions whose marker is missing). Keys whose old
        partition is drained now go on."""
        undrained = frozenset(undrained) if mapping is not None else frozenset()
        released = self.undrained - undrained
        self.barrier, self.undrained = (mapping if undrained else None), undrained
        for old in released:
            for key in self.parked.pop(old, ()):
                q = self.keys.get(key)
                if q and key not in self.busy:
                    self._runnable(q[0].seq >> PARTITION_BITS, key)
        if released:
            log.info("group %s/%s: old partitions %s drained, their moved keys go on", self.topic, self.name,
                     sorted(released))
            self.dispatch()

    def owes_below(self, partition: int, end: int) -> bool:
        """Whether the group still owes a message of `partition` stored before seq `end` (waiting, in flight, or
        in its backlog on disk)."""
        low = partition << PARTITION_BITS
        backlog = self.backlog
        part = getattr(backlog, "parts", {}).get(partition) if backlog is not None else None
        if part is not None and part.on_disk and part.cursor < end:
            return True
        if any(low <= seq < end for seq in self.main.waiting):
            return True
        return any(low <= seq < end for sub in self.subs for seq in sub.in_flight)

    def _runnable(self, partition: int, key: str) -> None:
        q = self.runnable.get(partition)
        if q is None:
            q = self.runnable[partition] = deque()
        q.append(key)

    def _key_done(self, m: StoredMessage) -> None:
        """`m` left for good (acknowledged, dead-lettered, dropped): its key's next message may go."""
        key = m.key or ""
        if self.busy.get(key) != m.seq:
            return
        del self.busy[key]
        q = self.keys.get(key)
        if q:
            self._runnable(m.seq >> PARTITION_BITS, key)
        elif q is not None:
            del self.keys[key]

    # -- partitions and their holders ---------------------------------------------------------------

    def _holder(self, partition: int, now: float) -> Subscription | None:
        sub = self.holders.get(partition)
        if sub is not None:
            return None if partition in self.moving else sub
        if not self.subs:
            return None
        held = Counter(self.holders.values())
        sub = min(self.subs, key=lambda s: (self.revoked.get(s, -1e9) > now - s.ack_timeout, held[s]))
        self._generation += 1
        self.holders[partition], self.generations[partition] = sub, self._generation
        log.info("group %s/%s: partition %d held by %s, generation %d", self.topic, self.name, partition,
                 sub.conn.consumer_id, self._generation)
        return sub

    def _release_partition(self, partition: int) -> None:
        self.holders.pop(partition, None)
        self.moving.discard(partition)
        self.reassigned += 1

    def _settle_moving(self, sub: Subscription) -> None:
        """Partitions moving away from `sub` go once it holds none of their messages."""
        mine = [p for p in self.moving if self.holders.get(p) is sub]
        if not mine:
            return
        out = {seq >> PARTITION_BITS for seq in sub.in_flight}
        for partition in mine:
            if partition not in out:
                self._release_partition(partition)

    def _rebalance(self) -> None:
        """A consumer joined: holders with more than their share give the excess up once it is finished."""
        share = -(-len(self.holders) // max(1, len(self.subs)))
        by_sub: dict[Subscription, list[int]] = {}
        for partition, sub in sorted(self.holders.items()):
            by_sub.setdefault(sub, []).append(partition)
        for sub, partitions in by_sub.items():
            for partition in partitions[share:]:
                self.moving.add(partition)
            self._settle_moving(sub)

    def _revoke(self, sub: Subscription, partition: int, now: float) -> None:
        """The holder let a message of the partition pass its ack timeout: the partition is taken from it, and
        everything of it that it holds goes back (its acks of them are refused: `stale_generation`)."""
        if self.holders.get(partition) is sub:
            self._release_partition(partition)
        self.revoked[sub] = now
        if len(self.stale) > STALE_KEPT:
            self.stale.clear()
        for seq in [s for s in sub.in_flight if s >> PARTITION_BITS == partition]:
            m, attempt, deadline = sub.in_flight.pop(seq)
            self.stale[seq] = sub
            if deadline <= now:
                self.timed_out += 1
                self._emit("timed_out", m, sub, attempt)
                self._retry(sub.lane, m, attempt, now, None)
            else:
                sub.lane.attempts[seq] = attempt
                sub.lane.ready.appendleft(m)
                sub.lane.waiting.add(seq)
        log.warning("group %s/%s: partition %d taken from %s (an ack timed out); generation %d is over", self.topic,
                    self.name, partition, sub.conn.consumer_id, self.generations.get(partition, 0))

    # -- Group's hooks ------------------------------------------------------------------------------

    def _limit(self, m: StoredMessage) -> int:
        if self._ordered() and self.binding is not None and self.binding.on_failure == "block":
            return 0  # the key waits for this message: delivered again (after the backoff) until acknowledged
        return super()._limit(m)

    def _dead_letter(self, lane: Lane, m: StoredMessage, attempts: int, cause: str, expired: bool = False) -> None:
        super()._dead_letter(lane, m, attempts, cause, expired)
        self._key_done(m)

    def _drop_old(self, lane: Lane, m: StoredMessage, retention_ms: int) -> None:
        super()._drop_old(lane, m, retention_ms)
        self._key_done(m)

    def subscribe(self, sub: Subscription) -> None:
        super().subscribe(sub)
        if self._ordered() and len(self.subs) > 1:
            self._rebalance()
            self.dispatch()

    def unsubscribe(self, sub: Subscription, reason: str | None = None) -> None:
        if sub.active:
            for partition in [p for p, s in self.holders.items() if s is sub]:
                self._release_partition(partition)
            self.revoked.pop(sub, None)
        super().unsubscribe(sub, reason)

    def release(self, reason: str) -> list[StoredMessage]:
        self.parked.clear()
        for q in self.keys.values():
            self.main.ready.extend(q)  # still in `waiting`: drained with the lane
        self.keys.clear()
        self.busy.clear()
        self.runnable.clear()
        return super().release(reason)

    def ack(self, sub: Subscription, seqs: list[int]) -> None:
        if not self._ordered(sub.lane):
            super().ack(sub, seqs)
            return
        in_flight, stale = sub.in_flight, []
        for seq in seqs:
            entry = in_flight.get(seq)
            if entry is not None:
                self._key_done(entry[0])
            elif self.stale.get(seq) is sub:
                del self.stale[seq]
                stale.append(seq)
        if stale:
            self.stale_acks += len(stale)
            sub.conn.error(None, E_STALE_GENERATION, f"{len(stale)} acks of {self.topic}/{self.name} refused: their "
                           "partition was taken from this consumer (an ack timed out); they are delivered again")
        super().ack(sub, seqs)
        self._settle_moving(sub)

    def nack(self, sub: Subscription, items: list) -> None:
        super().nack(sub, items)
        if self._ordered(sub.lane):
            self._settle_moving(sub)

    def tick(self, now: float, now_ms: int, retention_ms: int = 0) -> None:
        if self._ordered():
            for sub in list(self.subs):
                late = {seq >> PARTITION_BITS for seq, entry in sub.in_flight.items() if entry[2] <= now}
                for partition in late:
                    self._revoke(sub, partition, now)
            self.unstick()
            self._expire_keys(now_ms, retention_ms)
        super().tick(now, now_ms, retention_ms)

    def _expire_keys(self, now_ms: int, retention_ms: int) -> None:
        """What `Group.tick` does at the heads of lanes, at the head of each key: past the topic's retention,
        dropped; past its TTL, dead-lettered as expired (the key's message out, if any, is not touched)."""
        cutoff = now_ms - retention_ms if retention_ms else -1
        waiting, lane = self.main.waiting, self.main
        for key, q in list(self.keys.items()):
            while q:
                m = q[0]
                if m.seq not in waiting:
                    q.popleft()
                    continue
                if m.received_ms <= cutoff:
                    q.popleft()
                    waiting.discard(m.seq)
                    self._drop_old(lane, m, retention_ms)
                    continue
                expires = self._expires_ms(m)
                if not expires or now_ms < expires:
                    break
                q.popleft()
                waiting.discard(m.seq)
                self._dead_letter(lane, m, lane.attempts.get(m.seq, 0), "ttl expired", expired=True)
            if not q and key not in self.busy:
                del self.keys[key]

    def requeue_waiting(self) -> None:
        """Put the messages waiting per key back into the lane (a position reset reads the lane); the next
        dispatch sorts them by key again, in the same order."""
        for q in self.keys.values():
            self.main.ready.extend(q)
        self.keys.clear()
        self.runnable.clear()
        self.parked.clear()

    def unstick(self) -> None:
        """A key whose message out was finished by something else than an ack (a position reset takes messages
        out of `waiting` and out of the subscriptions) goes on with its next message."""
        waiting = self.main.waiting
        out = {seq for sub in self.subs for seq in sub.in_flight}
        for key, seq in [(k, s) for k, s in self.busy.items() if s not in waiting and s not in out]:
            del self.busy[key]
            if self.keys.get(key):
                self._runnable(seq >> PARTITION_BITS, key)
            else:
                self.keys.pop(key, None)

    # -- delivery -------------------------------------------------------------------------------------

    def _dispatch_lane(self, lane: Lane) -> None:
        if not self._ordered(lane):
            super()._dispatch_lane(lane)
            return
        self._intake(lane)
        if not self.runnable or not self.subs:
            return
        now = time.monotonic()
        now_ms = int(time.time() * 1000)
        bound_ttl = self.binding.ttl_s
        waiting, attempts, keys, busy = lane.waiting, lane.attempts, self.keys, self.busy
        emit_group = self.trace.emit_group
        barrier, undrained, parked = self.barrier, self.undrained, self.parked
        for partition, runnable in list(self.runnable.items()):
            if not runnable:
                del self.runnable[partition]
                continue
            sub = self._holder(partition, now)
            if sub is None:
                continue
            n = sub.credit - len(sub.in_flight)
            budget = sub.conn.room()
            deadline = now + sub.ack_timeout
            in_flight = sub.in_flight
            items = []
            while runnable and n > 0 and budget > 0:
                key = runnable.popleft()
                if key in busy:
                    continue  # queued twice (a rescale moved it): its message out goes first
                q = keys.get(key)
                m = None
                while q:
                    m = q.popleft()
                    if m.seq not in waiting:
                        m = None  # finished elsewhere (a position reset) or dropped while it waited
                        continue
                    if m.fields[M_TTL_MS] or bound_ttl:
                        expires = self._expires_ms(m)
                        if expires and now_ms >= expires:
                            waiting.discard(m.seq)
                            busy[key] = m.seq  # the key goes on at once (queued again if it has more)
                            self._dead_letter(lane, m, attempts.pop(m.seq, 0), "ttl expired", expired=True)
                            m = None
                    break
                if m is None:
                    if not q and key not in busy:
                        keys.pop(key, None)
                    continue
                home = m.seq >> PARTITION_BITS
                if home != partition:  # its head is of another partition now (a rescale): queued there
                    q.appendleft(m)
                    self._runnable(home, key)
                    continue
                if barrier is not None and (old := barrier.old_partition(key)) in undrained and old != home:
                    q.appendleft(m)  # moved by a rescale: waits until its old partition is drained
                    parked.setdefault(old, []).append(key)
                    continue
                seq = m.seq
                waiting.discard(seq)
                attempt = attempts.pop(seq, 0) + 1 if attempts else 1
                in_flight[seq] = (m, attempt, deadline)
                busy[key] = seq
                items.append((seq, attempt, m.fields))
                n -= 1
                budget -= len(m.fields[M_BODY]) + ITEM_OVERHEAD
                if attempt > 1:
                    self.redelivered += 1
            if items:
                self.delivered += len(items)
                sub.conn.deliver(sub.sub_id, items)
                emit_group("delivered", self.topic, self.name, items, consumer=sub.conn.consumer_id,
                           client_host=sub.conn.peer)

    def oldest_age_s(self) -> float:
        """As `Group.oldest_age_s`, with the messages waiting in the per-key queues."""
        age = super().oldest_age_s()
        waiting = self.main.waiting
        heads = [next((m.received_ms for m in q if m.seq in waiting), None) for q in self.keys.values()]
        oldest = min((t for t in heads if t is not None), default=None)
        return max(age, time.time() - oldest / 1000) if oldest is not None else age

    def stats(self) -> dict:
        out = super().stats()
        if self._ordered():
            out["ordered"] = {"partitions_held": {str(p): {"consumer": s.conn.consumer_id,
                                                           "generation": self.generations.get(p)}
                                                  for p, s in sorted(self.holders.items())},
                              "keys_waiting": len(self.keys), "keys_out": len(self.busy),
                              "reassigned": self.reassigned, "stale_acks": self.stale_acks,
                              "barrier": {"version": self.barrier.version, "waiting_for": sorted(self.undrained),
                                          "keys_parked": sum(len(k) for k in self.parked.values())}
                              if self.barrier is not None else None}
        return out
