"""Delayed messages of one topic on this broker (issue 21): keep them in the schedule store, bring the buckets
near now into memory, and append each message to the topic's log as an ordinary message when it is due.

- `schedule` stores a publish's delayed messages in the schedule store (durable under the fsync policy before
  the publish is answered) and emits `scheduled` trace events (`detail` = "due_ms=<Unix ms>").
- A bucket (one minute, `storage.schedule.BUCKET_MS`) is loaded `preload_ms` before it starts: its entries,
  without bodies, go into a heap ordered by due time. Bodies are read `fetch_ahead_ms` before they are due
  (in the store's executor), and a timer fires at the earliest due time. Only the loaded buckets are in
  memory (at most `max_loaded` entries: after a long stop the past buckets are taken a few at a time).
- A due message is published on the topic like any other (same app id, `received_ms` = the time it came due),
  routed to the groups bound *at due time*, stored, traced (`published`, `stored`) and delivered; once that
  append is durable the entry leaves the schedule (a crash in between costs a duplicate, never a loss). A
  failed append is retried a second later. Entries are never handed out before their due time: a recovery
  loads every past bucket first, and nothing in the heap is published before `due_ms <= now`.
- On a replicated topic (issue 20) the replicas of partition 0 keep the schedule: its leader's is `active` (as
  above; `replicas`, the replication's hook, sends what it schedules to the followers and holds the reply until
  they hold it too), and `settled_through` says up to which due time everything was delivered. A follower's
  copy is `passive`: it takes what the leader scheduled (`replicate`) and drops what is settled
  (`settle_through`); it publishes nothing until it is promoted (`activate`), when it delivers what is left.
"""

from __future__ import annotations

import heapq
import logging
import time
from collections.abc import Callable

from broker_core.protocol import E_NOT_LEADER, M_BODY, M_BUSINESS_ID, M_DELIVER_AT_MS, M_ID, M_KEY, M_TYPE
from broker_core.storage.schedule import BUCKET_MS, Scheduled, ScheduleStore, bucket_of
from broker_core.tracing.sink import TraceSink

log = logging.getLogger("broker_core.delayed")


class ScheduleNotLed(Exception):
    """A delayed publish sent to a broker that keeps only a follower's copy of the topic's schedule."""

    code = E_NOT_LEADER


# reply(error or None, first seq, count), as a topic's publish answers
PublishReply = Callable[[BaseException | None, int, int], None]
# publish(app_id, arrays, body bytes, reply): the topic's ordinary publish
Publish = Callable[[str | None, list[list], int, PublishReply], None]


