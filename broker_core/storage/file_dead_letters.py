"""The dead-letter files of a file-stored topic: `deadletter/<group>.dlq` in the topic's folder.

A group's file holds its dead letters (KIND_DEAD records: full message copies) and which of them were
re-driven (KIND_REDRIVEN markers), appended in that order (broker_core/storage/store.py gives the formats). The
index (`DeadLetterIndex`) keeps the live ones without their bodies; a body is read back from the file
when it is needed (a re-drive, a listing, an export).

The event loop's side buffers records (`add`, `add_markers`) and drops (`drop`: a group's binding was
removed); the store's flush job takes them (`take`) and writes them in the executor (`write`): drops
first (the file is closed and deleted), then the records, fsynced unless the store's policy is "never".

A re-drive writes the fresh copies as one KIND_REDRIVE log record (so a crash cannot lose it) and, once
that is durable, a KIND_REDRIVEN marker per dead letter to the group's .dlq file (so the dead letter is
not listed again, even after the segment is deleted). Recovery writes the markers of a re-drive whose log
record survived but whose markers did not: a re-drive is never repeated.

A delete (`POST /admin/dlq/delete`) writes a KIND_DEAD_DELETED record per dead letter to the group's .dlq file
before it answers, so a restart does not bring them back.

Imported dead letters (`POST /admin/dlq/import`: moved from another cluster) are KIND_DEAD records like
any other, with a seq this store handed out for them; recovery keeps the store's seqs above them.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from urllib.parse import quote

from broker_core.protocol import M_BODY, M_ID
from broker_core.storage.store import (
    KIND_DEAD,
    KIND_DEAD_DELETED,
    KIND_REDRIVE,
    KIND_REDRIVEN,
    DeadLetter,
    DeadLetterIndex,
    DoneCallback,
    StoredMessage,
    StoreError,
    encode_record,
    scan_records,
)

log = logging.getLogger("broker_core.file_dead_letters")


def safe_name(name: str) -> str:
    """A topic or group name as a file name (names are slugs; quote anything else)."""
    return quote(name, safe="-_.") or "_"


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def without_body(dead: DeadLetter) -> DeadLetter:
    """The index keeps dead letters without their bodies (read back from the file when needed)."""
    fields = list(dead.fields)
    fields[M_BODY] = b""
    dead.fields = fields
    return dead


class DeadLetterFiles:
    def __init__(self, directory: Path, fsync: bool):
        self.dir = Path(directory)
        self.fsync = fsync
        self.index = DeadLetterIndex()
        self.writes: dict[str, list[bytes]] = {}  # buffered until the next flush job
        self.in_job: dict[str, list[bytes]] = {}  # what the running job writes
        self.drops: list[str] = []  # groups whose file the next job deletes
        self._fds: dict[str, int] = {}
        self.fsyncs = 0

    def path(self, group: str) -> Path:
        return self.dir / f"{safe_name(group)}.dlq"

    # -- recovery ---------------------------------------------------------------------------

    def recover(self) -> int:
        """Read every group's file into the index (truncating a torn tail); returns the highest seq of a dead
        letter (imported ones have seqs of their own, which the store must not hand out again)."""
        highest = 0
        if not self.dir.is_dir():
            return highest
        index = self.index
        for path in self.dir.glob("*.dlq"):
            data = path.read_bytes()
            records, end = scan_records(data)
            seq_ids: dict[int, str] = {}
            group = None
            for kind, payload in records:
                if kind == KIND_DEAD:
                    dead = without_body(DeadLetter.from_payload(payload))
                    group = dead.group
                    seq_ids[dead.seq] = dead.fields[M_ID]
                    highest = max(highest, dead.seq)
                    index.add(dead)
                elif kind == KIND_REDRIVEN and group is not None:
                    index.mark_redriven(group, payload[0], seq_ids.get(payload[0], ""))
                elif kind == KIND_DEAD_DELETED and group is not None:
                    index.mark_deleted(group, payload[0], seq_ids.get(payload[0], ""))
            if end < len(data):
                log.warning("%s: truncating a torn or corrupt tail of %d bytes", path, len(data) - end)
                os.truncate(path, end)
        return highest

    # -- the loop thread's side -------------------------------------------------------------

    def add(self, dead: DeadLetter) -> None:
        """A new dead letter (with its body); the index keeps it without."""
        self.writes.setdefault(dead.group, []).append(dead.to_record())
        self.index.add(without_body(DeadLetter(dead.seq, dead.group, dead.cause, dead.attempts, dead.dead_ms,
                                               dead.app_id, dead.received_ms, dead.fields)))

    def add_markers(self, group: str, records: list[bytes]) -> None:
        self.writes.setdefault(group, []).extend(records)

    def drop(self, group: str) -> None:
        """Forget the group's dead letters; its file is deleted by the next job."""
        self.index.drop(group)
        self.writes.pop(group, None)
        self.drops.append(group)

    def read(self, group: str, wanted=None, limit: int | None = None) -> list[DeadLetter]:
        """Live dead letters of the group with bodies, from its file and the buffers not written yet; only
        `wanted` seqs when given."""
        live = self.index.live.get(group, {})
        if not live:
            return []
        out: dict[int, DeadLetter] = {}
        path = self.path(group)
        chunks = [path.read_bytes()] if path.exists() else []
        chunks += self.in_job.get(group, []) + self.writes.get(group, [])
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

    @property
    def pending(self) -> bool:
        return bool(self.writes or self.drops)

    def take(self) -> tuple[dict[str, list[bytes]], list[str]]:
        """What the next job writes; it stays readable (`in_job`) until `job_done`."""
        writes, drops = self.writes, self.drops
        self.in_job = writes
        self.writes, self.drops = {}, []
        return writes, drops

    def job_done(self) -> None:
        self.in_job = {}

    # -- the flush job (executor thread) ----------------------------------------------------

    def write(self, writes: dict[str, list[bytes]], drops: list[str]) -> None:
        for group in drops:
            fd = self._fds.pop(group, None)
            if fd is not None:
                os.close(fd)
            self.path(group).unlink(missing_ok=True)
        for group, records in writes.items():
            fd = self._fds.get(group)
            if fd is None:
                self.dir.mkdir(exist_ok=True)  # not parents: a deleted topic's folder is never made again
                fd = os.open(self.path(group), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
                self._fds[group] = fd
            write_all(fd, b"".join(records))
            if self.fsync:
                os.fsync(fd)  # before the finish record that retires the message is written
                self.fsyncs += 1

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()


def marker(dead_seq: int, new_seq: int, redriven_ms: int) -> bytes:
    """A KIND_REDRIVEN record: that dead letter was re-driven (as `new_seq`; 0: retired without a copy)."""
    return encode_record(KIND_REDRIVEN, [dead_seq, new_seq, redriven_ms])


class FileDeadLetters:
    """The file store's dead-letter operations (`broker_core.storage.file_store.FileStore` mixes this in): it
    brings `dlq`, `held`, `next_seq`, `notify`, `_failed`, `_waiters`, `_kick`, `_place`, `_queue`, `finish`."""

    dlq: DeadLetterFiles

    @property
    def dead_index(self) -> DeadLetterIndex:
        return self.dlq.index

    def dead_letter(self, message: StoredMessage, group: str, cause: str, attempts: int, now_ms: int,
                    finish: bool = True) -> None:
        self.dlq.add(DeadLetter(message.seq, group, cause, attempts, now_ms, message.app_id, message.received_ms,
                                message.fields))
        if finish:
            self.finish(message, group)

    def dead_letters(self, group: str, limit: int) -> list[DeadLetter]:
        return self.dlq.read(group, limit=limit)

    def dead_letter_count(self, group: str) -> int:
        return self.dlq.index.count(group)

    def dead_letter_bodies(self, group: str, dead: list[DeadLetter]) -> list[DeadLetter]:
        found = {d.seq: d for d in self.dlq.read(group, wanted={d.seq for d in dead})}
        return [found[d.seq] for d in dead if d.seq in found]

    def drop_dead_letters(self, group: str) -> None:
        self.dlq.drop(group)
        self._kick()

    def _wait_for_job(self, on_done: DoneCallback) -> bool:
        """`on_done` runs after the next flush job (False: the store failed, `on_done` was told)."""
        if self._failed is not None:
            self.notify(on_done, StoreError(f"store failed earlier: {self._failed}"))
            return False
        self._waiters.append(on_done)
        return True

    def import_dead_letters(self, group: str, dead: list[DeadLetter], on_done: DoneCallback) -> None:
        """Store dead letters brought from elsewhere (with bodies; each gets a seq of this store); `on_done`
        once they are durable."""
        if not self._wait_for_job(on_done):
            return
        for d in dead:
            d.seq, d.group = self.next_seq, group
            self.next_seq += 1
            self.dlq.add(d)
        self._kick()

    def delete_dead_letters(self, group: str, dead: list[DeadLetter], on_done: DoneCallback) -> None:
        if not self._wait_for_job(on_done):
            return
        now_ms = int(time.time() * 1000)
        for d in dead:
            self.dlq.index.mark_deleted(group, d.seq, d.fields[M_ID])
        self.dlq.add_markers(group, [encode_record(KIND_DEAD_DELETED, [d.seq, now_ms]) for d in dead])
        self._kick()

    def redrive(self, group: str, dead: list[DeadLetter], received_ms: int, on_done: DoneCallback,
                superseded: list[DeadLetter] = ()):
        place = self._place(on_done)
        if place is None:
            return []
        seq, seg = place
        messages = [StoredMessage(seq + i, d.fields, d.app_id, received_ms, (group,), seg) for i, d in enumerate(dead)]
        record = encode_record(KIND_REDRIVE, [seq, received_ms, group, [[d.seq, d.app_id, d.fields] for d in dead]])
        markers = [marker(d.seq, seq + i, received_ms) for i, d in enumerate(dead)]
        markers += [marker(d.seq, 0, received_ms) for d in superseded]
        for d in [*dead, *superseded]:
            self.dlq.index.mark_redriven(group, d.seq, d.fields[M_ID])
        seg.owe(seq, [1] * len(dead))
        self.held += len(dead)

        def durable(exc: BaseException | None) -> None:
            if exc is None:  # the copies are safe: now the markers (the next job writes them)
                self.dlq.add_markers(group, markers)
            on_done(exc)

        self._queue(seg, record, len(dead), len(dead), durable)
        return messages
