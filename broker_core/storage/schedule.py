"""What a topic's schedule store must do (delayed messages, issue 21), the scheduled entry, time buckets and the
fixed-size index entries of the file level.

A delayed message is kept by its topic's schedule store until it is due; then the broker appends it to the
topic's log as an ordinary message (`broker_core.delivery.delayed`) and, once that append is durable, tells the
schedule store it is `delivered` (a crash in between costs a duplicate, never a loss).

Time is cut into buckets of `BUCKET_MS` (one minute): a bucket's key is `due_ms // BUCKET_MS`. The store counts
the undelivered entries of every bucket in memory (a few bytes per bucket, whatever their size) and hands out
a bucket's entries when asked (`load`), without their bodies; bodies are read shortly before they are due
(`fetch`). So only the buckets near now are in memory, however many messages are scheduled.

File level records (`broker_core.storage.schedule_file`):

    KIND_SCHEDULED [due_ms, app_id, received_ms, message array]   the schedule log, one record per message
    index entry    due_ms i64 | segment u32 | offset u64 | length u32 | crc32 u32     (a bucket's .idx file)
    done entry     segment u32 | offset u64 | crc32 u32                             (a bucket's .done file)
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable
from typing import Protocol

BUCKET_MS = 60_000
SCHEDULE_FOLDER = "schedule"  # a topic's schedule store lives in <topic folder>/schedule/, beside its partitions
KIND_SCHEDULED = 48

INDEX_ENTRY = struct.Struct(">iIQI")  # (due_ms - bucket start) i32, segment, offset, length; then the crc
INDEX_SIZE = INDEX_ENTRY.size + 4
DONE_ENTRY = struct.Struct(">IQ")
DONE_SIZE = DONE_ENTRY.size + 4
_CRC = struct.Struct(">I")


def bucket_of(due_ms: int) -> int:
    return due_ms // BUCKET_MS


class Scheduled:
    """One scheduled message. `ref` names it in its store (unique); `fields` (the message array), `app_id` and
    `received_ms` are None until fetched (the memory level has them at once)."""

    __slots__ = ("due_ms", "ref", "length", "fields", "app_id", "received_ms")

    def __init__(self, due_ms: int, ref, length: int = 0, fields: list | None = None, app_id: str | None = None,
                 received_ms: int = 0):
        self.due_ms = due_ms
        self.ref = ref  # file level: (segment, offset); memory level: a counter
        self.length = length
        self.fields = fields
        self.app_id = app_id
        self.received_ms = received_ms

    def __lt__(self, other: Scheduled) -> bool:  # heap order: due time, then where it was stored
        return (self.due_ms, self.ref) < (other.due_ms, other.ref)


DoneCallback = Callable[[BaseException | None], None]


class ScheduleStore(Protocol):
    """The delayed messages of one topic on this broker."""

    durable: bool
    buckets: dict[int, int]  # bucket key -> entries not delivered yet

    def recover(self) -> None:
        """Read back what is scheduled (the file level rebuilds its indexes from the log where they lag)."""
        ...

    def add(self, app_id: str | None, received_ms: int, arrays: list[list], due: list[int],
            on_done: DoneCallback) -> list[Scheduled]:
        """Schedule these message arrays, each due at `due[i]` (Unix ms); `on_done` once durable under the fsync
        policy. Returns the entries at once (with their fields)."""
        ...

    def load(self, bucket: int, on_loaded: Callable[[list[Scheduled]], None]) -> None:
        """The bucket's undelivered entries, without their fields (read off the loop's thread)."""
        ...

    def fetch(self, entries: list[Scheduled], on_fetched: Callable[[list[Scheduled], BaseException | None], None]) -> None:
        """Fill in the entries' fields, app id and received time (read off the loop's thread)."""
        ...

    def delivered(self, entries: list[Scheduled]) -> None:
        """These entries were appended to the topic's log, durably: they leave the schedule."""
        ...

    def snapshot_point(self) -> object:
        """Where the store's entries end now (entries added later come after it)."""
        ...

    def read_pending(self, cursor, point, max_bytes: int,
                     on_read: Callable[[list[list], object, BaseException | None], None]) -> None:
        """The entries added before `point` from `cursor` on (None: the first), about `max_bytes` of them, as
        [due_ms, app_id, received_ms, message array] (delivered ones too, while their files stay):
        `on_read(entries, next cursor or None once the point is reached, exc)`, off the loop's thread."""
        ...

    @property
    def count(self) -> int:
        """Entries scheduled and not delivered yet."""
        ...

    @property
    def busy(self) -> bool:
        ...

    def tick(self, now: float) -> None: ...

    def discard(self) -> None: ...

    def close(self) -> None: ...

    def stats(self) -> dict: ...


def pack_index(due_ms: int, bucket: int, segment: int, offset: int, length: int) -> bytes:
    body = INDEX_ENTRY.pack(due_ms - bucket * BUCKET_MS, segment, offset, length)
    return body + _CRC.pack(zlib.crc32(body))


def unpack_index(data: bytes, bucket: int) -> list[tuple[int, int, int, int]]:
    """Intact entries of an index file as (due_ms, segment, offset, length); torn or corrupt ones are skipped."""
    out = []
    base = bucket * BUCKET_MS
    unpack, crc_of = INDEX_ENTRY.unpack_from, _CRC.unpack_from
    size = INDEX_ENTRY.size
    for pos in range(0, len(data) - INDEX_SIZE + 1, INDEX_SIZE):
        if zlib.crc32(data[pos:pos + size]) == crc_of(data, pos + size)[0]:
            delta, segment, offset, length = unpack(data, pos)
            out.append((base + delta, segment, offset, length))
    return out


def pack_done(segment: int, offset: int) -> bytes:
    body = DONE_ENTRY.pack(segment, offset)
    return body + _CRC.pack(zlib.crc32(body))


def unpack_done(data: bytes) -> set[tuple[int, int]]:
    out = set()
    size = DONE_ENTRY.size
    for pos in range(0, len(data) - DONE_SIZE + 1, DONE_SIZE):
        if zlib.crc32(data[pos:pos + size]) == _CRC.unpack_from(data, pos + size)[0]:
            out.add(DONE_ENTRY.unpack_from(data, pos))
    return out
