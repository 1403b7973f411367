"""A follower that asks for what the leader no longer holds in memory catches up from the leader's segment files,
a chunk at a time (issue 20: followers catch up after a restart, with the leader's memory bounded whatever the log).

Before, the leader read every segment file whole and decoded every record into memory at once, and queued all of
it to the follower's connection: a follower missing a 5 GiB log made the leader hold it all. Now a `CatchUp` reads
from the segment holding the follower's next seq (its sparse index says where to start), about `CHUNK_BYTES` of
records per event-loop turn, and sends them (batches as `ReplicaRecords`, prepares, commits and rollbacks as
`ReplicaTx`, in file order) only while less than OUT_BYTES wait in the connection (the rest waits until the
follower reads). Once it reaches the batches the leader keeps in memory (`recent`), the
leader sends those and the follower gets every new batch from then on (`PartitionLeader.fetch` / `_caught_up`).

A segment deleted meanwhile (every group finished it) is skipped: the follower moves on past it, as it does when
the leader's first batch starts past its next seq.

What the leader's groups finished while the follower was away reached it as no `ReplicaAcks` (those go to the
replicas connected then): once a segment's batches are sent, its ack file follows (`send_finished`), so a failover
after the follower's return does not deliver again everything acknowledged meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
from bisect import bisect_right
from collections.abc import Callable

from broker_core import protocol as p
from broker_core.storage.file_reader import iter_file_records
from broker_core.storage.store import KIND_BATCH, KIND_COMMIT, KIND_FINISH, KIND_PREPARED, KIND_ROLLBACK

log = logging.getLogger("broker_core.replication")

CHUNK_BYTES = 1024 * 1024  # log bytes read per step
OUT_BYTES = 4 * 1024 * 1024  # sent and not yet taken by the follower: no more is read until it is less
BATCHES_PER_FRAME = 64
SEQS_PER_FRAME = 10_000  # of a ReplicaAcks frame
WAIT_S = 0.01  # before the next step, while the connection has no room or the files lag the memory
GAP_WAIT_S = 1.0  # the files holding nothing more below the memory's start for this long: on to the memory


class CatchUp:
    """Sends a follower the batches from `from_seq` up to where the leader's memory starts, then calls
    `done(next_seq)` (the next seq to send it, from the memory on)."""

    def __init__(self, topic: str, partition: int, store, conn, from_seq: int, memory_start: Callable[[], int],
                 done: Callable[[int], None]):
        self.topic, self.partition, self.store, self.conn = topic, partition, store, conn
        self.next_seq = from_seq
        self.memory_start = memory_start  # the first seq the leader holds in memory now (its next seq when none)
        self.done = done
        self.sent_batches = self.read_bytes = self.sent_finished = 0
        self.finished_sent: set[int] = set()  # bases of the segments whose ack files were sent
        self.stopped = False
        self._handle: asyncio.Handle | None = None
        self._cursor: tuple[int, int] | None = None  # (segment base, offset) where the next read starts
        self._waiting_since: float | None = None

    def start(self) -> None:
        self._handle = asyncio.get_running_loop().call_soon(self._step)

    def stop(self) -> None:
        self.stopped = True
        if self._handle is not None:
            self._handle.cancel()

    def _later(self, delay: float = 0.0) -> None:
        loop = asyncio.get_running_loop()
        self._handle = loop.call_later(delay, self._step) if delay else loop.call_soon(self._step)

    def _step(self) -> None:
        if self.stopped or getattr(self.conn, "closed", False):
            return
        if self.next_seq >= self.memory_start():
            self.stopped = True
            self.done(self.next_seq)
            return
        if waiting_bytes(self.conn) >= OUT_BYTES:
            self._later(WAIT_S)  # the follower has not read what was sent yet
            return
        batches = self._read()
        if batches is None:  # nothing on disk past next_seq now: being written (the memory will hold it soon)
            loop = asyncio.get_running_loop()
            if self._waiting_since is None:
                self._waiting_since = loop.time()
            elif loop.time() - self._waiting_since > GAP_WAIT_S:  # seqs no batch holds (not replicated kinds)
                log.warning("topic %s partition %d: follower %s: no batch on disk from seq %d to %d: it moves on",
                            self.topic, self.partition, getattr(self.conn, "client_id", "?"), self.next_seq,
                            self.memory_start())
                self.next_seq = self.memory_start()
            self._later(WAIT_S)
            return
        self._waiting_since = None
        self.sent_batches += send_in_order(self.conn, self.topic, self.partition, batches, 0)
        self._later()

    def _read(self) -> list[list] | None:
        """The next batches and transaction records (about CHUNK_BYTES of log) from next_seq on, below the
        memory's start; None when the files hold nothing past next_seq now."""
        memory_start = self.memory_start()
        segments = [s for s in getattr(self.store, "segments", ()) if not s.deleted]
        if not segments:
            self.next_seq = max(self.next_seq, memory_start)  # a store without files: the memory is all there is
            return []
        cursor = self._cursor if self._cursor is not None else self._place(segments)
        bases = [s.base for s in segments]
        i = bases.index(cursor[0]) if cursor[0] in bases else bisect_right(bases, cursor[0])
        if i >= len(segments):
            return None
        seg, offset = segments[i], cursor[1] if cursor[0] == segments[i].base else 0
        out, used = [], 0
        for _, end, kind, payload in iter_file_records(seg.log_path, offset):  # (none: deleted meanwhile)
            used = end - offset
            if kind == KIND_COMMIT:  # (sent whatever its seq: a follower skips what it holds no prepare for)
                out.append(["end", payload[0], payload[1], True, payload[2], payload[3], payload[4], 0])
            elif kind == KIND_ROLLBACK:
                out.append(["end", payload[0], payload[1], False, [], payload[2], payload[3], 0])
            elif kind in (KIND_BATCH, KIND_PREPARED) and payload[0] + len(payload[3]) > self.next_seq:
                if payload[0] >= memory_start:  # the memory holds it and what follows
                    self.next_seq = max(self.next_seq, memory_start)
                    break
                out.append(list(payload[:5]) if kind == KIND_BATCH else ["prepare", *payload[:4]])
                self.next_seq = payload[0] + len(payload[3])
            if used >= CHUNK_BYTES:
                break
        self.read_bytes += used
        if used:
            self._cursor = (seg.base, offset + used)
            return out
        if i + 1 < len(segments):  # the end of a sealed segment: its acks (after its batches), on to the next one
            self.sent_batches += send_in_order(self.conn, self.topic, self.partition, out, 0)
            self.sent_finished += send_finished(self.conn, self.topic, self.partition, seg)
            self.finished_sent.add(seg.base)
            self._cursor = (segments[i + 1].base, 0)
            return []
        return None  # the end of the active segment: what follows is still being written

    def _place(self, segments: list) -> tuple[int, int]:
        """Where the record holding next_seq starts, by the segments' sparse indexes."""
        bases = [s.base for s in segments]
        i = max(bisect_right(bases, self.next_seq) - 1, 0)
        seg = segments[i]
        index = list(seg.index)
        j = bisect_right([seq for seq, _ in index], self.next_seq) - 1
        return seg.base, index[j][1] if j >= 0 else 0


