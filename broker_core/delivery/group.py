"""A consumer group of one topic (nsqd's channel): queue, in-flight, backoff, dead letters.

Every message owed to the group waits in a *lane* until a subscription with credit takes it; it is
then in flight on that subscription until acked, nacked or timed out. Clustering mode has one lane
that all subscriptions share (each message goes to one consumer); broadcast mode gives each
subscription its own lane (each message goes to every consumer connected).

Finished (acked or dead-lettered) messages are reported to the store, which makes the group's
delivery state durable. A nack or an ack timeout schedules the message again after the binding's
backoff; past the delivery limit or the TTL it goes to the dead-letter queue instead.

Timing: in-flight deadlines use the monotonic clock; TTLs use wall-clock milliseconds from the
time the broker received the message (so they hold across restarts). Expired messages are found
when they reach the head of a lane, are dispatched, or come back from a consumer. Attempt counts
are kept in memory: after a broker restart a message starts again from attempt 1.
"""

from __future__ import annotations

import heapq
import logging
import time

from broker_core.cluster.state import Backoff, Binding
from broker_core.delivery.backlog import WINDOW_BYTES, WINDOW_MESSAGES, backlog_for
from broker_core.delivery.lanes import Lane, Subscription, give_to_lanes, give_to_one_lane, oldest_owed_ms
from broker_core.protocol import M_BODY, M_TTL_MS
from broker_core.storage.store import StoredMessage, TopicStore
from broker_core.tracing.sink import TraceSink

log = logging.getLogger("broker_core.group")

DEFAULT_BACKOFF = Backoff()
ITEM_OVERHEAD = 128  # bytes a delivered message costs on the wire besides its body (as `ClientConnection.deliver`)


