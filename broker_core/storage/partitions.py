"""A topic's partitions on one broker, as one store (issue 20).

Each partition this broker holds is a store of its own (`<topic folder>/p<N>/` for the file level) whose seqs
start at the partition's base (`partition_base`): seqs never collide between the partitions of a topic, so the
topic's groups, acks and consumers work with one seq space and `PartitionedStore` finds a message's partition
from its seq alone. The groups see one `TopicStore` (this one): nothing above the store changes.

Messages go to the partition they were published to (`append_to`), and so do prepared (transaction) messages,
whose commit or rollback goes to the partition that holds them (replicated with it). Dead letters, re-drives and
imported dead letters are kept by the topic's home partition on this broker (its lowest partition): a dead letter of another partition is copied there, and finished in its own partition once the copy
is durable.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path

from broker_core.storage.fsync import fsync_dir
from broker_core.storage.schedule import SCHEDULE_FOLDER
from broker_core.storage.store import DeadLetter, DoneCallback, StoredMessage, TopicStore, TxEntry

PARTITION_BITS = 40  # a partition holds up to 2**40 seqs; the seq says which partition a message is in


def partition_base(partition: int) -> int:
    """The first seq of a partition (partition 0 starts at 1, as a topic of one partition always did)."""
    return (partition << PARTITION_BITS) or 1


def partition_of(seq: int) -> int:
    return seq >> PARTITION_BITS


def partition_dir(topic_dir: Path, partition: int) -> Path:
    return topic_dir / f"p{partition}"


def adopt_legacy_folder(topic_dir: Path) -> bool:
    """A topic folder of a broker from before partitions holds its segments directly: move them into `p0/` (its
    partition 0). Each entry moves by a rename, so a crash in between leaves the rest to the next start.
    Returns whether anything moved."""
    if not topic_dir.is_dir():
        return False
    entries = [e for e in topic_dir.iterdir() if not (e.is_dir() and e.name[:1] == "p" and e.name[1:].isdigit())
               and e.name.split(".")[0] != SCHEDULE_FOLDER]  # the topic's delayed messages stay beside its partitions
    if not entries:
        return False
    target = partition_dir(topic_dir, 0)
    target.mkdir(exist_ok=True)
    for entry in entries:
        os.rename(entry, target / entry.name)
    fsync_dir(target)
    fsync_dir(topic_dir)
    return True


class PartitionedStore:
    """The partitions of one topic held by this broker, behind the `TopicStore` contract."""

    def __init__(self, directory: Path, stores: dict[int, TopicStore], *, durable: bool, spare: TopicStore,
                 following: set[int] = frozenset(), single: bool = False):
        """`single`: the topic is one partition held by every broker (no placement): its groups read their backlog
        back from the partition's log (`readable`). A placed topic's groups (file level) have a position in each
        partition's log (`partitions_readable`: delivery/backlog.py `PartitionedBacklog`)."""
        """`spare`: the home while no partition of the topic is placed here (a memory store that stays empty:
        consumers may subscribe on a broker that holds no partition of their topic)."""
        self.dir = directory
        self.stores = dict(sorted(stores.items()))
        self.durable = durable
        self.spare = spare
        self.following = set(following)  # partitions this broker follows: recovered, never delivered here
        self.single = single
        self._last: TopicStore | None = None  # the store of the last append (its `last_batch`)
        # (partition, group, seqs) each time groups finish messages: a replicated partition's leader sends them on
        self.on_finished: Callable[[int, str, list[int]], None] | None = None

    # -- partitions --------------------------------------------------------------------------

    @property
    def home(self) -> TopicStore:
        return next(iter(self.stores.values()), self.spare)

    @property
    def partitions(self) -> list[int]:
        return list(self.stores)

    def part(self, seq: int) -> TopicStore:
        return self.stores.get(partition_of(seq)) or self.home

    def add(self, partition: int, store: TopicStore):
        """A partition placed here later: recover it and return what it owes (for `Topic.take_owed`): its groups'
        positions (`Recovered`, file level), else the owed messages with their groups."""
        owed = store.recover()  # the groups' positions in its log (file level), else its owed messages
        if not self.partitions_readable:
            owed = list(owed)
        self.stores[partition] = store
        self.stores = dict(sorted(self.stores.items()))
        return owed

    @property
    def next_seq(self) -> int:
        return self.home.next_seq

    @next_seq.setter
    def next_seq(self, value: int) -> None:
        self.home.next_seq = value

    # -- messages ------------------------------------------------------------------------------

    @property
    def readable(self) -> bool:
        return self.single and len(self.stores) == 1 and getattr(self.home, "readable", False)

    def read_owed(self, *args) -> None:
        self.home.read_owed(*args)  # (only when `readable`: one partition)

    @property
    def partitions_readable(self) -> bool:
        """A placed topic at the file level: each group reads its backlog back from each partition's log."""
        return self.durable and not self.single

    @property
    def last_batch(self) -> bytes | None:
        return getattr(self._last, "last_batch", None)

    def recover(self):
        """What the partitions led here owe: the one partition's recovery as it is (its groups' positions, when
        `readable`), each partition's recovery (`RecoveredParts`, when `partitions_readable`), else every owed
        message read back (a follower's partitions owe nothing here)."""
        if self.readable and not self.following:
            return self.home.recover()
        owed = RecoveredParts() if self.partitions_readable else []
        for pid, store in self.stores.items():
            mine = store.recover()
            if pid not in self.following:
                if self.partitions_readable:
                    owed.parts.append(mine)
                else:
                    owed += list(mine)  # (a file store's recovery reads its owed messages back when iterated)
        return owed

    def append(self, app_id, received_ms, arrays, groups, on_done):
        self._last = self.home
        return self.home.append(app_id, received_ms, arrays, groups, on_done)

    def append_to(self, partition: int, app_id, received_ms, arrays, groups, on_done):
        self._last = self.stores[partition]
        return self._last.append(app_id, received_ms, arrays, groups, on_done)

    def finish(self, message: StoredMessage, group: str) -> None:
        self.part(message.seq).finish(message, group)
        if self.on_finished is not None:
            self.on_finished(partition_of(message.seq), group, [message.seq])

    def finish_many(self, messages: list[StoredMessage], group: str) -> None:
        if len(self.stores) == 1 and self.on_finished is None:
            self.home.finish_many(messages, group)
            return
        by_part: dict[int, list[StoredMessage]] = {}
        for m in messages:
            by_part.setdefault(partition_of(m.seq), []).append(m)
        for pid, some in by_part.items():
            (self.stores.get(pid) or self.home).finish_many(some, group)
            if self.on_finished is not None:
                self.on_finished(pid, group, [m.seq for m in some])

    def dead_letter(self, message: StoredMessage, group: str, cause: str, attempts: int, now_ms: int,
                    finish: bool = True) -> None:
        store = self.part(message.seq)
        if store is self.home or not finish:
            self.home.dead_letter(message, group, cause, attempts, now_ms, finish)
            return
        self.home.dead_letter(message, group, cause, attempts, now_ms, finish=False)

        def copied(exc: BaseException | None) -> None:
            if exc is None:  # the copy is durable: the message may be finished in its own partition
                store.finish(message, group)

        self.home.sync_finishes(copied)

    # -- kept by the home partition ------------------------------------------------------------

    @property
    def dead_index(self):
        return self.home.dead_index

    @property
    def tx(self) -> Mapping[str, TxEntry]:
        """The transaction messages of the partitions led here (a follower's are its leader's to end)."""
        return _Merged([s.tx for s in self._led()])

    @property
    def prepared(self) -> Mapping[str, TxEntry]:
        return _Merged([s.prepared for s in self._led()])

    def _led(self) -> list[TopicStore]:
        return [s for pid, s in self.stores.items() if pid not in self.following] or [self.spare]

    def dead_letters(self, group: str, limit: int) -> list[DeadLetter]:
        return self.home.dead_letters(group, limit)

    def dead_letter_count(self, group: str) -> int:
        return self.home.dead_letter_count(group)

    def prepare(self, app_id, received_ms, arrays, conn_no, on_done, partition: int | None = None):
        """Prepared messages, stored in `partition` (None, or not held here: the home partition)."""
        store = self.stores.get(partition, self.home) if partition is not None else self.home
        return store.prepare(app_id, received_ms, arrays, conn_no, on_done)

    def end_tx(self, entry: TxEntry, commit: bool, groups, now_ms: int, reason: str, on_done) -> None:
        self.part(entry.message.seq).end_tx(entry, commit, groups, now_ms, reason, on_done)

    def redrive(self, group, dead, received_ms, on_done, superseded=()):
        return self.home.redrive(group, dead, received_ms, on_done, superseded)

    def dead_letter_bodies(self, group: str, dead: list[DeadLetter]) -> list[DeadLetter]:
        return self.home.dead_letter_bodies(group, dead)

    def drop_dead_letters(self, group: str) -> None:
        self.home.drop_dead_letters(group)

    def import_dead_letters(self, group: str, dead: list[DeadLetter], on_done: DoneCallback) -> None:
        self.home.import_dead_letters(group, dead, on_done)

    def delete_dead_letters(self, group: str, dead: list[DeadLetter], on_done: DoneCallback) -> None:
        self.home.delete_dead_letters(group, dead, on_done)

    def sync_finishes(self, on_done: DoneCallback) -> None:
        _all_done(list(self.stores.values()) or [self.spare], lambda s, cb: s.sync_finishes(cb), on_done)

    # -- life of the topic ---------------------------------------------------------------------

    @property
    def held(self) -> int:
        return sum(s.held for s in self.stores.values())

    @property
    def busy(self) -> bool:
        return any(getattr(s, "busy", False) for s in self.stores.values())

    @property
    def idle(self) -> bool:
        return all(s.idle for s in self.stores.values())

    def discard(self) -> None:
        for s in self.stores.values():
            s.discard()

    def tick(self, now: float) -> None:
        for s in self.stores.values():
            s.tick(now)

    def close(self) -> None:
        for s in self.stores.values():
            s.close()

    def stats(self) -> dict:
        stats = dict(self.home.stats())
        if len(self.stores) > 1:
            every = [s.stats() for s in self.stores.values()]
            for key, value in stats.items():
                if isinstance(value, int) and not isinstance(value, bool) and key != "next_seq":
                    stats[key] = sum(st.get(key, 0) for st in every)
        stats["partitions"] = self.partitions
        return stats


