"""The leader's side of a replicated partition (issue 20, item 2).

Each batch the leader stores is sent to the followers connected to it as the log record its store wrote
(`ReplicaLog`; `ReplicaRecords` from a store that encodes no records); a follower answers what it holds durably
(`ReplicaStored`). A publish is acknowledged to its producer only once `min_insync`
replicas (the leader included) hold it durably: the leader's own store under its fsync policy, the followers'
under theirs. A follower that connects asks from its next seq: what it lacks is read back from the leader's log
segments a chunk at a time while its connection has room (catch_up.py), then the batches kept in memory since
(`recent`: at most RECENT_BYTES of them), then every new one. It counts as in sync once it
has acknowledged what the leader held when it asked. With fewer replicas in sync than `min_insync` a publish is
refused before anything is stored (`not_enough_replicas`); one whose followers do not answer within
`ack_timeout_s` fails the same way (it may still be delivered: at least once).

Leader election (election.py) adds an epoch and the in-sync replicas (`isr`, as written in
`/partition-state/<topic>/<p>`): a publish is acknowledged only once every replica of the ISR holds it (and at
least `min_insync` do), so whichever in-sync replica takes over holds every acknowledged message. The leader
changes the ISR in ZooKeeper (compare-and-set, `write_isr`) before it acknowledges without a replica: one that
disconnected, or lags by more than `lag_timeout_s`; one that caught up joins it. A leader deposed (its write
refused, a newer epoch seen, a follower fetching at a newer epoch) fails its pending publishes (`not_leader`)
and never acknowledges again.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections import deque
from collections.abc import Callable

from broker_core import protocol as p
from broker_core.protocol import M_BODY
from broker_core.replication.catch_up import CatchUp, send_finished, send_in_order

log = logging.getLogger("broker_core.replication")

# the newest batches kept in memory for followers that fall a little behind (older ones are read from the files):
# at most this many bytes of bodies (before, 200,000 messages: 200 MiB of bodies of 1 KiB held by every leader)
RECENT_BYTES = 4 * 1024 * 1024


class NotEnoughReplicas(Exception):
    code = p.E_NOT_ENOUGH_REPLICAS


class NotLeading(Exception):
    code = p.E_NOT_LEADER


class NotLed:
    """A replicated partition held here that this broker does not lead now (following, or deposed): publishes are
    refused, never stored unreplicated (`Topic.leaders` holds it in place of a `PartitionLeader`)."""

    def __init__(self, topic: str, partition: int):
        self.topic, self.partition = topic, partition

    def admit(self) -> NotLeading:
        return NotLeading(f"partition {self.partition} of topic {self.topic!r} is not led by this broker now: "
                          "read /partition-state and send to its leader")


class _Follower:
    __slots__ = ("conn", "acked", "caught_up_at", "in_sync", "tx_acked")

    def __init__(self, conn, acked: int, caught_up_at: int):
        self.conn = conn
        self.acked = acked  # the highest seq it holds durably
        self.tx_acked = 0  # the highest transaction end (`number`) it holds durably
        self.caught_up_at = caught_up_at  # in sync once it acknowledged this seq
        self.in_sync = acked >= caught_up_at


class PartitionLeader:
    def __init__(self, topic: str, partition: int, store, min_insync: Callable[[], int], ack_timeout_s: float = 5.0,
                 *, node_id: str = "", epoch: int = 0, isr: set[str] | None = None,
                 write_isr: Callable[[set[str]], None] | None = None, lag_timeout_s: float = 2.0,
                 start_seq: int = 0):
        self.node_id = node_id
        self.start_seq = start_seq  # this epoch's first seq (`epoch_start_seq`): what came before is every replica's
        self.fed: dict[str, int] = {}  # follower node -> the last seq this leader sent it
        self.epoch = epoch
        self.isr = set(isr or {node_id})  # as last written in ZooKeeper: every one must hold a publish
        self.write_isr = write_isr  # (None: no partition state, the static leader of before elections)
        self.isr_writing = False
        self.lag_timeout_s = lag_timeout_s
        self.deposed = False
        self.topic = topic
        self.partition = partition
        self.store = store
        self.min_insync = min_insync
        self.ack_timeout_s = ack_timeout_s
        self.followers: dict[int, _Follower] = {}  # by id(conn)
        self.recent: deque[list] = deque()  # batches, oldest first
        self._recent_sizes: deque[int] = deque()  # their body bytes
        self._recent_bytes = 0
        self.catching_up: dict[int, CatchUp] = {}  # by id(conn): followers reading what the memory no longer holds
        self.pending: deque[tuple[int, float, Callable, int, int]] = deque()  # (last seq, since, reply, first, n)
        self.refused = 0
        self.finished_out: dict[str, list[int]] = {}  # group -> seqs finished since the last tick (to the followers)
        self.acks_sent = 0
        self._tx_numbers = itertools.count(1)
        self.tx_pending: deque[tuple[int, float, Callable]] = deque()  # (number, since, reply) of transaction ends
        # partition 0 of a topic with delayed messages: their schedule's replication (schedule_sync.ScheduleLeading)
        self.schedule = None

    # -- publishing --------------------------------------------------------------------------

    def in_sync(self) -> int:
        """Replicas in sync now, the leader included."""
        return 1 + sum(f.in_sync for f in self.followers.values())

    def admit(self) -> Exception | None:
        if self.deposed:
            return NotLed(self.topic, self.partition).admit()
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
        record = getattr(self.store, "last_batch", None)  # the record its store just wrote (file level)
        self._keep(batch, len(record) if record is not None else sum(len(f[M_BODY]) for f in arrays))
        if not self.followers:
            return
        if record is not None:  # sent as written: the leader does not encode the messages again, nor the follower
            frame = p.ReplicaLog(self.topic, self.partition, batch[0], len(arrays), batch[4], record)
        else:
            frame = p.ReplicaRecords(self.topic, self.partition, [batch])
        last = batch[0] + len(arrays) - 1
        for f in self.followers.values():
            f.conn.send(frame)
            self.fed[f.conn.client_id] = last

    def _keep(self, entry: list, size: int) -> None:
        """A batch or transaction record, kept in `recent` for followers that fall a little behind."""
        self.recent.append(entry)
        self._recent_sizes.append(size)
        self._recent_bytes += size
        while self._recent_bytes > RECENT_BYTES and len(self.recent) > 1:
            self.recent.popleft()
            self._recent_bytes -= self._recent_sizes.popleft()

    # -- transaction messages (ReplicaTx) --------------------------------------------------------

    def prepared(self, messages, app_id, received_ms: int, arrays: list) -> None:
        """Prepared messages the leader stored (not durable yet; their reply is `wrap`ped like a publish's): kept
        and sent to the followers, which store them with the same seqs."""
        if not messages:
            return
        op = ["prepare", messages[0].seq, app_id, received_ms, arrays]
        self._keep(op, sum(len(f[M_BODY]) for f in arrays))
        frame = p.ReplicaTx(self.topic, self.partition, [op])
        last = messages[-1].seq
        for f in self.followers.values():
            f.conn.send(frame)
            self.fed[f.conn.client_id] = last

    def tx_end(self, seq: int, message_id: str, commit: bool, groups, now_ms: int, reason: str,
               reply: Callable[[BaseException | None], None]) -> Callable[[BaseException | None], None]:
        """A commit or rollback of the prepared message at `seq`, being stored here: sent to the followers (and to
        those catching up: one that holds no such prepared message skips it); returns the store's callback,
        which answers `reply` once `min_insync` replicas (and the ISR) hold it."""
        number = next(self._tx_numbers)
        op = ["end", seq, message_id, commit, list(groups), now_ms, reason, number]
        self._keep(op, 64)
        frame = p.ReplicaTx(self.topic, self.partition, [op])
        for conn in [f.conn for f in self.followers.values()] + [c.conn for c in self.catching_up.values()]:
            conn.send(frame)

        def durable(exc: BaseException | None) -> None:
            if exc is not None:
                reply(exc)
            elif self.deposed:
                reply(NotLeading(f"partition {self.partition} of topic {self.topic!r}: this broker stopped leading it "
                                 "while storing this transaction's end: not acknowledged (a back-check settles it)"))
            else:
                self.tx_pending.append((number, time.monotonic(), reply))
                self._release_tx()
        return durable

    def tx_stored(self, conn, number: int) -> None:
        f = self.followers.get(id(conn))
        if f is not None and number > f.tx_acked:
            f.tx_acked = number
            self._release_tx()

    def _release_tx(self) -> None:
        if self.deposed:
            return
        needed = self.min_insync()
        acked = _by_node(self.followers.values(), "tx_acked")
        while self.tx_pending:
            number = self.tx_pending[0][0]
            if 1 + sum(n >= number for n in acked.values()) < needed or not self.isr_holds(acked, number):
                return
            self.tx_pending.popleft()[2](None)

    def wrap(self, reply: Callable) -> Callable:
        """The publish's reply, held until `min_insync` replicas hold the batch."""
        def durable(exc: BaseException | None, first_seq: int, count: int) -> None:
            if exc is not None or not count:
                reply(exc, first_seq, count)
                return
            if self.deposed:  # stored here after the step-down (it began before): never acknowledged, said so
                reply(NotLeading(f"partition {self.partition} of topic {self.topic!r}: this broker stopped leading it "
                                 "while storing this publish: not acknowledged (it may still be delivered)"), 0, 0)
                return
            self.pending.append((first_seq + count - 1, time.monotonic(), reply, first_seq, count))
            self._release()
        return durable

    def _holding(self, seq: int) -> int:
        return 1 + sum(f.acked >= seq for f in self.followers.values())

    def _isr_hold(self, seq: int) -> bool:
        return self.isr_holds(_by_node(self.followers.values(), "acked"), seq)

    def isr_holds(self, acked: dict[str, int], upto: int) -> bool:
        """Whether every follower of the ISR acknowledged `upto` (`acked`: per node, the highest it did)."""
        return all(acked.get(node, 0) >= upto for node in self.isr if node != self.node_id)

    def _release(self) -> None:
        if self.deposed:
            return
        needed = self.min_insync()
        while self.pending and self._holding(self.pending[0][0]) >= needed and self._isr_hold(self.pending[0][0]):
            _, _, reply, first, count = self.pending.popleft()
            reply(None, first, count)

    # -- in-sync replicas and fencing ----------------------------------------------------------

    def _review_isr(self) -> None:
        """Write the ISR to ZooKeeper when it should change: followers caught up join, gone ones leave."""
        if self.write_isr is None or self.isr_writing or self.deposed:
            return
        wanted = {self.node_id} | {f.conn.client_id for f in self.followers.values() if f.in_sync}
        if wanted != self.isr:
            self.isr_writing = True
            log.info("topic %s partition %d: in-sync replicas %s -> %s (epoch %d)", self.topic, self.partition,
                     sorted(self.isr), sorted(wanted), self.epoch)
            self.write_isr(wanted)

    def isr_written(self, isr: set[str] | None) -> None:
        """The ISR write finished (None: it failed; a refused compare-and-set deposes us through the state)."""
        self.isr_writing = False
        if isr is not None:
            self.isr = set(isr)
            self.review_waiting()  # what waited on a replica that left it

    def review_waiting(self) -> None:
        """Answer what waits on replicas (publishes, transaction ends, delayed messages) and no longer needs to: after
        the ISR shrank, or `min_insync` was lowered."""
        self._release()
        self._release_tx()
        if self.schedule is not None:
            self.schedule.release()

    def step_down(self, why: str) -> None:
        """Deposed: never acknowledge again; what waits fails with `not_leader` (the producer sends it again)."""
        if self.deposed:
            return
        self.deposed = True
        log.warning("topic %s partition %d: no longer the leader (epoch %d): %s; %d publish(es) not acknowledged",
                    self.topic, self.partition, self.epoch, why, len(self.pending))
        while self.pending:
            _, _, reply, _, _ = self.pending.popleft()
            reply(NotLeading(f"partition {self.partition} of topic {self.topic!r}: this broker is no longer its "
                             f"leader ({why}): not acknowledged (it may still be delivered)"), 0, 0)
        while self.tx_pending:
            self.tx_pending.popleft()[2](NotLeading(f"partition {self.partition} of topic {self.topic!r}: this broker "
                                                    f"is no longer its leader ({why}): the transaction's end is not "
                                                    "acknowledged (a back-check settles it)"))
        if self.schedule is not None:
            self.schedule.step_down(why)
        if self.finished_out:  # what its groups finished since the last tick, to followers still connected
            self._send_acks()
        for f in list(self.followers.values()):
            f.conn.close("deposed")
        self.followers.clear()
        for catching in list(self.catching_up.values()):
            catching.stop()
            catching.conn.close("deposed")
        self.catching_up.clear()

    def finished(self, group: str, seqs: list[int]) -> None:
        """The group finished these seqs here: sent to the followers (and those catching up) at the next tick
        (`ReplicaAcks`)."""
        if (self.followers or self.catching_up) and not self.deposed:
            self.finished_out.setdefault(group, []).extend(seqs)

    def _send_acks(self) -> None:
        out, self.finished_out = self.finished_out, {}
        for group, seqs in out.items():
            for i in range(0, len(seqs), 10_000):
                frame = p.ReplicaAcks(self.topic, self.partition, group, seqs[i:i + 10_000])
                for conn in [f.conn for f in self.followers.values()] + [c.conn for c in self.catching_up.values()]:
                    conn.send(frame)
            self.acks_sent += len(seqs)

    def tick(self, now: float) -> None:
        if self.finished_out:
            self._send_acks()
        if self.schedule is not None:
            self.schedule.tick(now)
        if self.pending and now - self.pending[0][1] > self.lag_timeout_s:
            oldest = self.pending[0][0]
            for f in self.followers.values():
                if f.in_sync and f.acked < oldest:  # lagging: out of the ISR until it catches up again
                    f.in_sync, f.caught_up_at = False, self.store.next_seq - 1
                    log.warning("topic %s partition %d: follower %s lags by more than %gs", self.topic,
                                self.partition, f.conn.client_id, self.lag_timeout_s)
        self._review_isr()
        while self.pending and now - self.pending[0][1] > self.ack_timeout_s:
            _, _, reply, _, _ = self.pending.popleft()
            reply(NotEnoughReplicas(f"fewer than {self.min_insync()} replicas of partition {self.partition} of "
                                    f"topic {self.topic!r} stored it within {self.ack_timeout_s:g}s: not "
                                    "acknowledged (it may still be delivered)"), 0, 0)
        while self.tx_pending and now - self.tx_pending[0][1] > self.ack_timeout_s:
            self.tx_pending.popleft()[2](NotEnoughReplicas(
                f"the in-sync replicas of partition {self.partition} of topic {self.topic!r} (at least min_insync "
                f"{self.min_insync()}) did not store the transaction's end within {self.ack_timeout_s:g}s: not "
                "acknowledged (a back-check settles it)"))

    # -- followers ---------------------------------------------------------------------------

    def fetch(self, conn, from_seq: int, copy_epoch: int = 0) -> None:
        """A follower asks from `from_seq`: send what it lacks, then it gets every new batch. One that holds seqs
        past this epoch's start that this leader never sent it may hold a deposed leader's messages in their
        place: refused (`replica_diverged`), it empties its copy and asks from the start."""
        last = self.store.next_seq - 1
        if from_seq > self.store.next_seq or (copy_epoch != self.epoch and from_seq - 1 > max(
                self.start_seq - 1, self.fed.get(conn.client_id, 0))):
            log.warning("topic %s partition %d: follower %s asks from seq %d, past this epoch's start %d and what "
                        "it got here: its copy may differ, it fetches anew", self.topic, self.partition,
                        conn.client_id, from_seq, self.start_seq)
            conn.error(None, p.E_REPLICA_DIVERGED, f"partition {self.partition} of {self.topic!r}: seqs from "
                                                   f"{self.start_seq} on may differ from the leader's (epoch "
                                                   f"{self.epoch}): empty the copy and fetch again")
            return
        self.fed[conn.client_id] = max(self.fed.get(conn.client_id, 0), last)
        conn.send(p.ReplicaRecords(self.topic, self.partition, []))  # accepted: the follower notes our epoch
        if self.schedule is not None:  # (in sync only once it holds the delayed messages too)
            self.schedule.fetch(conn)
        old = self.catching_up.pop(id(conn), None)
        if old is not None:
            old.stop()
        if from_seq < self._memory_start():
            catching = CatchUp(self.topic, self.partition, self.store, conn, from_seq, self._memory_start,
                               lambda next_seq: self._caught_up(conn, from_seq, next_seq))
            self.catching_up[id(conn)] = catching
            catching.start()
            log.info("topic %s partition %d: follower %s fetches from seq %d, read from the log up to seq %d",
                     self.topic, self.partition, conn.client_id, from_seq, self._memory_start())
            return
        self._caught_up(conn, from_seq, from_seq)

    def _memory_start(self) -> int:
        """The first seq of the batches (and prepared messages) kept in memory (the store's next seq when none
        are)."""
        for entry in self.recent:
            if type(entry[0]) is int:
                return entry[0]
            if entry[0] == "prepare":
                return entry[1]
        return self.store.next_seq

    def _caught_up(self, conn, from_seq: int, next_seq: int) -> None:
        """The follower got what the files hold (or needed none of it): the batches in memory from `next_seq` on,
        then every new one; then what the groups finished of the segments it got (their ack files) that the catch-up
        did not send."""
        catching = self.catching_up.pop(id(conn), None)
        if self.deposed or getattr(conn, "closed", False):
            return
        batches = send_in_order(conn, self.topic, self.partition, list(self.recent), next_seq)
        sent = catching.finished_sent if catching is not None else set()
        segments = [s for s in getattr(self.store, "segments", ()) if not s.deleted]
        for seg, after in zip(segments, segments[1:] + [None], strict=True):
            if seg.base not in sent and (after is None or after.base > from_seq):
                send_finished(conn, self.topic, self.partition, seg)
        last = self.store.next_seq - 1
        self.fed[conn.client_id] = max(self.fed.get(conn.client_id, 0), last)
        f = self.followers[id(conn)] = _Follower(conn, from_seq - 1, last)
        f.in_sync = f.in_sync and self._synced(conn)
        self._review_isr()
        log.info("topic %s partition %d: follower %s fetches from seq %d (%d batches from memory)", self.topic,
                 self.partition, conn.client_id, from_seq, batches)

    def stored(self, conn, through_seq: int) -> None:
        f = self.followers.get(id(conn))
        if f is None:
            return
        f.acked = max(f.acked, through_seq)
        if not f.in_sync and f.acked >= f.caught_up_at and self._synced(conn):
            f.in_sync = True
            log.info("topic %s partition %d: follower %s in sync at seq %d", self.topic, self.partition,
                     f.conn.client_id, f.acked)
            self._review_isr()
        self._release()

    def _synced(self, conn) -> bool:
        return self.schedule is None or self.schedule.is_synced(conn)

    def schedule_synced(self, conn) -> None:
        """The follower holds the schedule of delayed messages now: in sync, if it holds the log too."""
        f = self.followers.get(id(conn))
        if f is not None and not f.in_sync and f.acked >= f.caught_up_at:
            f.in_sync = True
            self._review_isr()

    def gone(self, conn) -> None:
        if self.schedule is not None:
            self.schedule.gone(conn)
        catching = self.catching_up.pop(id(conn), None)
        if catching is not None:
            catching.stop()
        if self.followers.pop(id(conn), None) is not None:
            log.warning("topic %s partition %d: follower %s left the in-sync replicas", self.topic, self.partition,
                        conn.client_id)
            self._review_isr()

    def stats(self) -> dict:
        return {"in_sync": self.in_sync(), "epoch": self.epoch, "isr": sorted(self.isr), "deposed": self.deposed,
                "followers": {f.conn.client_id: {"acked": f.acked, "in_sync": f.in_sync}
                                                          for f in self.followers.values()},
                "pending": len(self.pending), "refused": self.refused, "acks_sent": self.acks_sent,
                "catching_up": {c.conn.client_id: {"next_seq": c.next_seq, "read_bytes": c.read_bytes}
                                for c in self.catching_up.values()},
                "recent_bytes": self._recent_bytes,
                "schedule": self.schedule.stats() if self.schedule is not None else None}


def _by_node(followers, attr: str) -> dict[str, int]:
    """Per follower node, the highest of `attr` (`acked`, `tx_acked`) over its connections."""
    acked: dict[str, int] = {}
    for f in followers:
        acked[f.conn.client_id] = max(acked.get(f.conn.client_id, 0), getattr(f, attr))
    return acked