class Group:
    def __init__(
        self,
        topic: str,
        name: str,
        store: TopicStore,
        binding: Binding | None,
        *,
        trace: TraceSink,
        max_credit: int,
        window: tuple[int, int] = (WINDOW_MESSAGES, WINDOW_BYTES),
    ):
        self.topic = topic
        self.name = name
        self.store = store
        self.trace = trace  # the node's sink (a NullTraceSink when tracing is off)
        self.max_credit = max_credit
        self.binding: Binding | None = None
        self.mode = "clustering"
        self.subs: list[Subscription] = []
        self.main = Lane()  # clustering: the shared lane; broadcast: messages waiting for a consumer
        self.lanes: dict[Subscription, Lane] = {}  # broadcast only
        self.copies: dict[int, list] = {}  # broadcast: seq -> [lanes still holding it, some lane finished it]
        self.acked = self.delivered = self.redelivered = self.nacked = self.timed_out = 0
        self.dead_lettered = self.expired = self.retention_dropped = 0
        self.window = window  # a file-stored topic: past this window the backlog stays in the log (backlog.py)
        self.backlog = backlog_for(store, name, window)
        self.set_binding(binding)

    # -- configuration ----------------------------------------------------------------------

    def set_binding(self, binding: Binding | None) -> None:
        """Apply a new or changed binding (None: removed). Subscriptions that no longer hold end."""
        old = self.binding
        self.binding = binding
        if binding is None:
            for sub in list(self.subs):
                self.unsubscribe(sub, reason="binding removed")
            return
        if old is not None and (old.mode != binding.mode or old.app_id != binding.app_id):
            for sub in list(self.subs):
                self.unsubscribe(sub, reason="binding changed")
        if self.mode != binding.mode and not self.subs:
            self.mode = binding.mode
        for sub in self.subs:  # a changed max_in_flight applies to the consumers connected now
            sub.credit = self.clamp_credit(sub.wanted)
        self.dispatch()

    def release(self, reason: str) -> list[StoredMessage]:
        """The group goes (its binding or its topic was removed): end every subscription with `reason` and
        return the messages it still owed, which the caller finishes for it."""
        for sub in list(self.subs):
            self.unsubscribe(sub, reason=reason)
        if self.backlog is not None:
            self.backlog.closed = True  # what it owes on disk stays there (the caller finishes it or deletes it)
        owed = {}
        for lane in [self.main, *self.lanes.values()]:
            for m in lane.drain():
                owed[m.seq] = m
        self.copies.clear()
        return list(owed.values())

    def clamp_credit(self, credit: int) -> int:
        cap = self.max_credit
        if self.binding is not None and self.binding.max_in_flight:
            cap = min(cap, self.binding.max_in_flight)
        return max(0, min(credit, cap))

    @property
    def backoff(self) -> Backoff:
        return self.binding.backoff if self.binding is not None else DEFAULT_BACKOFF

    def _limit(self, m: StoredMessage) -> int:
        bound = self.binding.delivery_limit if self.binding is not None else 0
        if m.delivery_limit and bound:
            return min(m.delivery_limit, bound)
        return m.delivery_limit or bound

    def _expires_ms(self, m: StoredMessage) -> int:
        ttl = m.ttl_ms
        if self.binding is not None and self.binding.ttl_s:
            bound = int(self.binding.ttl_s * 1000)
            ttl = min(ttl, bound) if ttl else bound
        return m.received_ms + ttl if ttl else 0

    # -- messages in ----------------------------------------------------------------------------

    def enqueue(self, messages: list[StoredMessage]) -> None:
        """Messages now durable and owed to this group, in log order: in memory while the window has room and
        nothing older of their partition is on disk, else left in the log (read back when the window runs low)."""
        backlog = self.backlog
        if backlog is not None:
            if backlog.on_disk_before_any(messages) or self.held_in_memory() + len(messages) > backlog.limit:
                backlog.spill(messages)
                self.dispatch()
                return
            backlog.took(messages)
        self._admit(messages)
        self.dispatch()

    def resume(self, start, end: int) -> None:
        """Recovery: the group owes messages of the log from `start` (a storage.owed.GroupStart) on."""
        self.backlog.resume(start, end)
        self.dispatch()

    def use_store(self, store: TopicStore) -> None:
        """Another storage level (the topic holds no message now)."""
        self.store, self.backlog = store, backlog_for(store, self.name, self.window)

    def enqueue_committed(self, m: StoredMessage) -> None:
        """A committed transaction message, owed from now (its seq is older): after what is on disk."""
        if self.backlog is not None and self.backlog.on_disk_before(m):
            self.backlog.insert(m)
        else:
            self._admit([m])
        self.dispatch()

    def held_in_memory(self) -> int:  # owed messages waiting in memory (in flight ones are bounded by credit)
        return len(self.main.waiting) + len(self.copies)

    def _admit(self, messages: list[StoredMessage]) -> None:
        if self.mode == "clustering" or not self.lanes:
            main = self.main
            main.ready.extend(messages)
            main.waiting.update([m.seq for m in messages])
        else:
            lanes = list(self.lanes.values())
            for m in messages:
                self.copies[m.seq] = [len(lanes), False]
                for lane in lanes:
                    lane.add(m)

    def _refill(self) -> None:
        """The window ran below half: read the next owed messages from the log (one read at a time)."""
        backlog = self.backlog
        room = backlog.limit - self.held_in_memory()
        if room >= backlog.limit // 2 and not backlog.closed:
            backlog.read(room, self._loaded)

    def _loaded(self, messages: list[StoredMessage]) -> None:
        self._admit(messages)
        self.dispatch()

    # -- subscriptions ----------------------------------------------------------------------

    def subscribe(self, sub: Subscription) -> None:
        sub.credit = self.clamp_credit(sub.credit)
        self.subs.append(sub)
        if self.mode == "clustering":
            sub.lane = self.main
            self.main.subs.append(sub)
        else:
            lane = Lane()
            lane.subs.append(sub)
            sub.lane = lane
            self.lanes[sub] = lane
            old_main = self.main
            waiting = old_main.drain()
            if waiting:
                self.main = Lane()
                give_to_lanes(self.lanes, self.main, self.copies, waiting, old_main.attempts)
        self.dispatch()

    def unsubscribe(self, sub: Subscription, reason: str | None = None) -> None:
        """End a subscription; what it held goes back to the group (its attempts are kept)."""
        if not sub.active:
            return
        sub.active = False
        if sub in self.subs:
            self.subs.remove(sub)
        lane = sub.lane
        held = [m for m, _, _ in sub.in_flight.values()]
        for m, attempt, _ in sub.in_flight.values():
            lane.attempts[m.seq] = attempt  # a delivery that went nowhere still counts
        sub.in_flight.clear()
        if self.mode == "clustering" or lane is self.main:
            lane.subs.remove(sub)
            for m in reversed(held):  # at the front: they were first in line
                lane.ready.appendleft(m)
                lane.waiting.add(m.seq)
        else:
            del self.lanes[sub]
            orphans = []
            for m in held + lane.drain():
                copies = self.copies.get(m.seq)
                if copies is None:
                    continue
                copies[0] -= 1
                if copies[0] == 0:
                    if copies[1]:
                        self._finish_shared(m)
                    else:
                        del self.copies[m.seq]
                        orphans.append(m)
            if orphans:
                give_to_one_lane(self.lanes, self.main, self.copies, orphans, lane.attempts)
        if reason is not None:
            sub.conn.unsubscribed(sub.sub_id, reason)
        if self.mode == "clustering":
            self.dispatch()
        elif not self.subs and self.binding is not None:
            self.mode = self.binding.mode

    def set_credit(self, sub: Subscription, credit: int) -> None:
        sub.wanted = credit
        sub.credit = self.clamp_credit(credit)
        self.dispatch()

    # -- delivery -------------------------------------------------------------------------------

    def dispatch(self) -> None:
        backlog = self.backlog
        if backlog is not None and backlog.on_disk and not backlog.reading:
            self._refill()
        if self.binding is None:
            return
        if self.mode == "clustering":
            self._dispatch_lane(self.main)
        else:
            for lane in self.lanes.values():
                self._dispatch_lane(lane)

    def _dispatch_lane(self, lane: Lane) -> None:
        if not lane.ready:
            return
        # a consumer takes messages while it has credit AND room: what waits to be written to it is bounded in
        # bytes (max_outbuf_bytes), so a consumer that does not read holds at most that much, whatever its credit
        subs = [s for s in lane.subs if s.credit > len(s.in_flight) and s.conn.room() > 0]
        if not subs:
            return
        now = time.monotonic()
        now_ms = int(time.time() * 1000)
        ready, waiting, attempts = lane.ready, lane.waiting, lane.attempts
        lane.rr = (lane.rr + 1) % len(subs)
        subs = subs[lane.rr:] + subs[:lane.rr]
        emit_group = self.trace.emit_group
        bound_ttl = self.binding.ttl_s
        while ready and subs:
            share = max(1, -(-len(ready) // len(subs)))
            for sub in list(subs):
                n = min(sub.credit - len(sub.in_flight), share)
                budget = sub.conn.room()
                deadline = now + sub.ack_timeout
                in_flight = sub.in_flight
                items = []
                while n > 0 and ready and budget > 0:
                    m = ready.popleft()
                    seq = m.seq
                    if seq not in waiting:
                        continue  # expired while it waited
                    fields = m.fields
                    if fields[M_TTL_MS] or bound_ttl:
                        expires = self._expires_ms(m)
                        if expires and now_ms >= expires:
                            waiting.discard(seq)
                            self._dead_letter(lane, m, attempts.pop(seq, 0), "ttl expired", expired=True)
                            continue
                    waiting.discard(seq)
                    # `attempts` holds only messages that came back; a first delivery needs no entry
                    attempt = attempts.pop(seq, 0) + 1 if attempts else 1
                    in_flight[seq] = (m, attempt, deadline)
                    items.append((seq, attempt, fields))
                    n -= 1
                    budget -= len(fields[M_BODY]) + ITEM_OVERHEAD
                    if attempt > 1:
                        self.redelivered += 1
                if items:
                    self.delivered += len(items)
                    sub.conn.deliver(sub.sub_id, items)
                    # one record for the frame (the items are not changed afterwards)
                    emit_group("delivered", self.topic, self.name, items, consumer=sub.conn.consumer_id,
                               client_host=sub.conn.peer)
                if n > 0 or sub.credit <= len(in_flight) or sub.conn.room() <= 0:
                    subs.remove(sub)
                if not ready:
                    break

    # -- answers from consumers -------------------------------------------------------------

    def ack(self, sub: Subscription, seqs: list[int]) -> None:
        pop = sub.in_flight.pop
        entries = []  # in-flight entries (message, attempt, deadline), as they are
        for seq in seqs:
            entry = pop(seq, None)
            if entry is not None:  # else late: it timed out and went to someone else, or it was never ours
                entries.append(entry)
        done = [entry[0] for entry in entries]
        if entries:
            self.trace.emit_attempts("acked", self.topic, self.name, entries, consumer=sub.conn.consumer_id,
                                     client_host=sub.conn.peer)
        self.acked += len(done)
        if self.mode == "broadcast" and sub.lane is not self.main:
            for m in done:
                self._copy_done(m)
        else:
            self.store.finish_many(done, self.name)
            for m in done:
                m.pending -= 1
        self.dispatch()

    def nack(self, sub: Subscription, items: list) -> None:
        now = time.monotonic()
        for item in items:
            try:
                seq, delay_ms, reason = int(item[0]), int(item[1]), str(item[2] or "")
            except (TypeError, ValueError, IndexError):
                continue
            entry = sub.in_flight.pop(seq, None)
            if entry is None:
                continue
            m, attempt, _ = entry
            self.nacked += 1
            self._emit("nacked", m, sub, attempt, reason or None)
            # a consumer's own delay replaces the backoff but cannot park a message past the binding's longest wait
            delay = min(delay_ms, self.backoff.max_ms) if delay_ms >= 0 else None
            self._retry(sub.lane, m, attempt, now, delay)
        self.dispatch()

    def _retry(self, lane: Lane, m: StoredMessage, attempt: int, now: float, delay_ms: int | None) -> None:
        lane.attempts[m.seq] = attempt
        expires = self._expires_ms(m)
        if expires and time.time() * 1000 >= expires:
            self._dead_letter(lane, m, attempt, "ttl expired", expired=True)
            return
        limit = self._limit(m)
        if limit and attempt >= limit:
            self._dead_letter(lane, m, attempt, f"delivery limit of {limit} reached")
            return
        if delay_ms is None:
            delay_ms = self.backoff.delay_ms(attempt)
        if delay_ms <= 0:
            lane.ready.appendleft(m)
        else:
            heapq.heappush(lane.deferred, (now + delay_ms / 1000, m.seq, m))
        lane.waiting.add(m.seq)

    def _dead_letter(self, lane: Lane, m: StoredMessage, attempts: int, cause: str, expired: bool = False) -> None:
        lane.attempts.pop(m.seq, None)
        broadcast = self.mode == "broadcast" and lane is not self.main
        self.store.dead_letter(m, self.name, cause, attempts, int(time.time() * 1000), finish=not broadcast)
        if expired:
            self.expired += 1
        else:
            self.dead_lettered += 1
        self._emit("expired" if expired else "dead_lettered", m, None, attempts or None, cause)
        if broadcast:
            self._copy_done(m)
        else:
            m.pending -= 1

    def _copy_done(self, m: StoredMessage) -> None:
        copies = self.copies.get(m.seq)
        if copies is None:
            return
        copies[0] -= 1
        copies[1] = True
        if copies[0] == 0:
            self._finish_shared(m)

    def _finish_shared(self, m: StoredMessage) -> None:
        del self.copies[m.seq]
        self.store.finish(m, self.name)
        m.pending -= 1

    # -- timers -----------------------------------------------------------------------------

    def tick(self, now: float, now_ms: int, retention_ms: int = 0) -> None:
        """Ack timeouts, due retries, expired heads of lanes, and (`retention_ms`: the topic's retention)
        messages older than the retention, which are dropped."""
        for sub in list(self.subs):
            if not sub.in_flight:
                continue
            late = []
            for seq, entry in sub.in_flight.items():
                if entry[2] > now:
                    break
                late.append(seq)
            for seq in late:
                m, attempt, _ = sub.in_flight.pop(seq)
                self.timed_out += 1
                self._emit("timed_out", m, sub, attempt)
                self._retry(sub.lane, m, attempt, now, None)
        cutoff = now_ms - retention_ms if retention_ms else -1  # received at or before it: past retention
        lanes = [self.main] if self.mode == "clustering" else [self.main, *self.lanes.values()]
        for lane in lanes:
            deferred = lane.deferred
            while deferred and deferred[0][0] <= now:
                _, seq, m = heapq.heappop(deferred)
                if seq not in lane.waiting:
                    continue
                if m.received_ms <= cutoff:
                    lane.waiting.discard(seq)
                    self._drop_old(lane, m, retention_ms)
                else:
                    lane.ready.append(m)
            self._expire_heads(lane, now_ms, cutoff, retention_ms)
        self.dispatch()

    def _expire_heads(self, lane: Lane, now_ms: int, cutoff: int, retention_ms: int) -> None:
        ready = lane.ready
        while ready:
            m = ready[0]
            if m.seq not in lane.waiting:
                ready.popleft()
                continue
            if m.received_ms <= cutoff:
                ready.popleft()
                lane.waiting.discard(m.seq)
                self._drop_old(lane, m, retention_ms)
                continue
            expires = self._expires_ms(m)
            if not expires or now_ms < expires:
                return
            ready.popleft()
            lane.waiting.discard(m.seq)
            self._dead_letter(lane, m, lane.attempts.get(m.seq, 0), "ttl expired", expired=True)

    def _drop_old(self, lane: Lane, m: StoredMessage, retention_ms: int) -> None:
        """A waiting message older than the topic's retention: dropped for this group (not dead-lettered, since
        the retention bounds how long the topic's data is kept), so its log segment can go."""
        attempts = lane.attempts.pop(m.seq, None)
        self.retention_dropped += 1
        self._emit("expired", m, None, attempts, f"retention of {retention_ms // 1000}s passed: dropped")
        if self.mode == "broadcast" and lane is not self.main:
            self._copy_done(m)
        else:
            self.store.finish(m, self.name)
            m.pending -= 1

    # -- reporting --------------------------------------------------------------------------

    def _emit(self, event: str, m: StoredMessage, sub: Subscription | None, attempt: int | None,
              detail: str | None = None) -> None:
        self.trace.emit(event, message_id=m.id, topic=self.topic, message_type=m.message_type, key=m.key,
                        business_id=m.business_id, group=self.name,
                        consumer=sub.conn.consumer_id if sub else None,
                        client_host=sub.conn.peer if sub else None, attempt=attempt, detail=detail)

    def depth(self) -> int:
        waiting = self.main.depth() + sum(lane.depth() for lane in self.lanes.values())  # no lanes in clustering
        return waiting + (self.backlog.depth() if self.backlog is not None else 0)

    def in_flight(self) -> int:
        return sum(len(s.in_flight) for s in self.subs)

    def oldest_age_s(self) -> float:
        """Seconds since the broker received the oldest message the group still owes (waiting or in flight)."""
        oldest = oldest_owed_ms([self.main, *self.lanes.values()], self.subs,
                                self.backlog.oldest_ms() if self.backlog is not None else None)
        return max(0.0, time.time() - oldest / 1000) if oldest is not None else 0.0

    COUNTERS = ("delivered", "acked", "nacked", "timed_out", "redelivered", "dead_lettered", "expired",
                "retention_dropped")

    def stats(self) -> dict:
        return {
            "mode": self.mode, "bound": self.binding is not None, "depth": self.depth(),
            "in_flight": self.in_flight(), **{name: getattr(self, name) for name in self.COUNTERS},
            "revision": self.binding.revision if self.binding is not None else None,
            "dead_letter_queue": self.store.dead_letter_count(self.name),
            "consumers": len(self.subs),
            "oldest_age_seconds": self.oldest_age_s(),
            "on_disk": self.backlog.depth() if self.backlog is not None else 0,
        }