class RecoveredParts:
    """The recoveries of a placed topic's partitions led here, one each (`parts`: each a file store's `Recovered`,
    its groups' positions in that partition's log). Iterating it reads every owed message back (tests, tools)."""

    def __init__(self) -> None:
        self.parts: list = []

    def __iter__(self):
        for part in self.parts:
            yield from part


def _all_done(stores: list, start: Callable[[TopicStore, DoneCallback], None], on_done: DoneCallback) -> None:
    """Start an operation on every store; `on_done` once all finished (with the first error, if any)."""
    waiting = [len(stores)]
    errors: list[BaseException] = []

    def one(exc: BaseException | None) -> None:
        if exc is not None:
            errors.append(exc)
        waiting[0] -= 1
        if waiting[0] == 0:
            on_done(errors[0] if errors else None)

    for store in stores:
        start(store, one)


class _Merged(Mapping):
    """Several partitions' transaction entries by message id, read as one mapping (ids are unique per topic)."""

    def __init__(self, maps: list[Mapping]) -> None:
        self.maps = maps

    def __getitem__(self, key):
        for m in self.maps:
            if key in m:
                return m[key]
        raise KeyError(key)

    def __contains__(self, key) -> bool:
        return any(key in m for m in self.maps)

    def __iter__(self):
        for m in self.maps:
            yield from m

    def __len__(self) -> int:
        return sum(len(m) for m in self.maps)

    def values(self):
        return [v for m in self.maps for v in m.values()]
