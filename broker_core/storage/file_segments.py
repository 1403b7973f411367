"""The log segments of a file-stored topic (broker_core.storage.file_store): what one is, and reading them back.

Recovery reads each segment (`<base>.log`) and its ack file (`<base>.ack`), truncates a torn or corrupt
tail, and returns the messages some group still owes with those groups; prepared messages stay prepared,
commit and rollback records settle theirs, and re-drives whose markers were lost in a crash get them
written again. An ack file whose segment is gone (the crash came between their deletions) is removed.
"""

from __future__ import annotations

import logging
import os
from array import array
from collections.abc import Iterator
from pathlib import Path

from broker_core.protocol import M_ID, TX_COMMITTED, TX_PREPARED, TX_ROLLED_BACK
from broker_core.storage.file_dead_letters import marker
from broker_core.storage.file_reader import INDEX_EVERY, iter_file_records, iter_records
from broker_core.storage.owed import Recovered
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
                 "ack_dirty", "tx", "synced", "rolled_back_ms", "index", "owing")

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
        self.index: list[tuple[int, int]] = []  # (first seq, offset) of a record every INDEX_EVERY bytes
        self.owing = array("H")  # per seq from `base` on: how many groups still owe that message (2 bytes each)

    def owe(self, seq: int, counts) -> None:
        """Set how many groups owe the messages from `seq` on (`counts`: one per message)."""
        owing = self.owing
        at = seq - self.base
        if at > len(owing):
            owing.frombytes(bytes(2 * (at - len(owing))))  # seqs not owed (prepared, imported dead letters)
        if at == len(owing):
            owing.extend(counts)
        else:
            for i, n in enumerate(counts):
                if at + i < len(owing):
                    owing[at + i] = n
                else:
                    owing.append(n)

    def finish(self, seq: int) -> bool:
        """One group less owes the message; True when none does any more."""
        at = seq - self.base
        owing = self.owing
        if 0 <= at < len(owing) and owing[at]:
            owing[at] -= 1
            return owing[at] == 0
        return False

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
    counters). It keeps no message of the log: each group gets its position back (`Recovered.starts`: the first
    seq it owes, the seqs above it it finished, how many it owes), read one record at a time."""

    def recover(self) -> Recovered:
        self.dir.mkdir(parents=True, exist_ok=True)
        bases = sorted(int(p.stem) for p in self.dir.glob("*.log") if p.stem.isdigit())
        for ack in self.dir.glob("*.ack"):
            if not ack.stem.isdigit() or int(ack.stem) not in bases:
                ack.unlink()  # its segment was deleted and the crash came before the ack file went
        recovered = Recovered(self._read_all_owed)
        last_seq = 0
        for base in bases:
            seg = Segment(self.dir, base)
            finished = self._read_acks(seg)
            last_seq = max(last_seq, self._scan_segment(seg, finished, recovered))
            for message_id in seg.tx:  # a prepared message holds its segment; a committed one is owed from memory
                entry = self.tx.get(message_id)
                if entry is None or entry.message.segment is not seg:
                    continue
                if entry.state == TX_PREPARED:
                    seg.unfinished += 1
                elif entry.state == TX_COMMITTED:
                    m = entry.message
                    done = finished.get(m.seq)
                    pending = tuple(g for g in m.groups if not done or g not in done)
                    m.pending = len(pending)
                    seg.unfinished += len(pending)
                    seg.owe(m.seq, [len(pending)])
                    if pending:
                        self.held += 1
                        recovered.in_memory.append((m, pending))
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
        recovered.end = self.next_seq
        return recovered

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

    def _scan_segment(self, seg: Segment, finished: dict[int, set[str]], recovered: Recovered) -> int:
        """Read a segment's records one at a time: each group's position, the segment's unfinished count and
        index, transaction entries; truncate a torn tail. Returns the last seq it holds (0: none)."""
        data = seg.log_path.read_bytes()
        end = last_seq = 0
        for pos, record_end, kind, payload in iter_records(data):
            end = record_end
            if kind in (KIND_BATCH, KIND_PREPARED, KIND_REDRIVE):
                first = payload[0]
                if not seg.index or pos - seg.index[-1][1] >= INDEX_EVERY:
                    seg.index.append((first, pos))
            if kind == KIND_BATCH:
                first, app_id, received_ms, arrays, groups = payload[:5]
                seg.owe(first, [self._saw(seg, first + i, received_ms, groups[i], finished, recovered)
                                for i in range(len(arrays))])
                last_seq = max(last_seq, first + len(arrays) - 1)
            elif kind == KIND_PREPARED:
                first, app_id, received_ms, arrays = payload[:4]
                for i, fields in enumerate(arrays):
                    m = StoredMessage(first + i, fields, app_id, received_ms, (), seg)
                    self.tx[m.id] = self.prepared[m.id] = TxEntry(m)
                    seg.tx.append(m.id)
                last_seq = max(last_seq, first + len(arrays) - 1)
            elif kind in (KIND_COMMIT, KIND_ROLLBACK):
                self._recover_end_tx(kind, payload)
            elif kind == KIND_REDRIVE:
                first, received_ms, group, entries = payload[:4]
                for i, (dead_seq, _, fields) in enumerate(entries):
                    seg.owe(first + i, [self._saw(seg, first + i, received_ms, (group,), finished, recovered)])
                    self._log_redrives.append((group, dead_seq, first + i, received_ms, fields[M_ID]))
                last_seq = max(last_seq, first + len(entries) - 1)
        if end < len(data):
            log.warning("%s: truncating a torn or corrupt tail of %d bytes", seg.log_path, len(data) - end)
            os.truncate(seg.log_path, end)
        seg.size = end
        return last_seq

    def _saw(self, seg: Segment, seq: int, received_ms: int, groups, finished: dict[int, set[str]],
             recovered: Recovered) -> int:
        """A message of the log owed to `groups` at publish; returns how many of them still owe it."""
        done = finished.get(seq)
        owing = 0
        for g in groups:
            is_done = done is not None and g in done
            recovered.start(g).saw(seq, received_ms, is_done)
            if not is_done:
                owing += 1
        seg.unfinished += owing
        self.held += 1 if owing else 0
        return owing

    def _read_all_owed(self, recovered: Recovered) -> Iterator[tuple[StoredMessage, tuple[str, ...]]]:
        """Every message some group still owes, in seq order, with those groups (read from the log now)."""
        in_memory = sorted(recovered.in_memory, key=lambda pair: pair[0].seq)
        for seg in list(self.segments):
            for _, _, kind, payload in iter_file_records(seg.log_path, 0):
                if kind == KIND_BATCH:
                    first, app_id, received_ms, arrays, groups = payload[:5]
                    found = [StoredMessage(first + i, f, app_id, received_ms, tuple(groups[i]), seg)
                             for i, f in enumerate(arrays)]
                elif kind == KIND_REDRIVE:
                    first, received_ms, group, entries = payload[:4]
                    found = [StoredMessage(first + i, f, app_id, received_ms, (group,), seg)
                             for i, (_, app_id, f) in enumerate(entries)]
                else:
                    continue
                for m in found:
                    while in_memory and in_memory[0][0].seq < m.seq:
                        yield in_memory.pop(0)
                    owed = recovered.owed_groups(m.seq, m.groups)
                    if owed:
                        m.pending = len(owed)
                        yield m, owed
        yield from in_memory

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
