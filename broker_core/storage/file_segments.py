"""The log segments of a file-stored topic (broker_core.storage.file_store): what one is, and reading them back.

Recovery reads each segment (`<base>.log`) and its ack file (`<base>.ack`), truncates a torn or corrupt
tail, and returns the messages some group still owes with those groups; prepared messages stay prepared,
commit and rollback records settle theirs, and re-drives whose markers were lost in a crash get them
written again. An ack file whose segment is gone (the crash came between their deletions) is removed.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from broker_core.protocol import TX_COMMITTED, TX_PREPARED, TX_ROLLED_BACK
from broker_core.storage.file_dead_letters import marker
from broker_core.storage.store import (
    KIND_BATCH,
    KIND_COMMIT,
    KIND_FINISH,
    KIND_PREPARED,
    KIND_REDRIVE,
    KIND_ROLLBACK,
    StoredMessage,
    TxEntry,
    scan_records,
)

log = logging.getLogger("broker_core.file_store")


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

    def delete(self) -> None:
        """Close and delete its files (the flush job's thread)."""
        if self.deleted:
            return
        for fd in (self.log_fd, self.ack_fd):
            if fd is not None:
                os.close(fd)
        self.log_fd = self.ack_fd = None
        self.log_path.unlink(missing_ok=True)  # the log first: an orphan ack file is removed at recovery
        self.ack_path.unlink(missing_ok=True)
        self.deleted = True
        self.ack_dirty = False



class SegmentRecovery:
    """FileStore's recovery (a mixin: it fills the store's segments, transaction entries, dead-letter index and
    counters)."""

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
                    self.held += 1
                last_seq = m.seq
            for message_id in seg.tx:  # a prepared message holds its segment
                entry = self.tx.get(message_id)
                if entry is not None and entry.message.segment is seg and entry.state == TX_PREPARED:
                    seg.unfinished += 1
            self.segments.append(seg)
        self.next_seq = max(last_seq + 1, bases[-1] if bases else 1, self.first_seq)
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

    def _recover_dead_letters(self) -> None:
        # imported dead letters took seqs of their own: never hand those out again
        self.next_seq = max(self.next_seq, self.dlq.recover() + 1)
        index = self.dlq.index
        # re-drives whose log record is durable and whose markers were lost in a crash
        for group, dead_seq, seq, ms, message_id in self._log_redrives:
            if dead_seq not in index.redriven.get(group, {}):
                index.mark_redriven(group, dead_seq, message_id)
                self.dlq.add_markers(group, [marker(dead_seq, seq, ms)])
        self._log_redrives.clear()

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
