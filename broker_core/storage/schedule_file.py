"""The "file" level's schedule store (delayed messages): a schedule log with time-bucket index files, QMQ style.

Layout of `<topic folder>/schedule/`:

    <segment no, 10 digits>.slog   KIND_SCHEDULED records, one per message, appended (group commit)
    <bucket key>.idx               index entries of the messages due in that bucket (`storage.schedule`)
    <hour key>.hidx                index entries of the messages due in that hour, while it is over two hours
                                   ahead (split into its buckets' .idx files before it comes: `schedule_index`)
    <bucket key>.done              the entries of that bucket already appended to the topic's log
    indexed                        checkpoint: the log position up to which every index entry is fsynced

Durability. `add` buffers; one job at a time runs in the executor: it appends the records to the active
segment and fdatasyncs it (policy "batch"; "interval" every `fsync_interval_s`; "never": the OS), and only
then are the publishes answered. The same job appends the index entries; index and done files are fsynced
by a job of their own (publishes never wait for it) at most every `index_sync_interval_s`, and then `indexed`
records how far the log is covered. Recovery
re-indexes the log from that position (an entry indexed twice is loaded once: entries are named by their
place in the log), truncates a torn tail, and counts each bucket's undelivered entries. A bucket's files go
once every entry is done and the bucket lies in the past; a segment goes once none of its entries is owed.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor
from pathlib import Path

from broker_core.storage.file_dead_letters import write_all
from broker_core.storage.fsync import fsync_dir
from broker_core.storage.schedule import (
    BUCKET_MS,
    DONE_SIZE,
    INDEX_SIZE,
    KIND_SCHEDULED,
    Scheduled,
    bucket_of,
    pack_done,
    unpack_done,
    unpack_index,
)
from broker_core.storage.schedule_index import SPLIT_AHEAD_MS, HourIndex
from broker_core.storage.schedule_snapshot import read_log
from broker_core.storage.store import RECORD_HEADER, StoreError, encode_record, scan_records

log = logging.getLogger("broker_core.schedule_file")


class FileSchedule:
    durable = True

    def __init__(self, directory: Path, *, executor: Executor, notify: Callable[..., object], fsync: str = "batch",
                 segment_bytes: int = 64 * 1024 * 1024, fsync_interval_s: float = 0.2,
                 index_sync_interval_s: float = 10.0, index_split_ahead_ms: int = SPLIT_AHEAD_MS):
        self.dir = Path(directory)
        self._dir = str(self.dir)
        self.executor = executor
        self.notify = notify
        self.fsync = fsync
        self.segment_bytes = segment_bytes
        self.fsync_interval_s = fsync_interval_s
        self.index_sync_interval_s = index_sync_interval_s
        self.buckets: dict[int, int] = {}
        self.owed: dict[int, int] = {}  # segment -> entries not delivered
        self.active = 1  # segment number
        self.active_size = 0
        self.ends: dict[int, int] = {}  # segment -> its size, for those sealed by this process (schedule_snapshot)
        self._fds: dict[int, int] = {}  # open segment files (append)
        self._writes: list[tuple[int, bytes, list[tuple[int, bytes]]]] = []  # (segment, records, index entries)
        self._waiters: list[Callable] = []
        self._done: dict[int, list[bytes]] = {}  # bucket -> done entries
        self._drop_buckets: list[int] = []
        self._drop_segments: list[int] = []
        self._emptied: set[int] = set()  # buckets whose entries are all delivered, dropped once in the past
        self._syncing = False  # an index sync job runs
        self._lock = threading.Lock()  # the dirty set and the covered position: flush and sync jobs share them
        self._busy = False
        self._failed: BaseException | None = None
        self._discarded = False
        self._last_data_sync = self._last_index_sync = time.monotonic()
        self._dirty_index: set[str] = set()  # index and done files written, not fsynced (under `_lock`)
        self._covered = (1, 0)  # log position whose index entries are all written (under `_lock`)
        self.fsyncs = 0
        self.scheduled_total = 0
        self.hours = HourIndex(self.dir, self._append, index_split_ahead_ms)  # far entries indexed by hour
        self._splitting = False  # a job splits hour files into minute files
        self._last_split_check = 0.0

    @property
    def count(self) -> int:
        return sum(self.buckets.values())

    @property
    def busy(self) -> bool:
        return self._busy or self._syncing or self._splitting

    def _seg_path(self, segment: int) -> Path:
        return self.dir / f"{segment:010d}.slog"

    # -- recovery -------------------------------------------------------------------------------

    def recover(self) -> None:
        if not self.dir.is_dir():  # no delayed message came yet: the folder is made by the first one
            return
        segments = sorted(int(p.stem) for p in self.dir.glob("*.slog") if p.stem.isdigit())
        for pattern, size in (("*.idx", INDEX_SIZE), ("*.hidx", INDEX_SIZE), ("*.done", DONE_SIZE)):
            for path in self.dir.glob(pattern):  # a torn last entry goes before the re-index appends
                _truncate_to(path, size)
        start = self._checkpoint()
        reindexed = 0
        for segment in segments:
            if segment < start[0]:
                continue
            reindexed += self._reindex(segment, start[1] if segment == start[0] else 0)
        done_all: dict[int, set] = {}
        for path in self.dir.glob("*.done"):
            done_all[int(path.stem)] = unpack_done(path.read_bytes())
        indexed: dict[int, set] = {}
        for path in self.dir.glob("*.idx"):
            bucket = int(path.stem)
            indexed[bucket] = {(s, o) for _, s, o, _ in unpack_index(path.read_bytes(), bucket)}
        for bucket, entries in self.hours.recover().items():  # the hour files not split yet
            indexed.setdefault(bucket, set()).update((s, o) for _, s, o, _ in entries)
        for bucket, refs in indexed.items():
            refs -= done_all.get(bucket, set())
            if refs:
                self.buckets[bucket] = len(refs)
                for s, _ in refs:
                    self.owed[s] = self.owed.get(s, 0) + 1
        if segments:
            self.active = segments[-1] + 1  # appends go to a fresh segment
        self._covered = (self.active, 0)
        self._sync_job(notify=False)
        for segment in segments:
            if not self.owed.get(segment):
                self._seg_path(segment).unlink(missing_ok=True)
        if self.buckets:
            log.info("%s: %d scheduled messages in %d buckets (%d re-indexed from the log)", self.dir, self.count,
                     len(self.buckets), reindexed)

    def _checkpoint(self) -> tuple[int, int]:
        try:
            doc = json.loads((self.dir / "indexed").read_text())
            return int(doc["segment"]), int(doc["offset"])
        except (OSError, ValueError, KeyError, TypeError):
            return 0, 0  # no checkpoint: re-index everything

    def _reindex(self, segment: int, offset: int) -> int:
        """Index the records of a segment from `offset` on (truncating a torn tail); returns how many."""
        path = self._seg_path(segment)
        data = path.read_bytes()
        pos = offset
        entries = []
        while True:
            records, length = scan_records(data[pos:pos + RECORD_HEADER.size + _record_length(data, pos)])
            if not records or records[0][0] != KIND_SCHEDULED:
                break
            entries.append((records[0][1][0], segment, pos, length))
            pos += length
        if pos < len(data):
            log.warning("%s: truncating a torn tail at %d (%d bytes)", path, pos, len(data) - pos)
            os.truncate(path, pos)
        self.hours.write(entries, int(time.time() * 1000))
        return len(entries)

    def _append(self, path: str, data: bytes) -> None:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            write_all(fd, data)
        finally:
            os.close(fd)
        with self._lock:
            self._dirty_index.add(path)

    # -- the loop thread's side -------------------------------------------------------------------

    def add(self, app_id, received_ms, arrays, due, on_done):
        if self._failed is not None:
            self.notify(on_done, StoreError(f"schedule store failed earlier: {self._failed}"))
            return []
        entries = []
        records, index = [], []
        segment, pos = self.active, self.active_size
        for fields, due_ms in zip(arrays, due, strict=True):
            record = encode_record(KIND_SCHEDULED, [due_ms, app_id, received_ms, fields])
            bucket = bucket_of(due_ms)
            entries.append(Scheduled(due_ms, (segment, pos), len(record), fields, app_id, received_ms))
            index.append((due_ms, segment, pos, len(record)))
            records.append(record)
            pos += len(record)
            self.buckets[bucket] = self.buckets.get(bucket, 0) + 1
        self.owed[segment] = self.owed.get(segment, 0) + len(entries)
        self.active_size = pos
        self.scheduled_total += len(entries)
        self._writes.append((segment, b"".join(records), index))
        self._waiters.append(on_done)
        if pos >= self.segment_bytes:
            self.ends[segment] = pos
            self.active, self.active_size = segment + 1, 0
        self._kick()
        return entries

    def snapshot_point(self) -> tuple[int, int]:
        """Where the schedule log ends now (for `read_pending`)."""
        return self.active, self.active_size

    def read_pending(self, cursor, point, max_bytes: int, on_read) -> None:
        """The log's entries from `cursor` (None: its start) up to `point`, about `max_bytes` of them:
        `on_read(entries, next cursor or None at the point, exc)` on the loop (`schedule_snapshot.read_log`)."""
        def job() -> None:
            try:
                entries, nxt = read_log(self.dir, cursor or (1, 0), point, max_bytes, dict(self.ends))
            except OSError as exc:
                self.notify(on_read, [], cursor, exc)
                return
            self.notify(on_read, entries, nxt, None)
        self.executor.submit(job)

    def load(self, bucket: int, on_loaded) -> None:
        self.executor.submit(self._load_job, bucket, on_loaded)

    def _load_job(self, bucket: int, on_loaded) -> None:
        try:
            self.hours.ensure_split(bucket)  # its hour's entries into the minute files first
        except OSError as exc:  # what stayed in the hour file is loaded by a later split or after a restart
            log.error("%s: splitting the hour index of bucket %d failed: %s", self.dir, bucket, exc)
        try:
            index = (self.dir / f"{bucket}.idx").read_bytes()
            done_path = self.dir / f"{bucket}.done"
            done = unpack_done(done_path.read_bytes()) if done_path.exists() else set()
        except FileNotFoundError:
            index, done = b"", set()
        seen: set = set()
        entries = []
        for due_ms, segment, offset, length in unpack_index(index, bucket):
            ref = (segment, offset)
            if ref not in done and ref not in seen:
                seen.add(ref)
                entries.append(Scheduled(due_ms, ref, length))
        self.notify(on_loaded, entries)

    def fetch(self, entries, on_fetched) -> None:
        self.executor.submit(self._fetch_job, entries, on_fetched)

    def _fetch_job(self, entries: list[Scheduled], on_fetched) -> None:
        fds: dict[int, int] = {}
        exc = None
        try:
            for e in entries:
                segment, offset = e.ref
                fd = fds.get(segment)
                if fd is None:
                    fd = fds[segment] = os.open(self._seg_path(segment), os.O_RDONLY)
                records, _ = scan_records(os.pread(fd, e.length, offset))
                if not records or records[0][0] != KIND_SCHEDULED:
                    raise StoreError(f"schedule log {segment} has no record at {offset}")
                _, e.app_id, e.received_ms, e.fields = records[0][1]
        except (OSError, StoreError) as error:
            exc = error
        finally:
            for fd in fds.values():
                os.close(fd)
        self.notify(on_fetched, entries, exc)

    def delivered(self, entries: list[Scheduled]) -> None:
        now_bucket = bucket_of(int(time.time() * 1000))
        for e in entries:
            segment, offset = e.ref
            bucket = bucket_of(e.due_ms)
            self._done.setdefault(bucket, []).append(pack_done(segment, offset))
            left = self.buckets.get(bucket, 0) - 1
            if left > 0:
                self.buckets[bucket] = left
            else:
                self.buckets.pop(bucket, None)
                if bucket < now_bucket - 1:
                    self._drop_buckets.append(bucket)
                else:
                    self._emptied.add(bucket)
            owed = self.owed.get(segment, 0) - 1
            if owed > 0:
                self.owed[segment] = owed
            else:
                self.owed.pop(segment, None)
                if segment != self.active:
                    self._drop_segments.append(segment)
        self._kick()

    def tick(self, now: float) -> None:
        if self._discarded or self._busy:
            return
        now_bucket = bucket_of(int(time.time() * 1000))
        past = [b for b in self._emptied if b < now_bucket - 1]
        for bucket in past:  # emptied buckets now far enough in the past that nothing new can come due there
            self._emptied.discard(bucket)
            if bucket not in self.buckets:
                self._drop_buckets.append(bucket)
        if not self.owed.get(self.active) and self.active_size and not self._writes:
            self._drop_segments.append(self.active)  # all delivered: sealed, so it goes
            self.ends[self.active] = self.active_size
            self.active, self.active_size = self.active + 1, 0
        if self._writes or self._done or self._drop_buckets or self._drop_segments:
            self._kick()
        if not self._splitting and now - self._last_split_check >= 1.0:
            self._last_split_check = now
            hours = self.hours.due(int(time.time() * 1000))
            if hours:
                self._splitting = True
                self.executor.submit(self._split_job, hours)
        if (not self._syncing and self.fsync != "never" and self._dirty_index
                and now - self._last_index_sync >= self.index_sync_interval_s):
            self._syncing, self._last_index_sync = True, now
            self.executor.submit(self._sync_job)

    def _kick(self) -> None:
        if self._busy or self._discarded:
            return
        self._busy = True
        now = time.monotonic()
        sync_data = self.fsync == "batch" or (self.fsync == "interval"
                                              and now - self._last_data_sync >= self.fsync_interval_s)
        if sync_data:
            self._last_data_sync = now
        job = (self._writes, self._waiters, self._done, self._drop_buckets, self._drop_segments, sync_data)
        self._writes, self._waiters, self._done, self._drop_buckets, self._drop_segments = [], [], {}, [], []
        self.executor.submit(self._run_job, job)

    def _job_done(self, waiters, exc: BaseException | None) -> None:
        self._busy = False
        if exc is not None and not self._discarded:
            log.error("%s: schedule store failed: %s", self.dir, exc)
            self._failed = exc
        for done in waiters:
            done(StoreError(str(exc)) if exc is not None else None)
        if self._discarded:
            self._close_files()
        elif (self._waiters or self._done) and self._failed is None:
            self._kick()

    # -- the job (executor thread) ------------------------------------------------------------------

    def _run_job(self, job) -> None:
        writes, waiters, done, drop_buckets, drop_segments, sync_data = job
        exc = None
        try:
            self._write_log(writes, sync_data)
            if writes:
                self.hours.write([e for _, _, index in writes for e in index], int(time.time() * 1000))
            if writes:
                end = os.lseek(self._fds[writes[-1][0]], 0, os.SEEK_END)
                with self._lock:
                    self._covered = (writes[-1][0], end)
            for bucket, packed in done.items():
                self._append(f"{self._dir}/{bucket}.done", b"".join(packed))
            for bucket in drop_buckets:
                for suffix in (".idx", ".done"):
                    path = self.dir / f"{bucket}{suffix}"
                    path.unlink(missing_ok=True)
            for segment in drop_segments:
                fd = self._fds.pop(segment, None)
                if fd is not None:
                    os.close(fd)
                self._seg_path(segment).unlink(missing_ok=True)
        except BaseException as e:  # reported to every waiter of this job
            exc = e
        self.notify(self._job_done, waiters, exc)

    def _write_log(self, writes, sync_data: bool) -> None:
        created = False
        touched = []
        for segment, data, _ in writes:
            fd = self._fds.get(segment)
            if fd is None:
                if not self.dir.is_dir():
                    self.dir.mkdir()  # not parents: a deleted topic's folder is never made again
                    fsync_dir(self.dir.parent)
                fd = self._fds[segment] = os.open(self._seg_path(segment), os.O_WRONLY | os.O_CREAT | os.O_APPEND,
                                                  0o644)
                created = True
            write_all(fd, data)
            if segment not in touched:
                touched.append(segment)
        if sync_data and self._fds:
            for segment in touched or list(self._fds):
                os.fdatasync(self._fds[segment])
                self.fsyncs += 1
            if created:
                fsync_dir(self.dir)
        if len(self._fds) > 1 and (sync_data or self.fsync == "never"):  # older segments are sealed and synced
            newest = max(self._fds)
            for old in [s for s in self._fds if s < newest]:
                os.close(self._fds.pop(old))

    def _sync_job(self, notify: bool = True) -> None:
        """fsync the index and done files written since the last time, then record how far the log is indexed
        (executor thread; at recovery and close, the caller's)."""
        with self._lock:
            paths, self._dirty_index = self._dirty_index, set()
            covered = self._covered
        try:
            if self.fsync != "never":
                for path in paths:
                    try:
                        fd = os.open(path, os.O_RDONLY)
                    except FileNotFoundError:  # its bucket was dropped meanwhile
                        continue
                    try:
                        os.fsync(fd)
                    finally:
                        os.close(fd)
                tmp = self.dir / "indexed.tmp"
                tmp.write_text(json.dumps({"segment": covered[0], "offset": covered[1]}))
                fd = os.open(tmp, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
                os.replace(tmp, self.dir / "indexed")
                fsync_dir(self.dir)
        except OSError as exc:  # tried again later; recovery re-indexes from the last checkpoint meanwhile
            log.error("%s: syncing the schedule index failed: %s", self.dir, exc)
            with self._lock:
                self._dirty_index |= paths
        if notify:
            self.notify(self._synced)

    def _synced(self) -> None:
        self._syncing = False

    def _split_job(self, hours: list[int]) -> None:
        """Split the hour files whose hour comes within two hours into minute files (executor thread)."""
        try:
            for hour in hours:
                self.hours.split(hour)
        except OSError as exc:  # tried again at a later tick (or when a minute of it is loaded)
            log.error("%s: splitting an hour index file failed: %s", self.dir, exc)
        self.notify(self._split_done)

    def _split_done(self) -> None:
        self._splitting = False

    # -- shutdown ---------------------------------------------------------------------------------

    def close(self) -> None:
        """Write and fsync what is buffered, then close (call when not busy)."""
        if self._busy:
            raise RuntimeError("close() while a job runs; wait for `busy` to clear")
        self._busy = True
        job = (self._writes, self._waiters, self._done, [], [], self.fsync != "never")
        self._writes, self._waiters, self._done = [], [], {}
        self.notify = lambda fn, *args: fn(*args)
        self._run_job(job)
        if self.dir.is_dir():
            self._sync_job(notify=False)
        self._close_files()

    def discard(self) -> None:
        self._discarded = True
        waiters, self._waiters, self._writes = self._waiters, [], []
        for done in waiters:
            done(StoreError("the topic was deleted on this broker"))
        if not self._busy:
            self._close_files()

    def _close_files(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()

    def stats(self) -> dict:
        return {"storage": "file", "scheduled": self.count, "buckets": len(self.buckets),
                "scheduled_total": self.scheduled_total, "segments": len(self.owed), "fsyncs": self.fsyncs,
                "hour_files": len(self.hours.pending), "hour_splits": self.hours.splits,
                "failed": str(self._failed) if self._failed else None}


def _record_length(data: bytes, pos: int) -> int:
    if pos + RECORD_HEADER.size > len(data):
        return 0
    return RECORD_HEADER.unpack_from(data, pos)[0]


def _truncate_to(path: Path, entry_size: int) -> None:
    """Cut a torn entry off the end of a fixed-size entry file, so later appends stay aligned."""
    size = path.stat().st_size
    if size % entry_size:
        os.truncate(path, size - size % entry_size)


__all__ = ["FileSchedule", "BUCKET_MS"]
