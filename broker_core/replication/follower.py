"""The follower's side of a replicated partition (issue 20, item 2): a connection to the partition's leader,
authenticated by the cluster secret, over which it asks for the records it lacks and stores each batch with the
leader's seqs (never delivering them: only a leader delivers), answering what it holds durably. A new batch
comes as the leader's log record (`ReplicaLog`), appended as it came once its checksum and first seq are checked;
what a follower catches up on comes as decoded batches (`ReplicaRecords`). Each fetch names
the leader epoch it follows: a leader of another epoch refuses it (fencing, election.py). What the leader's
groups finish comes as `ReplicaAcks`: finished here too (file level), so a failover does not deliver it again.
Partition 0's followers also keep a copy of the topic's schedule of delayed messages (`ReplicaSchedule`:
schedule_sync.py). Transaction messages come as `ReplicaTx`: prepared messages stored with the leader's seqs (answered by
`ReplicaStored`), and each commit or rollback applied as the leader did it (same groups, time and reason),
answered by `ReplicaTxStored`; a promoted follower's store recovery then holds every prepared message still open.

A batch that starts past the follower's next seq (the leader's older segments were finished and deleted) moves
the follower on to it; one it already holds is skipped. The connection is opened again (with backoff) whenever
it ends, from the follower's next seq.
"""

from __future__ import annotations

import asyncio
import bisect
import functools
import logging
import os
from collections.abc import Callable

from broker_core import protocol as p
from broker_core.storage.store import StoredMessage, batch_record_seq, scan_records

log = logging.getLogger("broker_core.replication")


class _Link(asyncio.Protocol):
    def __init__(self, on_event: Callable[[p.Event], None], on_lost: Callable[[], None]):
        self.proto = p.Connection(p.CLIENT)
        self.transport: asyncio.Transport | None = None
        self.on_event = on_event
        self.on_lost = on_lost

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.proto.receive_data(data)
        while True:
            event = self.proto.next_event()
            if event is p.NEED_DATA:
                return
            self.on_event(event)

    def connection_lost(self, exc) -> None:
        self.on_lost()

    def send(self, event: p.Event) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(p.encode_frame(event))


