"""The "file" storage level: an append-only segmented log per topic, with group commit.

Layout of a topic's folder:

    <base seq, 20 digits>.log   publish batches (KIND_BATCH, KIND_PREPARED, KIND_REDRIVE records),
                                appended in seq order, and the commit/rollback records (KIND_COMMIT,
                                KIND_ROLLBACK) of the prepared messages this segment holds
    <base seq, 20 digits>.ack   which groups finished which messages of that segment (KIND_FINISH)
    deadletter/<group>.dlq      the group's dead letters (KIND_DEAD records, full message copies) and
                                which of them were re-driven (KIND_REDRIVEN)

Durability. Appends from the event loop only fill buffers; one job at a time runs in the executor
and writes everything buffered, then fsyncs (policy "batch"): every publish that arrived while the
previous job ran shares the next fsync (group commit). Producers are answered from `on_done`, so a
publish is acknowledged only once its record is durable. "interval" answers after the write and
fsyncs every `fsync_interval_s`; "never" leaves it to the OS.

Ack records are not waited for: a finish lost in a crash costs one redelivery, never a message.
They are fsynced at most every `ack_sync_interval_s`. A dead letter is fsynced before the finish
record that retires it is written, so a crash cannot lose it.

A segment is deleted once it is sealed (a newer one is active) and every message in it is finished
for every group it was owed to, and none of its messages is still prepared (a prepared message
counts as one unfinished entry until its commit or rollback). Rolled-back messages stay in the log
(for audit) until the topic's retention has passed since they were stored (`retention_s`, asked of
the broker each time; unknown: kept): a segment holding a younger one waits, `tick` lets it go.
Recovery reads each segment and its ack file, truncates a torn or corrupt tail, and returns what is
still owed; prepared messages stay prepared.

A re-drive writes the fresh copies as one KIND_REDRIVE log record (so a crash cannot lose it) and,
once that is durable, a KIND_REDRIVEN marker per dead letter to the group's .dlq file (so the dead
letter is not listed again, even after the segment is deleted). Recovery writes the markers of a
re-drive whose log record survived but whose markers did not: a re-drive is never repeated.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from concurrent.futures import Executor
from pathlib import Path
from urllib.parse import quote

from broker_core.protocol import M_BODY, M_ID, TX_COMMITTED, TX_PREPARED, TX_ROLLED_BACK
from broker_core.store import (
    KIND_BATCH,
    KIND_COMMIT,
    KIND_DEAD,
    KIND_FINISH,
    KIND_PREPARED,
    KIND_REDRIVE,
    KIND_REDRIVEN,
    KIND_ROLLBACK,
    DeadLetter,
    DeadLetterIndex,
    DoneCallback,
    StoredMessage,
    StoreError,
    TxEntry,
    encode_record,
    scan_records,
)

log = logging.getLogger("broker_core.file_store")

FSYNC_POLICIES = ("batch", "interval", "never")


class Segment:
    __slots__ = ("base", "log_path", "ack_path", "size", "unfinished", "sealed", "deleted", "log_fd", "ack_fd",
                 "ack_dirty", "tx", "synced", "rolled_back_ms")

    def __init__(self, directory: Path, base: int):
        self.base = base
        self.log_path = directory / f"{base:020d}.log"
        self.ack_path = directory / f"{base:020d}.ack"
        self.size = 0  # bytes appended or buffered (loop thread's view)
        self.unfinished = 0  # (message, group) pairs still owed
        self.sealed = False
        self.deleted = False
        self.log_fd: int | None = None  # used by the flush job only
        self.ack_fd: int | None = None
        self.ack_dirty = False
        self.tx: list[str] = []  # ids of the transaction messages stored here
        self.synced = 0  # log bytes an fdatasync of this store has covered (flush job's view; observability)
        self.rolled_back_ms = 0  # received time of its newest rolled-back message: kept until retention

    def __repr__(self) -> str:
        return f"<Segment {self.base} size={self.size} unfinished={self.unfinished} sealed={self.sealed}>"


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def safe_name(name: str) -> str:
    """A topic or group name as a file name (names are slugs; quote anything else)."""
    return quote(name, safe="-_.") or "_"


class FileStore:
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
    ):
        if fsync not in FSYNC_POLICIES:
            raise ValueError(f"fsync policy must be one of {FSYNC_POLICIES}, not {fsync!r}")
        self.dir = Path(directory)
        self.dlq_dir = self.dir / "deadletter"
        self.executor = executor
        self.notify = notify
        self.fsync = fsync
        self.segment_bytes = segment_bytes
        self.fsync_interval_s = fsync_interval_s
        self.ack_sync_interval_s = ack_sync_interval_s
        self.segments: list[Segment] = []
        self.active: Segment | None = None
        self.next_seq = 1
        # buffered until the next flush job
        self._log_writes: list[tuple[Segment, bytes]] = []
        self._waiters: list[DoneCallback] = []
        self._finished: dict[tuple[Segment, str], list[int]] = {}
        self._dlq_writes: dict[str, list[bytes]] = {}
        self._deletes: list[Segment] = []
        self.retention_s = retention_s
        self._held: list[Segment] = []  # deletable but for rolled-back messages within retention
        self._next_hold_check = 0.0
        self._busy = False
        self._failed: BaseException | None = None
        self._dlq_in_job: dict[str, list[bytes]] = {}  # dead-letter records the running job writes
        self.dead_index = DeadLetterIndex()
        self._dlq_fds: dict[str, int] = {}
        self.tx: dict[str, TxEntry] = {}
        self.prepared: dict[str, TxEntry] = {}
        self._log_redrives: list[tuple[str, int, int, int, str]] = []  # recovery: (group, dead seq, seq, ms, id)
        self._last_data_sync = time.monotonic()
        self._last_ack_sync = time.monotonic()
        self._unsynced = False
        self.flushes = 0
        self.fsyncs = 0  # fdatasyncs of log segments
        self.other_fsyncs = 0  # fsyncs of ack files, dead-letter files and the folder

    # -- recovery ---------------------------------------------------------------------------

    def recover(self) -> list[tuple[StoredMessage, tuple[str, ...]]]:
        self.dir.mkdir(parents=True, exist_ok=True)
        bases = sorted(int(p.stem) for p in self.dir.glob("*.log") if p.stem.isdigit())
        for ack in self.dir.glob("*.ack"):
            if not ack.stem.isdigit() or int(ack.stem) not in bases:
                ack.unlink()  # its segment was deleted and the crash came before the ack file went
        owed: list[tuple[StoredMessage, tuple[str, ...]]] = []
        last_seq = 0
        for base in bases:
            seg = Segment(self.dir, base)
            messages = self._read_segment(seg)
            finished = self._read_acks(seg)
            for m in messages:
                done = finished.get(m.seq)
                pending = tuple(g for g in m.groups if not done or g not in done)
                m.pending = len(pending)
                seg.unfinished += len(pending)
                if pending:
                    owed.append((m, pending))
                last_seq = m.seq
            for message_id in seg.tx:  # a prepared message holds its segment
                entry = self.tx.get(message_id)
                if entry is not None and entry.message.segment is seg and entry.state == TX_PREPARED:
                    seg.unfinished += 1
            self.segments.append(seg)
        self.next_seq = max(last_seq + 1, bases[-1] if bases else 1)
        for seg in self.segments[:-1]:
            seg.sealed = True
            if seg.unfinished == 0:
                self._release(seg)
        if self.segments:
            self.active = self.segments[-1]
        else:
            self._new_segment(self.next_seq)
        self._recover_dead_letters()
        return owed

    def _read_segment(self, seg: Segment) -> list[StoredMessage]:
        data = seg.log_path.read_bytes()
        messages: list[StoredMessage] = []
        records, end = scan_records(data)
        for kind, payload in records:
            if kind == KIND_BATCH:
                first_seq, app_id, received_ms, arrays, groups = payload[:5]
                for i, fields in enumerate(arrays):
                    m = StoredMessage(first_seq + i, fields, app_id, received_ms, tuple(groups[i]))
                    m.segment = seg
                    messages.append(m)
            elif kind == KIND_PREPARED:
                first_seq, app_id, received_ms, arrays = payload[:4]
                for i, fields in enumerate(arrays):
                    m = StoredMessage(first_seq + i, fields, app_id, received_ms, (), seg)
                    messages.append(m)
                    self.tx[m.id] = self.prepared[m.id] = TxEntry(m)
                    seg.tx.append(m.id)
            elif kind in (KIND_COMMIT, KIND_ROLLBACK):
                self._recover_end_tx(kind, payload)
            elif kind == KIND_REDRIVE:
                first_seq, received_ms, group, entries = payload[:4]
                for i, (dead_seq, app_id, fields) in enumerate(entries):
                    m = StoredMessage(first_seq + i, fields, app_id, received_ms, (group,), seg)
                    messages.append(m)
                    self._log_redrives.append((group, dead_seq, m.seq, received_ms, m.id))
        if end < len(data):
            log.warning("%s: truncating a torn or corrupt tail of %d bytes", seg.log_path, len(data) - end)
            os.truncate(seg.log_path, end)
        seg.size = end
        return messages

    def _recover_end_tx(self, kind: int, payload: list) -> None:
        seq, message_id = payload[0], payload[1]
        entry = self.tx.get(message_id)
        if entry is None or entry.message.seq != seq:
            log.warning("%s: a %s record for message %s (seq %s) that this log does not hold as prepared",
                        self.dir, "commit" if kind == KIND_COMMIT else "rollback", message_id, seq)
            return
        self.prepared.pop(message_id, None)
        if kind == KIND_COMMIT:
            entry.message.groups = tuple(payload[2])
            entry.state, entry.resolved_ms, entry.reason = TX_COMMITTED, payload[3], payload[4]
        else:
            entry.state, entry.resolved_ms, entry.reason = TX_ROLLED_BACK, payload[2], payload[3]
            seg = entry.message.segment
            seg.rolled_back_ms = max(seg.rolled_back_ms, entry.message.received_ms)

    def _read_acks(self, seg: Segment) -> dict[int, set[str]]:
        finished: dict[int, set[str]] = {}
        if not seg.ack_path.exists():
            return finished
        data = seg.ack_path.read_bytes()
        records, end = scan_records(data)
        for kind, payload in records:
            if kind == KIND_FINISH:
                group, seqs = payload[0], payload[1]
                for seq in seqs:
                    finished.setdefault(seq, set()).add(group)
        if end < len(data):
            os.truncate(seg.ack_path, end)
        return finished

    def _recover_dead_letters(self) -> None:
        index = self.dead_index
        if self.dlq_dir.is_dir():
            for path in self.dlq_dir.glob("*.dlq"):
                data = path.read_bytes()
                records, end = scan_records(data)
                seq_ids: dict[int, str] = {}
                group = None
                for kind, payload in records:
                    if kind == KIND_DEAD:
                        dead = _without_body(DeadLetter.from_payload(payload))
                        group = dead.group
                        seq_ids[dead.seq] = dead.fields[M_ID]
                        index.add(dead)
                    elif kind == KIND_REDRIVEN and group is not None:
                        index.mark_redriven(group, payload[0], seq_ids.get(payload[0], ""))
                if end < len(data):
                    os.truncate(path, end)
        # re-drives whose log record is durable and whose markers were lost in a crash
        for group, dead_seq, seq, ms, message_id in self._log_redrives:
            if dead_seq not in index.redriven.get(group, {}):
                index.mark_redriven(group, dead_seq, message_id)
                self._dlq_writes.setdefault(group, []).append(encode_record(KIND_REDRIVEN, [dead_seq, seq, ms]))
        self._log_redrives.clear()

    def _new_segment(self, base: int) -> Segment:
        seg = Segment(self.dir, base)
        self.segments.append(seg)
        self.active = seg
        return seg

    # -- the loop thread's side -------------------------------------------------------------

    def append(self, app_id, received_ms, arrays, groups, on_done):
        if self._failed is not None:
            self.notify(on_done, StoreError(f"store failed earlier: {self._failed}"))
            return []
        seq = self.next_seq
        seg = self.active
        if seg.size >= self.segment_bytes:
            seg = self._roll(seq)
        messages = [StoredMessage(seq + i, fields, app_id, received_ms, groups[i], seg)
                    for i, fields in enumerate(arrays)]
        record = encode_record(KIND_BATCH, [seq, app_id, received_ms, arrays, groups])
        seg.size += len(record)
        seg.unfinished += sum(map(len, groups))
        self.next_seq = seq + len(arrays)
        self._log_writes.append((seg, record))
        self._waiters.append(on_done)
        self._kick()
        return messages

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

    def dead_letter(self, message: StoredMessage, group: str, cause: str, attempts: int, now_ms: int,
                    finish: bool = True) -> None:
        dead = DeadLetter(message.seq, group, cause, attempts, now_ms, message.app_id, message.received_ms,
                          message.fields)
        self._dlq_writes.setdefault(group, []).append(dead.to_record())
        self.dead_index.add(_without_body(dead))
        if finish:
            self.finish(message, group)

    def _read_dead_letters(self, group: str, wanted=None, limit: int | None = None) -> list[DeadLetter]:
        """Dead letters of the group with bodies, read from its file and the buffers not written yet;
        only live ones (not re-driven), only `wanted` seqs when given."""
        live = self.dead_index.live.get(group, {})
        out: dict[int, DeadLetter] = {}
        path = self.dlq_dir / f"{safe_name(group)}.dlq"
        chunks = [path.read_bytes()] if path.exists() else []
        chunks += self._dlq_in_job.get(group, []) + self._dlq_writes.get(group, [])
        for chunk in chunks:
            for kind, payload in scan_records(chunk)[0]:
                if kind != KIND_DEAD:
                    continue
                seq = payload[0]
                if seq in live and (wanted is None or seq in wanted):
                    out[seq] = DeadLetter.from_payload(payload)
                    if limit is not None and len(out) >= limit:
                        return list(out.values())
        return list(out.values())

    def dead_letters(self, group: str, limit: int) -> list[DeadLetter]:
        return self._read_dead_letters(group, limit=limit)

    def dead_letter_count(self, group: str) -> int:
        return self.dead_index.count(group)

    def dead_letter_bodies(self, group: str, dead: list[DeadLetter]) -> list[DeadLetter]:
        found = {d.seq: d for d in self._read_dead_letters(group, wanted={d.seq for d in dead})}
        return [found[d.seq] for d in dead if d.seq in found]

    def redrive(self, group: str, dead: list[DeadLetter], received_ms: int, on_done: DoneCallback,
                superseded: list[DeadLetter] = ()):
        place = self._place(on_done)
        if place is None:
            return []
        seq, seg = place
        messages = [StoredMessage(seq + i, d.fields, d.app_id, received_ms, (group,), seg) for i, d in enumerate(dead)]
        record = encode_record(KIND_REDRIVE, [seq, received_ms, group, [[d.seq, d.app_id, d.fields] for d in dead]])
        markers = [encode_record(KIND_REDRIVEN, [d.seq, seq + i, received_ms]) for i, d in enumerate(dead)]
        markers += [encode_record(KIND_REDRIVEN, [d.seq, 0, received_ms]) for d in superseded]
        for d in [*dead, *superseded]:
            self.dead_index.mark_redriven(group, d.seq, d.fields[M_ID])

        def durable(exc: BaseException | None) -> None:
            if exc is None:  # the copies are safe: now the markers (the next job writes them)
                self._dlq_writes.setdefault(group, []).extend(markers)
            on_done(exc)

        self._queue(seg, record, len(dead), len(dead), durable)
        return messages

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
        if self._held and now >= self._next_hold_check:  # held segments whose retention ended go now
            self._next_hold_check = now + 1.0
            expired = [seg for seg in self._held if self._past_retention(seg)]
            if expired:
                self._held = [seg for seg in self._held if seg not in expired]
                self._deletes.extend(expired)
        if self._busy:
            return
        if self._finished or self._dlq_writes or self._deletes or self._log_writes:
            self._kick()
        elif self.fsync == "interval" and self._unsynced and now - self._last_data_sync >= self.fsync_interval_s:
            self._kick()
        elif (self.fsync != "never" and any(s.ack_dirty for s in self.segments)
              and now - self._last_ack_sync >= self.ack_sync_interval_s):
            self._kick()

    @property
    def busy(self) -> bool:
        return self._busy

    def _kick(self) -> None:
        if self._busy:
            return
        self._busy = True
        job = self._take_job()
        self.executor.submit(self._run_job, job)

    def _take_job(self):
        now = time.monotonic()
        sync_data = self.fsync == "batch" or (
            self.fsync == "interval" and now - self._last_data_sync >= self.fsync_interval_s)
        sync_acks = self.fsync != "never" and now - self._last_ack_sync >= self.ack_sync_interval_s
        if sync_data:
            self._last_data_sync = now
        if sync_acks:
            self._last_ack_sync = now
        job = (self._dlq_writes, self._log_writes, self._waiters, self._finished, self._deletes, sync_data,
               sync_acks)
        self._dlq_in_job = self._dlq_writes
        self._dlq_writes, self._log_writes, self._waiters, self._finished, self._deletes = {}, [], [], {}, []
        return job

    def _job_done(self, waiters: list[DoneCallback], deletes: list[Segment], exc: BaseException | None) -> None:
        self._busy = False
        self._dlq_in_job = {}
        self.flushes += 1
        self._forget(deletes)
        if exc is not None:
            log.error("%s: store failed: %s", self.dir, exc)
            self._failed = exc
            error = StoreError(str(exc))
            for done in waiters:
                done(error)
            return
        for done in waiters:
            done(None)
        if self._log_writes:
            self._kick()  # publishes that arrived during the job: the next group commit

    # -- the flush job (executor thread) ----------------------------------------------------

    def _run_job(self, job) -> None:
        dlq_writes, log_writes, waiters, finished, deletes, sync_data, sync_acks = job
        exc = None
        try:
            self._write_dead_letters(dlq_writes)
            self._write_log(log_writes, sync_data)
            self._write_acks(finished, sync_acks)
            for seg in deletes:
                self._delete(seg)
        except BaseException as e:  # reported to every waiter of this job
            exc = e
        self.notify(self._job_done, waiters, deletes, exc)

    def _write_dead_letters(self, dlq_writes: dict[str, list[bytes]]) -> None:
        for group, records in dlq_writes.items():
            fd = self._dlq_fds.get(group)
            if fd is None:
                self.dlq_dir.mkdir(parents=True, exist_ok=True)
                fd = os.open(self.dlq_dir / f"{safe_name(group)}.dlq", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
                self._dlq_fds[group] = fd
            _write_all(fd, b"".join(records))
            if self.fsync != "never":
                os.fsync(fd)  # before the finish record that retires the message is written
                self.other_fsyncs += 1

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
            _write_all(seg.log_fd, b"".join(data for _, data in log_writes[i:j]))
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
                _fsync_dir(self.dir)  # a new segment file must survive a crash too
                self.other_fsyncs += 1
            self._unsynced = False

    def _write_acks(self, finished: dict[tuple[Segment, str], list[int]], sync_acks: bool) -> None:
        for (seg, group), seqs in finished.items():
            if seg.deleted:
                continue
            if seg.ack_fd is None:
                seg.ack_fd = os.open(seg.ack_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            _write_all(seg.ack_fd, encode_record(KIND_FINISH, [group, seqs]))
            seg.ack_dirty = True
        if sync_acks:
            for seg in self.segments:
                if seg.ack_dirty and seg.ack_fd is not None and not seg.deleted:
                    os.fdatasync(seg.ack_fd)
                    self.other_fsyncs += 1
                    seg.ack_dirty = False

    def _delete(self, seg: Segment) -> None:
        if seg.deleted:
            return
        for fd in (seg.log_fd, seg.ack_fd):
            if fd is not None:
                os.close(fd)
        seg.log_fd = seg.ack_fd = None
        seg.log_path.unlink(missing_ok=True)  # the log first: an orphan ack file is removed at recovery
        seg.ack_path.unlink(missing_ok=True)
        seg.deleted = True
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
        dlq_writes, log_writes, waiters, finished, deletes, _, _ = self._take_job()
        error = None
        try:
            self._write_dead_letters(dlq_writes)
            self._write_log(log_writes, sync_data=self.fsync != "never")
            self._write_acks(finished, sync_acks=self.fsync != "never")
            for seg in deletes:
                self._delete(seg)
            self._forget(deletes)
        except OSError as exc:
            error = StoreError(str(exc))
            raise
        finally:
            for done in waiters:
                done(error)
            for seg in self.segments:
                for fd in (seg.log_fd, seg.ack_fd):
                    if fd is not None:
                        os.close(fd)
                seg.log_fd = seg.ack_fd = None
            for fd in self._dlq_fds.values():
                os.close(fd)
            self._dlq_fds.clear()

    def stats(self) -> dict:
        return {
            "storage": "file",
            "fsync": self.fsync,
            "segments": len(self.segments),
            "bytes": sum(s.size for s in self.segments),
            "next_seq": self.next_seq,
            "prepared": len(self.prepared),
            "flushes": self.flushes,
            "fsyncs": self.fsyncs,
            "failed": str(self._failed) if self._failed else None,
        }


def _without_body(dead: DeadLetter) -> DeadLetter:
    """The index keeps dead letters without their bodies (read back from the file when re-driven)."""
    fields = list(dead.fields)
    fields[M_BODY] = b""
    dead.fields = fields
    return dead
