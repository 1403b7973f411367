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
"""

from __future__ import annotations

import heapq
import logging
import time
from collections.abc import Callable

from broker_core.protocol import M_BODY, M_BUSINESS_ID, M_DELIVER_AT_MS, M_ID, M_KEY, M_TYPE
from broker_core.storage.schedule import BUCKET_MS, Scheduled, ScheduleStore, bucket_of
from broker_core.tracing.sink import TraceSink

log = logging.getLogger("broker_core.delayed")

# reply(error or None, first seq, count), as a topic's publish answers
PublishReply = Callable[[BaseException | None, int, int], None]
# publish(app_id, arrays, body bytes, reply): the topic's ordinary publish
Publish = Callable[[str | None, list[list], int, PublishReply], None]


class DelayedMessages:
    def __init__(self, topic: str, store: ScheduleStore, publish: Publish, trace: TraceSink,
                 call_later: Callable[..., object], *, preload_ms: int = 5_000, fetch_ahead_ms: int = 1_000,
                 max_loaded: int = 500_000, retry_s: float = 1.0):
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

    @property
    def count(self) -> int:
        return self.store.count

    def schedule(self, app_id: str, client_host: str | None, arrays: list[list], reply: PublishReply) -> None:
        """Store delayed messages; `reply` once durable (first seq 0: they have none until they are due)."""
        received_ms = int(time.time() * 1000)
        due = [fields[M_DELIVER_AT_MS] for fields in arrays]
        added: list[list[Scheduled]] = []

        def done(exc: BaseException | None) -> None:
            if exc is not None:
                reply(exc, 0, 0)
                return
            reply(None, 0, len(arrays))
            entries = added[0]
            for e in entries:
                m = e.fields
                self.trace.emit("scheduled", message_id=m[M_ID], topic=self.topic, message_type=m[M_TYPE],
                                key=m[M_KEY], business_id=m[M_BUSINESS_ID], app_id=app_id, client_host=client_host,
                                detail=f"due_ms={e.due_ms}", ts_us=received_ms * 1000)
            now_ms = int(time.time() * 1000)
            for e in entries:
                if bucket_of(e.due_ms) <= self.loaded_through and e.ref not in self._in_ram:
                    self._in_ram.add(e.ref)
                    if e.due_ms <= now_ms + self.fetch_ahead_ms or not self.store.durable:
                        heapq.heappush(self._ready, e)
                    else:
                        e.fields = None  # read again shortly before it is due: memory stays bounded
                        heapq.heappush(self._waiting, e)
            self._arm()

        added.append(self.store.add(app_id, received_ms, arrays, due, done))

    # -- the timer ----------------------------------------------------------------------------------

    def tick(self, now: float) -> None:
        """Called every few ms by the topic: load the next bucket when it is near, read bodies when near."""
        now_ms = int(time.time() * 1000)
        self._load_next(now_ms)
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
        self._fetching = True
        self.store.fetch(batch, self._fetched)

    def _fetched(self, entries: list[Scheduled], exc: BaseException | None) -> None:
        self._fetching = False
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
        if not self._ready:
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

        def reply(exc: BaseException | None, first_seq: int, count: int) -> None:
            if exc is not None:
                log.error("topic %s: appending %d due messages failed (retried in %.0fs): %s", self.topic,
                          len(entries), self.retry_s, exc)
                self.call_later(self.retry_s, self._retry, entries)
                return
            self.delivered += len(entries)
            self.store.delivered(entries)
            for e in entries:
                self._in_ram.discard(e.ref)
                if self._loading is not None:
                    self._delivered_while_loading.add(e.ref)

        self.publish(entries[0].app_id, arrays, sum(len(a[M_BODY]) for a in arrays), reply)

    def _retry(self, entries: list[Scheduled]) -> None:
        for e in entries:
            heapq.heappush(self._ready, e)
        self._arm()

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def stats(self) -> dict:
        return {"scheduled": self.store.count, "delivered": self.delivered, "in_memory": len(self._in_ram),
                "loaded_through_ms": (self.loaded_through + 1) * BUCKET_MS if self.loaded_through >= 0 else None,
                "lateness_ms_max": self.lateness_ms_max, "store": self.store.stats()}
