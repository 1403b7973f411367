"""The "memory" level's schedule store: delayed messages in RAM, by time bucket (nothing survives a restart, as
for the memory level's messages)."""

from __future__ import annotations

from collections.abc import Callable

from broker_core.storage.schedule import Scheduled, bucket_of


class MemorySchedule:
    durable = False

    def __init__(self, notify: Callable[..., object]):
        self.notify = notify
        self.entries: dict[int, dict[int, Scheduled]] = {}  # bucket -> ref -> entry
        self.buckets: dict[int, int] = {}
        self._next_ref = 0
        self.scheduled_total = 0

    @property
    def count(self) -> int:
        return sum(self.buckets.values())

    @property
    def busy(self) -> bool:
        return False

    def recover(self) -> None:
        return None

    def add(self, app_id, received_ms, arrays, due, on_done):
        out = []
        for fields, due_ms in zip(arrays, due, strict=True):
            self._next_ref += 1
            entry = Scheduled(due_ms, self._next_ref, 0, fields, app_id, received_ms)
            bucket = bucket_of(due_ms)
            self.entries.setdefault(bucket, {})[entry.ref] = entry
            self.buckets[bucket] = self.buckets.get(bucket, 0) + 1
            out.append(entry)
        self.scheduled_total += len(out)
        self.notify(on_done, None)
        return out

    def snapshot_point(self) -> int:
        return self._next_ref + 1

    def read_pending(self, cursor, point, max_bytes: int, on_read) -> None:
        """Every entry added before `point`, at once (they are in memory anyway)."""
        held = sorted((e for bucket in self.entries.values() for e in bucket.values() if e.ref < point),
                      key=lambda e: e.ref)
        self.notify(on_read, [[e.due_ms, e.app_id, e.received_ms, e.fields] for e in held], None, None)

    def load(self, bucket: int, on_loaded) -> None:
        self.notify(on_loaded, list(self.entries.get(bucket, {}).values()))

    def fetch(self, entries, on_fetched) -> None:
        self.notify(on_fetched, entries, None)

    def delivered(self, entries: list[Scheduled]) -> None:
        for e in entries:
            bucket = bucket_of(e.due_ms)
            held = self.entries.get(bucket)
            if held is None or held.pop(e.ref, None) is None:
                continue
            if held:
                self.buckets[bucket] -= 1
            else:
                del self.entries[bucket], self.buckets[bucket]

    def tick(self, now: float) -> None:
        return None

    def discard(self) -> None:
        self.entries.clear()
        self.buckets.clear()

    def close(self) -> None:
        return None

    def stats(self) -> dict:
        return {"storage": "memory", "scheduled": self.count, "buckets": len(self.buckets),
                "scheduled_total": self.scheduled_total}