def send_in_order(conn, topic: str, partition: int, entries: list, next_seq: int) -> int:
    """Batches (`ReplicaRecords`) and transaction records (`ReplicaTx`) as they come, from `next_seq` on (every
    transaction end: a follower skips those it holds no prepared message for); returns how many were sent."""
    batches: list[list] = []
    ops: list[list] = []
    sent = 0

    def flush() -> None:
        for i in range(0, len(batches), BATCHES_PER_FRAME):
            conn.send(p.ReplicaRecords(topic, partition, batches[i:i + BATCHES_PER_FRAME]))
        if ops:
            conn.send(p.ReplicaTx(topic, partition, list(ops)))
        batches.clear()
        ops.clear()

    for entry in entries:
        if type(entry[0]) is int:
            if entry[0] + len(entry[3]) > next_seq:
                if ops:
                    flush()
                batches.append(entry)
                sent += 1
        elif entry[0] == "end" or entry[1] + len(entry[4]) > next_seq:
            if batches:
                flush()
            ops.append(entry)
            sent += 1
    flush()
    return sent


def send_finished(conn, topic: str, partition: int, segment) -> int:
    """What the leader's groups finished of a segment, as its ack file holds it, to a follower (`ReplicaAcks`; one
    finishes what it holds and still owes). Returns how many (seq, group) finishes were sent."""
    sent = 0
    for _, _, kind, payload in iter_file_records(segment.ack_path, 0):  # (none: deleted meanwhile)
        if kind == KIND_FINISH:
            group, seqs = payload[0], payload[1]
            for i in range(0, len(seqs), SEQS_PER_FRAME):
                conn.send(p.ReplicaAcks(topic, partition, group, seqs[i:i + SEQS_PER_FRAME]))
            sent += len(seqs)
    return sent


def waiting_bytes(conn) -> int:
    """Bytes queued to the follower's connection, not yet taken by it (a paused or closed one: no room)."""
    if getattr(conn, "paused", False):
        return OUT_BYTES
    transport = getattr(conn, "transport", None)
    return getattr(conn, "_out_bytes", 0) + (transport.get_write_buffer_size() if transport is not None else 0)

