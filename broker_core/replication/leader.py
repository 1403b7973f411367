"""The leader's side of a replicated partition (issue 20, item 2).

Each batch the leader stores is sent to the followers connected to it (`ReplicaRecords`); a follower answers
what it holds durably (`ReplicaStored`). A publish is acknowledged to its producer only once `min_insync`
replicas (the leader included) hold it durably: the leader's own store under its fsync policy, the followers'
under theirs. A follower that connects asks from its next seq: what it lacks is read back from the leader's log
segments, then the batches kept in memory since (`recent`), then every new one. It counts as in sync once it
has acknowledged what the leader held when it asked. With fewer replicas in sync than `min_insync` a publish is
refused before anything is stored (`not_enough_replicas`); one whose followers do not answer within
`ack_timeout_s` fails the same way (it may still be delivered: at least once).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

from broker_core import protocol as p
from broker_core.storage.store import KIND_BATCH, scan_records

log = logging.getLogger("broker_core.replication")

RECENT_MESSAGES = 200_000  # batches kept in memory for followers that fall a little behind


class NotEnoughReplicas(Exception):
    code = p.E_NOT_ENOUGH_REPLICAS


class _Follower:
    __slots__ = ("conn", "acked", "caught_up_at", "in_sync")

    def __init__(self, conn, acked: int, caught_up_at: int):
        self.conn = conn
        self.acked = acked  # the highest seq it holds durably
        self.caught_up_at = caught_up_at  # in sync once it acknowledged this seq
        self.in_sync = acked >= caught_up_at


class PartitionLeader:
    def __init__(self, topic: str, partition: int, store, min_insync: Callable[[], int], ack_timeout_s: float = 5.0):
        self.topic = topic
        self.partition = partition
        self.store = store
        self.min_insync = min_insync
        self.ack_timeout_s = ack_timeout_s
        self.followers: dict[int, _Follower] = {}  # by id(conn)
        self.recent: deque[list] = deque()  # batches, oldest first
        self._recent_messages = 0
        self.pending: deque[tuple[int, float, Callable, int, int]] = deque()  # (last seq, since, reply, first, n)
        self.refused = 0

    # -- publishing --------------------------------------------------------------------------

    def in_sync(self) -> int:
        """Replicas in sync now, the leader included."""
        return 1 + sum(f.in_sync for f in self.followers.values())

    def admit(self) -> NotEnoughReplicas | None:
        needed = self.min_insync()
        if self.in_sync() < needed:
            self.refused += 1
            return NotEnoughReplicas(f"partition {self.partition} of topic {self.topic!r} has {self.in_sync()} "
                                     f"replica(s) in sync, fewer than min_insync {needed}: nothing was stored; "
                                     "retry once the followers are back (the cluster page shows them)")
        return None

    def published(self, messages, app_id, received_ms: int, arrays: list, groups: list) -> None:
        """A batch the leader stored (not durable yet): keep it and send it to the followers."""
        if not messages:
            return
        batch = [messages[0].seq, app_id, received_ms, arrays, [list(g) for g in groups]]
        self.recent.append(batch)
        self._recent_messages += len(arrays)
        while self._recent_messages > RECENT_MESSAGES and len(self.recent) > 1:
            self._recent_messages -= len(self.recent.popleft()[3])
        frame = p.ReplicaRecords(self.topic, self.partition, [batch])
        for f in self.followers.values():
            f.conn.send(frame)

    def wrap(self, reply: Callable) -> Callable:
        """The publish's reply, held until `min_insync` replicas hold the batch."""
        def durable(exc: BaseException | None, first_seq: int, count: int) -> None:
            if exc is not None or not count:
                reply(exc, first_seq, count)
                return
            self.pending.append((first_seq + count - 1, time.monotonic(), reply, first_seq, count))
            self._release()
        return durable

    def _holding(self, seq: int) -> int:
        return 1 + sum(f.acked >= seq for f in self.followers.values())

    def _release(self) -> None:
        needed = self.min_insync()
        while self.pending and self._holding(self.pending[0][0]) >= needed:
            _, _, reply, first, count = self.pending.popleft()
            reply(None, first, count)

    def tick(self, now: float) -> None:
        while self.pending and now - self.pending[0][1] > self.ack_timeout_s:
            _, _, reply, _, _ = self.pending.popleft()
            reply(NotEnoughReplicas(f"fewer than {self.min_insync()} replicas of partition {self.partition} of "
                                    f"topic {self.topic!r} stored it within {self.ack_timeout_s:g}s: not "
                                    "acknowledged (it may still be delivered)"), 0, 0)

    # -- followers ---------------------------------------------------------------------------

    def fetch(self, conn, from_seq: int) -> None:
        """A follower asks from `from_seq`: send what it lacks, then it gets every new batch."""
        last = self.store.next_seq - 1
        batches = [b for b in self._from_log(from_seq) if b[0] + len(b[3]) - 1 >= from_seq]
        for i in range(0, len(batches), 64):
            conn.send(p.ReplicaRecords(self.topic, self.partition, batches[i:i + 64]))
        self.followers[id(conn)] = _Follower(conn, from_seq - 1, last)
        log.info("topic %s partition %d: follower %s fetches from seq %d (%d batches to catch up)", self.topic,
                 self.partition, conn.client_id, from_seq, len(batches))

    def stored(self, conn, through_seq: int) -> None:
        f = self.followers.get(id(conn))
        if f is None:
            return
        f.acked = max(f.acked, through_seq)
        if not f.in_sync and f.acked >= f.caught_up_at:
            f.in_sync = True
            log.info("topic %s partition %d: follower %s in sync at seq %d", self.topic, self.partition,
                     f.conn.client_id, f.acked)
        self._release()

    def gone(self, conn) -> None:
        if self.followers.pop(id(conn), None) is not None:
            log.warning("topic %s partition %d: follower %s left the in-sync replicas", self.topic, self.partition,
                        conn.client_id)

    def _from_log(self, from_seq: int) -> list[list]:
        """The batches holding seqs from `from_seq` on: read from the segment files for what the memory no longer
        holds, then the recent ones."""
        start = self.recent[0][0] if self.recent else self.store.next_seq
        out: list[list] = []
        if from_seq < start:
            for seg in getattr(self.store, "segments", []):
                for kind, payload in _records(seg.log_path):
                    if kind == KIND_BATCH and payload[0] < start:
                        out.append(list(payload[:5]))
        return out + list(self.recent)

    def stats(self) -> dict:
        return {"in_sync": self.in_sync(), "followers": {f.conn.client_id: {"acked": f.acked, "in_sync": f.in_sync}
                                                          for f in self.followers.values()},
                "pending": len(self.pending), "refused": self.refused}


def _records(path: Path) -> list:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    records, _ = scan_records(data)
    return records
