"""The "file" storage level: an append-only segmented log per topic, with group commit.

Layout of a topic's folder:

    <base seq, 20 digits>.log   publish batches (KIND_BATCH, KIND_PREPARED, KIND_REDRIVE records),
                                appended in seq order, and the commit/rollback records (KIND_COMMIT,
                                KIND_ROLLBACK) of the prepared messages this segment holds
    <base seq, 20 digits>.ack   which groups finished which messages of that segment (KIND_FINISH)
    deadletter/<group>.dlq      the group's dead letters and re-drive markers (broker_core.storage.file_dead_letters)

Durability. Appends from the event loop only fill buffers; one job at a time runs in the executor
and writes everything buffered, then fsyncs (policy "batch"): every publish that arrived while the
previous job ran shares the next fsync (group commit). Producers are answered from `on_done`, so a
publish is acknowledged only once its record is durable. "interval" answers after the write and
fsyncs every `fsync_interval_s`; "never" leaves it to the OS. Ack records are not waited for (a finish
lost in a crash costs one redelivery, never a message); they are fsynced at most every
`ack_sync_interval_s`. A dead letter is fsynced before the finish record that retires it is written.

A segment is deleted once it is sealed (a newer one is active) and every message in it is finished
for every group it was owed to, and none of its messages is still prepared (a prepared message
counts as one unfinished entry until its commit or rollback); the active segment is sealed once it is
all finished and the store took nothing for `idle_s`. Rolled-back messages stay in the log
(for audit) until the topic's retention has passed since they were stored (`retention_s`, asked of
the broker each time; unknown: kept): a segment holding a younger one waits, `tick` lets it go.
Recovery (`broker_core.storage.file_segments`) reads each segment and its ack file, truncates a torn or corrupt
tail, and returns what is still owed; prepared messages stay prepared.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from concurrent.futures import Executor
from pathlib import Path

from broker_core.protocol import TX_COMMITTED, TX_PREPARED, TX_ROLLED_BACK
from broker_core.storage.file_dead_letters import DeadLetterFiles, FileDeadLetters, write_all
from broker_core.storage.file_reader import INDEX_EVERY, ReadHint, ReadResult, read_owed
from broker_core.storage.file_segments import Segment, SegmentRecovery
from broker_core.storage.fsync import fsync_dir
from broker_core.storage.store import (
    KIND_BATCH,
    KIND_COMMIT,
    KIND_FINISH,
    KIND_PREPARED,
    KIND_ROLLBACK,
    DoneCallback,
    StoredMessage,
    StoreError,
    TxEntry,
    encode_record,
)

log = logging.getLogger("broker_core.file_store")

FSYNC_POLICIES = ("batch", "interval", "never")


class FileStore(FileDeadLetters, SegmentRecovery):
    durable = True

    def __init__(
        self,
        directory: Path,
        *,
        executor: Executor,
        notify: Callable[..., object],
        fsync: str = "batch",
        segment_bytes: int = 64 * 1024 * 1024,
        fsync_interval_s: float = 0.2,
        ack_sync_interval_s: float = 1.0,
        retention_s: Callable[[], float | None] = lambda: 0,
        idle_s: float = 30.0,
        first_seq: int = 1,
    ):
        if fsync not in FSYNC_POLICIES:
            raise ValueError(f"fsync policy must be one of {FSYNC_POLICIES}, not {fsync!r}")
        self.dir = Path(directory)
        self.dlq = DeadLetterFiles(self.dir / "deadletter", fsync=fsync != "never")
        self.executor = executor
        self.notify = notify
        self.fsync = fsync
        self.segment_bytes = segment_bytes
        self.fsync_interval_s = fsync_interval_s
        self.ack_sync_interval_s = ack_sync_interval_s
        self.segments: list[Segment] = []
        self.active: Segment | None = None
        self.first_seq = first_seq  # a partition's seqs start at its own base (storage.partitions)
        self.next_seq = first_seq
        # buffered until the next flush job
        self._log_writes: list[tuple[Segment, bytes]] = []
        self._waiters: list[DoneCallback] = []
        self._finished: dict[tuple[Segment, str], list[int]] = {}
        self._deletes: list[Segment] = []
        self.retention_s = retention_s
        self._held: list[Segment] = []  # deletable but for rolled-back messages within retention
        self._next_hold_check = 0.0
        self.idle_s = idle_s
        self._seq_seen, self._idle_since = 0, time.monotonic()  # when the store last took a message
        self._busy = False
        self._failed: BaseException | None = None
        self._discarded = False  # the topic was deleted: nothing more is written, the files close
        self.last_batch: bytes | None = None  # the record of the last append (TopicStore.last_batch)
        self.tx: dict[str, TxEntry] = {}
        self.prepared: dict[str, TxEntry] = {}
        self._log_redrives: list[tuple[str, int, int, int, str]] = []  # recovery: (group, dead seq, seq, ms, id)
        self._last_data_sync = time.monotonic()
        self._last_ack_sync = time.monotonic()
        self._unsynced = False
        self._force_ack_sync = False  # a caller waits for the finishes to be durable (`sync_finishes`)
        self.held = 0  # messages some group still owes (each segment counts the groups owing each of its messages)
        self.flushes = 0
        self.reads = 0  # reads of groups' backlogs from the log
        self.fsyncs = 0  # fdatasyncs of log segments
        self._other_fsyncs = 0  # fsyncs of ack files and the folder (dead-letter files count their own)

    @property
    def other_fsyncs(self) -> int:
        """fsyncs of ack files, dead-letter files and the folder."""
        return self._other_fsyncs + self.dlq.fsyncs

    readable = True  # groups read their backlog back from the log (`read_owed`)

    def read_owed(self, group: str, start: int, end: int, max_count: int, max_bytes: int, hint: ReadHint | None,
                  on_done: Callable[[ReadResult | None, BaseException | None], object]) -> None:
        """Read in the executor the messages owed to `group` at publish with seq in [start, end) (`file_reader.
        read_owed`); `on_done(result, error)` runs on the loop thread. `end` must not pass what is written."""
        segments = [(seg, seg.base, list(seg.index)) for seg in self.segments if not seg.deleted]

        def job() -> None:
            try:
                result = read_owed(segments, group, start, end, max_count, max_bytes, hint)
            except BaseException as exc:  # reported to the group, which tries again later
                self.notify(on_done, None, exc)
                return
            self.notify(on_done, result, None)

        self.reads += 1
        self.executor.submit(job)

    def _new_segment(self, base: int) -> Segment:
        seg = Segment(self.dir, base)
        self.segments.append(seg)
        self.active = seg
        return seg

    # -- the loop thread's side -------------------------------------------------------------

    def append(self, app_id, received_ms, arrays, groups, on_done):
        place = self._place(on_done)
        if place is None:
            self.last_batch = None
            return []
        seq, seg = place
        messages = [StoredMessage(seq + i, fields, app_id, received_ms, groups[i], seg)
                    for i, fields in enumerate(arrays)]
        seg.owe(seq, map(len, groups))
        self.held += len(groups) - groups.count(())  # messages owed to no group are not held
        self.last_batch = encode_record(KIND_BATCH, [seq, app_id, received_ms, arrays, groups])
        self._queue(seg, self.last_batch, len(arrays), sum(map(len, groups)), on_done)
        return messages

    def append_record(self, count: int, groups: list, record: bytes, on_done) -> None:
        """A replica's append: `record` is the leader's batch record of `count` messages from this store's next
        seq (`groups`: each one's), written as it came; durable (`on_done`) as `append` is."""
        place = self._place(on_done)
        if place is not None:
            seq, seg = place
            seg.owe(seq, map(len, groups))
            self.held += sum(1 for g in groups if g)
            self.last_batch = record
            self._queue(seg, record, count, sum(map(len, groups)), on_done)

    def _roll(self, base: int) -> Segment:
        old = self.active
        old.sealed = True
        if old.unfinished == 0:
            self._release(old)
        return self._new_segment(base)

    def finish(self, message: StoredMessage, group: str) -> None:
        self.finish_many((message,), group)

    def finish_many(self, messages, group: str) -> None:
        finished = self._finished
        held = self.held
        seg = seqs = None
        count = 0
        for m in messages:
            if m.segment is not seg:
                if seg is not None:
                    self._retire(seg, len(seqs) - count)
                seg = m.segment
                seqs = finished.get((seg, group))
                if seqs is None:
                    seqs = finished[(seg, group)] = []
                count = len(seqs)
            seqs.append(m.seq)
            if seg.finish(m.seq):
                held -= 1
        self.held = held
        if seg is not None:
            self._retire(seg, len(seqs) - count)

    def _retire(self, seg: Segment, n: int) -> None:
        seg.unfinished -= n
        if seg.unfinished == 0 and seg.sealed:
            self._release(seg)

    def _release(self, seg: Segment) -> None:
        """A sealed segment nothing is owed from goes, unless it holds rolled-back messages within retention."""
        if seg.rolled_back_ms and not self._past_retention(seg):
            self._held.append(seg)
        else:
            self._deletes.append(seg)

    def _past_retention(self, seg: Segment) -> bool:
        retention_s = self.retention_s()
        return retention_s is not None and seg.rolled_back_ms + retention_s * 1000 <= time.time() * 1000

    def sync_finishes(self, on_done: DoneCallback) -> None:
        if self._wait_for_job(on_done):
            self._force_ack_sync = True
            self._kick()

    def _place(self, on_done: DoneCallback) -> tuple[int, Segment] | None:
        """The next seq and the segment a new record goes to (None: the store failed; `on_done` told)."""
        if self._failed is not None:
            self.notify(on_done, StoreError(f"store failed earlier: {self._failed}"))
            return None
        seq = self.next_seq
        seg = self.active
        if seg.size >= self.segment_bytes:
            seg = self._roll(seq)
        return seq, seg

    def _queue(self, seg: Segment, record: bytes, count: int, unfinished: int, on_done: DoneCallback) -> None:
        """Buffer a record of `count` new messages (`unfinished` entries owed) for the next flush job."""
        if not seg.index or seg.size - seg.index[-1][1] >= INDEX_EVERY:
            seg.index.append((self.next_seq, seg.size))  # where the record of this seq starts
        seg.size += len(record)
        seg.unfinished += unfinished
        self.next_seq += count
        self._log_writes.append((seg, record))
        self._waiters.append(on_done)
        self._kick()

    # -- transaction messages ---------------------------------------------------------------

    def prepare(self, app_id, received_ms, arrays, conn_no, on_done):
        place = self._place(on_done)
        if place is None:
            return []
        seq, seg = place
        messages = [StoredMessage(seq + i, fields, app_id, received_ms, (), seg) for i, fields in enumerate(arrays)]
        for m in messages:
            self.tx[m.id] = self.prepared[m.id] = TxEntry(m, TX_PREPARED, conn_no)
            seg.tx.append(m.id)
        # a prepared message holds its segment (one unfinished entry) until it is resolved
        self._queue(seg, encode_record(KIND_PREPARED, [seq, app_id, received_ms, arrays]), len(arrays),
                    len(arrays), on_done)
        return messages

    def end_tx(self, entry: TxEntry, commit: bool, groups, now_ms: int, reason: str, on_done) -> None:
        m = entry.message
        seg = m.segment
        self.prepared.pop(m.id, None)
        entry.resolved_ms, entry.reason = now_ms, reason
        if commit:
            entry.state = TX_COMMITTED
            m.groups, m.pending = groups, len(groups)
            seg.owe(m.seq, [len(groups)])
            self.held += 1 if groups else 0
            record = encode_record(KIND_COMMIT, [m.seq, m.id, list(groups), now_ms, reason])
            seg.unfinished += len(groups)
        else:
            entry.state = TX_ROLLED_BACK
            seg.rolled_back_ms = max(seg.rolled_back_ms, m.received_ms)
            record = encode_record(KIND_ROLLBACK, [m.seq, m.id, now_ms, reason])
        seg.size += len(record)
        self._log_writes.append((seg, record))
        self._waiters.append(on_done)
        self._retire(seg, 1)  # the prepared hold ends (the segment may go once the record is written)
        self._kick()

    def tick(self, now: float) -> None:
        if self._discarded:
            return
        if now >= self._next_hold_check:
            self._next_hold_check = now + 1.0
            expired = [seg for seg in self._held if self._past_retention(seg)]
            if expired:  # held segments whose retention ended go now
                self._held = [seg for seg in self._held if seg not in expired]
                self._deletes.extend(expired)
            self._roll_when_idle(now)
        if self._busy:
            return
        if self._finished or self.dlq.pending or self._deletes or self._log_writes or self._waiters:
            self._kick()
        elif self.fsync == "interval" and self._unsynced and now - self._last_data_sync >= self.fsync_interval_s:
            self._kick()
        elif (self.fsync != "never" and any(s.ack_dirty for s in self.segments)
              and now - self._last_ack_sync >= self.ack_sync_interval_s):
            self._kick()

    def _roll_when_idle(self, now: float) -> None:
        """An active segment that every group finished and that took nothing for `idle_s` is sealed, so it goes
        too (a topic that receives no more messages leaves nothing on disk once consumed)."""
        if self.next_seq != self._seq_seen:
            self._seq_seen, self._idle_since = self.next_seq, now
        seg = self.active
        if seg.size and not seg.unfinished and not self._log_writes and now - self._idle_since >= self.idle_s:
            self._roll(self.next_seq)

    @property
    def busy(self) -> bool:
        return self._busy

    @property
    def idle(self) -> bool:
        """No flush job runs and nothing waits to be made durable."""
        return not self._busy and not self._waiters

    def _kick(self) -> None:
        if self._busy or self._discarded:
            return
        self._busy = True
        job = self._take_job()
        self.executor.submit(self._run_job, job)

    def _take_job(self):
        now = time.monotonic()
        sync_data = self.fsync == "batch" or (
            self.fsync == "interval" and now - self._last_data_sync >= self.fsync_interval_s)
        sync_acks = self.fsync != "never" and (self._force_ack_sync or
                                               now - self._last_ack_sync >= self.ack_sync_interval_s)
        self._force_ack_sync = False
        if sync_data:
            self._last_data_sync = now
        if sync_acks:
            self._last_ack_sync = now
        job = (self.dlq.take(), self._log_writes, self._waiters, self._finished, self._deletes, sync_data, sync_acks)
        self._log_writes, self._waiters, self._finished, self._deletes = [], [], {}, []
        return job

    def _job_done(self, waiters: list[DoneCallback], deletes: list[Segment], exc: BaseException | None) -> None:
        self._busy = False
        self.dlq.job_done()
        self.flushes += 1
        self._forget(deletes)
        if exc is not None and not self._discarded:
            log.error("%s: store failed: %s", self.dir, exc)
            self._failed = exc
        for done in waiters:
            done(StoreError(str(exc)) if exc is not None else None)
        if self._discarded:
            self._close_files()
        elif self._waiters and self._failed is None:
            self._kick()  # publishes that arrived during the job: the next group commit

    # -- the flush job (executor thread) ----------------------------------------------------

    def _run_job(self, job) -> None:
        (dlq_writes, dlq_drops), log_writes, waiters, finished, deletes, sync_data, sync_acks = job
        exc = None
        try:
            self.dlq.write(dlq_writes, dlq_drops)
            self._write_log(log_writes, sync_data)
            self._write_acks(finished, sync_acks)
            for seg in deletes:
                seg.delete()
        except BaseException as e:  # reported to every waiter of this job
            exc = e
        self.notify(self._job_done, waiters, deletes, exc)

    def _write_log(self, log_writes: list[tuple[Segment, bytes]], sync_data: bool) -> None:
        touched: list[Segment] = []
        created = False
        i = 0
        while i < len(log_writes):
            seg = log_writes[i][0]
            j = i
            while j < len(log_writes) and log_writes[j][0] is seg:
                j += 1
            if seg.log_fd is None:
                seg.log_fd = os.open(seg.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
                created = True
            write_all(seg.log_fd, b"".join(data for _, data in log_writes[i:j]))
            if seg not in touched:
                touched.append(seg)
            i = j
        if log_writes:
            self._unsynced = True
        if sync_data and (touched or self._unsynced):
            for seg in touched or [s for s in self.segments if s.log_fd is not None and not s.deleted]:
                end = os.lseek(seg.log_fd, 0, os.SEEK_END)
                os.fdatasync(seg.log_fd)
                seg.synced = end
                self.fsyncs += 1
            if created:
                fsync_dir(self.dir)  # a new segment file must survive a crash too
                self._other_fsyncs += 1
            self._unsynced = False

    def _write_acks(self, finished: dict[tuple[Segment, str], list[int]], sync_acks: bool) -> None:
        for (seg, group), seqs in finished.items():
            if seg.deleted:
                continue
            if seg.ack_fd is None:
                seg.ack_fd = os.open(seg.ack_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            write_all(seg.ack_fd, encode_record(KIND_FINISH, [group, seqs]))
            seg.ack_dirty = True
        if sync_acks:
            for seg in self.segments:
                if seg.ack_dirty and seg.ack_fd is not None and not seg.deleted:
                    os.fdatasync(seg.ack_fd)
                    self._other_fsyncs += 1
                    seg.ack_dirty = False

    def _forget(self, deletes: list[Segment]) -> None:
        for seg in deletes:
            if seg.deleted and seg in self.segments:
                self.segments.remove(seg)
                for message_id in seg.tx:  # gone (rolled-back ones past retention): state no longer known
                    entry = self.tx.get(message_id)
                    if entry is not None and entry.message.segment is seg:
                        del self.tx[message_id]

    # -- shutdown ---------------------------------------------------------------------------

    def close(self) -> None:
        """Write and fsync everything buffered, then close the files (call when not busy)."""
        if self._busy:
            raise RuntimeError("close() while a flush job runs; wait for `busy` to clear")
        (dlq_writes, dlq_drops), log_writes, waiters, finished, deletes, _, _ = self._take_job()
        error = None
        try:
            self.dlq.write(dlq_writes, dlq_drops)
            self._write_log(log_writes, sync_data=self.fsync != "never")
            self._write_acks(finished, sync_acks=self.fsync != "never")
            for seg in deletes:
                seg.delete()
            self._forget(deletes)
        except OSError as exc:
            error = StoreError(str(exc))
            raise
        finally:
            for done in waiters:
                done(error)
            self._close_files()

    def discard(self) -> None:
        """The topic was deleted on this broker: what is buffered is dropped (its publishes fail), nothing more is
        written, and the files close once no flush job runs. The caller deletes the folder."""
        self._discarded = True
        self._failed = self._failed or StoreError("the topic was deleted on this broker")
        waiters, self._waiters = self._waiters, []
        self._log_writes, self._finished, self._deletes, self._held = [], {}, [], []
        self.dlq.take()
        self.dlq.job_done()
        for done in waiters:
            done(StoreError("the topic was deleted on this broker"))
        if not self._busy:
            self._close_files()

    def _close_files(self) -> None:
        for seg in self.segments:
            for fd in (seg.log_fd, seg.ack_fd):
                if fd is not None:
                    os.close(fd)
            seg.log_fd = seg.ack_fd = None
        self.dlq.close()

    def stats(self) -> dict:
        return {
            "storage": "file",
            "fsync": self.fsync,
            "segments": len(self.segments),
            "bytes": sum(s.size for s in self.segments),
            "next_seq": self.next_seq,
            "prepared": len(self.prepared),
            "flushes": self.flushes,
            "reads": self.reads,
            "finishes_unwritten": sum(map(len, self._finished.values())) + (1 if self._busy else 0),
            "fsyncs": self.fsyncs,
            "failed": str(self._failed) if self._failed else None,
        }