class DelayedMessages:
    def __init__(self, topic: str, store: ScheduleStore, publish: Publish, trace: TraceSink,
                 call_later: Callable[..., object], *, preload_ms: int = 5_000, fetch_ahead_ms: int = 1_000,
                 max_loaded: int = 500_000, retry_s: float = 1.0, passive: bool = False):
        self.topic = topic
        self.store = store
        self.publish = publish
        self.trace = trace
        self.call_later = call_later
        self.preload_ms = preload_ms
        self.fetch_ahead_ms = fetch_ahead_ms
        self.max_loaded = max_loaded
        self.retry_s = retry_s
        self.loaded_through = -1  # every bucket up to this key is in memory (or being loaded)
        self._loading: int | None = None
        self._delivered_while_loading: set = set()
        self._waiting: list[Scheduled] = []  # heap: loaded, body not read yet
        self._ready: list[Scheduled] = []  # heap: body read, waits for its due time
        self._in_ram: set = set()  # refs of every entry in memory (a bucket's load skips those)
        self._fetching = False
        self._timer = None
        self._timer_at = 0
        self.delivered = 0
        self.lateness_ms_max = 0
        self.passive = passive  # a follower's copy: publishes nothing, drops what the leader settled
        self.settled = -1  # passive: every entry due at or before this was delivered by the leader
        self.replicas = None  # active on a replicated topic: `scheduled(app, received_ms, arrays, reply)` (or None)
        self._adding: dict[int, int] = {}  # adds not durable yet -> their earliest due time
        self._out: dict[int, int] = {}  # publishes not answered yet -> their earliest due time
        self._fetch_min: int | None = None  # the earliest due time being fetched

    @property
    def count(self) -> int:
        return self.store.count

    def schedule(self, app_id: str, client_host: str | None, arrays: list[list], reply: PublishReply) -> None:
        """Store delayed messages; `reply` once durable (first seq 0: they have none until they are due)."""
        received_ms = int(time.time() * 1000)
        if self.replicas is not None:  # a replicated topic's: answered once the in-sync replicas hold them too
            reply = self.replicas.scheduled(app_id, received_ms, arrays, reply)
            if reply is None:  # refused (too few replicas in sync): nothing stored
                return

        def done(exc: BaseException | None, entries: list[Scheduled]) -> None:
            reply(exc, 0, 0 if exc is not None else len(arrays))
            for e in entries if exc is None else ():
                m = e.fields
                self.trace.emit("scheduled", message_id=m[M_ID], topic=self.topic, message_type=m[M_TYPE],
                                key=m[M_KEY], business_id=m[M_BUSINESS_ID], app_id=app_id, client_host=client_host,
                                detail=f"due_ms={e.due_ms}", ts_us=received_ms * 1000)

        self._add(app_id, received_ms, arrays, done)

    def replicate(self, app_id: str | None, received_ms: int, arrays: list[list],
                  on_done: Callable[[BaseException | None], None]) -> None:
        """A follower's copy: what the leader scheduled, with its received time; `on_done` once durable."""
        self._add(app_id, received_ms, arrays, lambda exc, entries: on_done(exc))

    def _add(self, app_id: str | None, received_ms: int, arrays: list[list],
             then: Callable[[BaseException | None, list[Scheduled]], None]) -> None:
        due = [fields[M_DELIVER_AT_MS] for fields in arrays]
        added: list[list[Scheduled]] = []
        token = id(added)
        self._adding[token] = min(due)

        def done(exc: BaseException | None) -> None:
            self._adding.pop(token, None)
            entries = added[0] if added else []
            then(exc, entries)
            if exc is not None:
                return
            now_ms = int(time.time() * 1000)
            for e in entries:
                if bucket_of(e.due_ms) <= self.loaded_through and e.ref not in self._in_ram:
                    self._in_ram.add(e.ref)
                    if not self.passive and (e.due_ms <= now_ms + self.fetch_ahead_ms or not self.store.durable):
                        heapq.heappush(self._ready, e)
                    else:
                        e.fields = None  # read again shortly before it is due: memory stays bounded
                        heapq.heappush(self._waiting, e)
            self._arm()

        added.append(self.store.add(app_id, received_ms, arrays, due, done))

    # -- a replicated topic's schedule (issue 20) ---------------------------------------------------

    def settled_through(self, now_ms: int) -> int:
        """The leader's: every entry due at or before this time was delivered (durably), none is left to publish."""
        floor = now_ms
        for heap in (self._ready, self._waiting):
            if heap:
                floor = min(floor, heap[0].due_ms - 1)
        for pending in (self._adding, self._out):
            if pending:
                floor = min(floor, min(pending.values()) - 1)
        if self._fetching and self._fetch_min is not None:
            floor = min(floor, self._fetch_min - 1)
        if self._loading is not None:
            floor = min(floor, self._loading * BUCKET_MS - 1)
        if self.loaded_through < bucket_of(now_ms):  # (else every bucket not loaded starts after now)
            unloaded = [b for b in self.store.buckets if b > self.loaded_through]
            if unloaded:
                floor = min(floor, min(unloaded) * BUCKET_MS - 1)
        return floor

    def settle_through(self, due_ms: int) -> None:
        """A follower's copy: the leader delivered every entry due at or before `due_ms`."""
        self.settled = max(self.settled, due_ms)

    def activate(self) -> None:
        """Promoted: what the leader did not settle is delivered from here on."""
        if self.passive:
            self.passive = False
            self._settle()
            self._arm()

    def deactivate(self) -> None:
        """Deposed: a follower's copy from now on (its new leader delivers)."""
        self.passive = True
        self.replicas = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _settle(self) -> None:
        """Drop what the leader settled (a passive copy's: delivered there)."""
        gone = []
        for heap in (self._waiting, self._ready):
            while heap and heap[0].due_ms <= self.settled:
                gone.append(heapq.heappop(heap))
        if gone:
            self._finished(gone)

    def _finished(self, entries: list[Scheduled]) -> None:
        self.store.delivered(entries)
        for e in entries:
            self._in_ram.discard(e.ref)
            if self._loading is not None:
                self._delivered_while_loading.add(e.ref)

    # -- the timer ----------------------------------------------------------------------------------

    def tick(self, now: float) -> None:
        """Called every few ms by the topic: load the next bucket when it is near, read bodies when near."""
        now_ms = int(time.time() * 1000)
        self._load_next(now_ms)
        if self.passive:
            self._settle()
        else:
            self._fetch(now_ms)
            if self._ready and self._ready[0].due_ms <= now_ms:
                self._fire()
        self.store.tick(now)

    def _load_next(self, now_ms: int) -> None:
        target = bucket_of(now_ms + self.preload_ms)
        if self._loading is not None or self.loaded_through >= target or len(self._in_ram) >= self.max_loaded:
            return
        later = [b for b in self.store.buckets if self.loaded_through < b <= target]
        if not later:
            self.loaded_through = target
            return
        bucket = min(later)
        self._loading, self.loaded_through = bucket, bucket
        self.store.load(bucket, self._loaded)

    def _loaded(self, entries: list[Scheduled]) -> None:
        skip = self._delivered_while_loading
        for e in entries:
            if e.ref not in self._in_ram and e.ref not in skip:
                self._in_ram.add(e.ref)
                heapq.heappush(self._waiting, e)
        self._loading = None
        self._delivered_while_loading = set()
        self._fetch(int(time.time() * 1000))

    def _fetch(self, now_ms: int) -> None:
        if self._fetching or not self._waiting or self._waiting[0].due_ms > now_ms + self.fetch_ahead_ms:
            return
        batch = []
        horizon = now_ms + self.fetch_ahead_ms
        while self._waiting and self._waiting[0].due_ms <= horizon and len(batch) < 10_000:
            batch.append(heapq.heappop(self._waiting))
        self._fetching, self._fetch_min = True, batch[0].due_ms
        self.store.fetch(batch, self._fetched)

    def _fetched(self, entries: list[Scheduled], exc: BaseException | None) -> None:
        self._fetching, self._fetch_min = False, None
        if exc is not None:
            log.error("topic %s: reading %d scheduled messages failed (retried): %s", self.topic, len(entries), exc)
            for e in entries:
                heapq.heappush(self._waiting, e)
            return
        for e in entries:
            heapq.heappush(self._ready, e)
        self._arm()

    def _arm(self) -> None:
        """A timer for the earliest body-read entry (re-armed when an earlier one comes)."""
        if not self._ready or self.passive:
            return
        due = self._ready[0].due_ms
        if self._timer is not None:
            if self._timer_at <= due:
                return
            self._timer.cancel()
        self._timer_at = due
        self._timer = self.call_later(max(0.0, due / 1000 - time.time()), self._fire)

    def _fire(self) -> None:
        self._timer = None
        if self.passive:
            return
        now_ms = int(time.time() * 1000)
        ready = self._ready
        due: list[Scheduled] = []
        while ready and ready[0].due_ms <= now_ms:
            due.append(heapq.heappop(ready))
        if due:
            self.lateness_ms_max = max(self.lateness_ms_max, now_ms - due[0].due_ms)
            start = 0
            for i in range(1, len(due) + 1):  # one publish per run of one app's messages
                if i == len(due) or due[i].app_id != due[start].app_id:
                    self._publish(due[start:i])
                    start = i
        self._arm()

    def _publish(self, entries: list[Scheduled]) -> None:
        arrays = [e.fields for e in entries]
        token = id(entries)
        self._out[token] = entries[0].due_ms

        def reply(exc: BaseException | None, first_seq: int, count: int) -> None:
            if exc is not None:  # (still counted out until it is back in the heap: settled_through)
                log.error("topic %s: appending %d due messages failed (retried in %.0fs): %s", self.topic,
                          len(entries), self.retry_s, exc)
                self.call_later(self.retry_s, self._retry, entries, token)
                return
            self._out.pop(token, None)
            self.delivered += len(entries)
            self._finished(entries)

        self.publish(entries[0].app_id, arrays, sum(len(a[M_BODY]) for a in arrays), reply)

    def _retry(self, entries: list[Scheduled], token: int) -> None:
        self._out.pop(token, None)
        for e in entries:
            heapq.heappush(self._ready, e)
        self._arm()

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def stats(self) -> dict:
        return {"scheduled": self.store.count, "delivered": self.delivered, "in_memory": len(self._in_ram),
                "passive": self.passive,
                "loaded_through_ms": (self.loaded_through + 1) * BUCKET_MS if self.loaded_through >= 0 else None,
                "lateness_ms_max": self.lateness_ms_max, "store": self.store.stats()}