class PartitionFollower:
    def __init__(self, topic: str, partition: int, store, node_id: str, leader: Callable[[], tuple[str, int] | None],
                 secret: str, heartbeat_s: float = 1.0, epoch: Callable[[], int] = lambda: 0):
        self.topic = topic
        self.partition = partition
        self.store = store
        self.node_id = node_id
        self.leader = leader  # (host, port) of the partition's leader now, None while unknown
        self.secret = secret
        self.epoch = epoch  # the leader epoch this follower follows (/partition-state): sent with each fetch
        self.on_diverged: Callable[[], None] = lambda: None  # the leader refused our copy: emptied by the owner
        self.heartbeat_s = heartbeat_s
        self.link: _Link | None = None
        self.task: asyncio.Task | None = None
        self.stopped = False
        self.stored_batches = 0
        self.finished = 0  # (message, group) pairs finished here because the leader's group did
        self.records = 0  # batches appended as the leader's log record (ReplicaLog)
        self.tx_ended = 0  # transaction ends applied as the leader's (ReplicaTx)
        self.connected = False
        # partition 0 of a replicated topic: the ops of its delayed messages' schedule (schedule_sync.ScheduleFollowing)
        self.schedule = None

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self._run(), name=f"follow-{self.topic}-{self.partition}")

    def stop(self) -> None:
        self.stopped = True
        if self.task is not None:
            self.task.cancel()
        if self.link is not None and self.link.transport is not None:
            self.link.transport.close()

    async def _run(self) -> None:
        delay = 0.05
        loop = asyncio.get_running_loop()
        while not self.stopped:
            address = self.leader()
            lost = loop.create_future()
            if address is not None:
                try:
                    _, link = await asyncio.wait_for(loop.create_connection(
                        functools.partial(_Link, self._on_event, functools.partial(_settle, lost)), *address), 5)
                except (OSError, TimeoutError) as exc:
                    log.debug("follower of %s/%d: leader %s unreachable: %s", self.topic, self.partition, address, exc)
                else:
                    self.link = link
                    link.send(p.Hello(p.PROTOCOL_VERSION, self.node_id, p.REPLICA_APP, self.secret,
                                      int(self.heartbeat_s * 1000)))
                    link.send(p.ReplicaFetch(self.topic, self.partition, self.store.next_seq, self.epoch(),
                                             log_epoch(self.store)))
                    self.connected, delay = True, 0.05
                    while not lost.done():
                        await asyncio.wait([lost], timeout=self.heartbeat_s)
                        link.send(p.Ping())
                    self.connected = False
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)

    def _on_event(self, event: p.Event) -> None:
        if type(event) is p.ReplicaLog or type(event) is p.ReplicaRecords:
            if log_epoch(self.store) != self.epoch():  # (the first, maybe empty, says the fetch was accepted)
                set_log_epoch(self.store, self.epoch())
            if type(event) is p.ReplicaLog:
                self._store_record(event)
            else:
                for batch in event.batches:
                    self._store(batch)
        elif type(event) is p.ReplicaTx:
            for op in event.ops:
                if op[0] == "prepare":
                    self._store_prepared(*op[1:5])
                else:
                    self._end_tx(*op[1:8])
        elif type(event) is p.ReplicaAcks:
            self._finish(event.group, event.seqs)
        elif type(event) is p.ReplicaSchedule:
            if self.schedule is not None:
                self.schedule.on_ops(event.ops, self.link)
        elif type(event) is p.Ping:
            self.link.send(p.Pong())
        elif type(event) is p.Error and event.code_name == p.E_REPLICA_DIVERGED:
            log.warning("follower of %s/%d: %s", self.topic, self.partition, event.message)
            self.stop()
            self.on_diverged()
        elif type(event) is p.Error:
            # e.g. not_leader: the leader has not seen the placement (or the topic) yet. The link is closed, so
            # `_run` connects again with backoff and asks anew, rather than waiting on a refused fetch for good.
            log.warning("follower of %s/%d: the leader refused: %s %s; asking again", self.topic, self.partition,
                        event.code_name, event.message)
            if self.link is not None and self.link.transport is not None:
                self.link.transport.close()

    def _store(self, batch: list) -> None:
        first_seq, app_id, received_ms, arrays, groups = batch[:5]
        store = self.store
        if first_seq + len(arrays) <= store.next_seq:
            return  # held already
        if first_seq > store.next_seq:
            store.next_seq = first_seq  # the leader no longer holds what came before: finished and deleted there
        elif first_seq < store.next_seq:  # partly held: keep the rest
            skip = store.next_seq - first_seq
            arrays, groups = arrays[skip:], groups[skip:]
        store.append(app_id, received_ms, arrays, [tuple(g) for g in groups],
                     self._answer(store.next_seq + len(arrays) - 1))

    def _store_record(self, ev: p.ReplicaLog) -> None:
        """A new batch as the leader's log record: appended as it came when it starts at our next seq (or past
        it); decoded and stored as a batch otherwise (partly held, or a store that writes no records). A record
        that is not whole and intact, or not of the seq it claims, ends the link: asked again from our next seq."""
        store = self.store
        if ev.first_seq + ev.count <= store.next_seq:
            return  # held already
        if batch_record_seq(ev.record) != ev.first_seq or len(ev.groups) != ev.count:
            log.error("follower of %s/%d: a damaged record from the leader (seq %d): asking again", self.topic,
                      self.partition, ev.first_seq)
            if self.link is not None and self.link.transport is not None:
                self.link.transport.close()
            return
        append_record = getattr(store, "append_record", None)
        if ev.first_seq < store.next_seq or append_record is None:
            records, _ = scan_records(ev.record)
            self._store(records[0][1])
            return
        store.next_seq = ev.first_seq  # (past ours: the leader no longer holds what came before, as in _store)
        self.records += 1
        append_record(ev.count, ev.groups, ev.record, self._answer(ev.first_seq + ev.count - 1))

    def _store_prepared(self, first_seq: int, app_id, received_ms: int, arrays: list) -> None:
        """Prepared messages, stored with the leader's seqs (and held as prepared here: a failover's new leader
        back-checks them or gets their end)."""
        store = self.store
        if first_seq < store.next_seq:
            return  # held already (a prepare is one record: never partly)
        store.next_seq = first_seq  # (past ours: the leader no longer holds what came before, as in _store)
        store.prepare(app_id, received_ms, arrays, None, self._answer(first_seq + len(arrays) - 1))

    def _end_tx(self, seq: int, message_id: str, commit: bool, groups: list, now_ms: int, reason: str,
                number: int) -> None:
        """The leader committed (to `groups`) or rolled back the prepared message at `seq`: the same here, answered
        with `number` once durable. One not held as prepared here is skipped (answered too)."""
        link = self.link

        def done(exc: BaseException | None) -> None:
            if exc is None and number and link is not None:
                link.send(p.ReplicaTxStored(self.topic, self.partition, number))

        entry = self.store.tx.get(message_id)
        if entry is None or entry.state != p.TX_PREPARED or entry.message.seq != seq:
            done(None)
            return
        self.tx_ended += 1
        self.store.end_tx(entry, commit, tuple(groups), now_ms, reason, done)

    def _answer(self, through: int) -> Callable[[BaseException | None], None]:
        """What runs once the store holds a batch durably: tell the leader (over the link it came by)."""
        link = self.link

        def done(exc: BaseException | None) -> None:
            if exc is None and link is not None:
                self.stored_batches += 1
                link.send(p.ReplicaStored(self.topic, self.partition, through))
        return done

    def _finish(self, group: str, seqs: list) -> None:
        """The leader's group finished these seqs: finish them here too (the file level: its segments say which
        group still owes what; an ack for a seq not held, or no longer owed, is skipped)."""
        segments = [s for s in getattr(self.store, "segments", ()) if not s.deleted]
        bases = [s.base for s in segments]
        done = []
        for seq in seqs:
            i = bisect.bisect_right(bases, seq) - 1
            if i < 0 or seq >= self.store.next_seq:
                continue
            seg = segments[i]
            at = seq - seg.base
            if at < len(seg.owing) and seg.owing[at]:
                done.append(StoredMessage(seq, [], None, 0, (), segment=seg))
        if done:
            self.store.finish_many(done, group)
            self.finished += len(done)

    def stats(self) -> dict:
        return {"leader": str(self.leader()), "epoch": self.epoch(), "connected": self.connected,
                "next_seq": self.store.next_seq, "finished": self.finished, "records": self.records,
                "tx_ended": self.tx_ended,
                "schedule": self.schedule.stats() if self.schedule is not None else None}


EPOCH_FILE = "leader-epoch"  # in a partition's folder: the epoch whose leader its copy came from last
DIVERGED_MARK = "diverged"  # in a partition's folder: its leader refused the copy; emptied at the next start


def log_epoch(store) -> int:
    """The leader epoch this partition's copy came from last (0: unknown, e.g. written before elections)."""
    cached = getattr(store, "log_epoch", None)
    if cached is None:
        folder = getattr(store, "dir", None)
        try:
            cached = int((folder / EPOCH_FILE).read_text()) if folder is not None else 0
        except (OSError, ValueError):
            cached = 0
        store.log_epoch = cached
    return cached


def set_log_epoch(store, epoch: int) -> None:
    """From now on this copy comes from `epoch`'s leader (written before anything of that epoch is stored)."""
    store.log_epoch = epoch
    folder = getattr(store, "dir", None)
    if folder is not None:
        tmp = folder / (EPOCH_FILE + ".tmp")
        tmp.write_text(str(epoch))
        os.replace(tmp, folder / EPOCH_FILE)


def _settle(future: asyncio.Future) -> None:
    if not future.done():
        future.set_result(None)
