"""A group's backlog on disk (issue 20 item 3): what it is owed and does not hold in memory.

A group of a file-stored topic holds a bounded window of its messages in memory (its lanes); the rest stays in
the topic's log. `Backlog` is the group's position in that log: the next seq it has not taken into memory
(`cursor`), the end of what is durable and owed (`end`), how many owed messages lie between (`unloaded`), and the
seqs between that it finished already (`finished`, sorted runs: after a restart, from the ack files). When the
window runs low the group reads the next messages in one batch, off the event loop (`FileStore.read_owed`).

Committed transaction messages are owed from their commit, not from their seq (an old one): while the group's
backlog is on disk they wait in `inserts` at the log position of their commit, and join the window when the
cursor passes it, so first deliveries keep the order in which messages became owed.

The window is counted in messages: at most `max_messages`, and about `max_bytes` of bodies (the limit in
messages follows the mean body size of what the group took in).

A topic placed in partitions (`storage.partitions.PartitionedStore`, file level) gives each group a
`PartitionedBacklog`: one `Backlog` per partition, each a position in its partition's own log, and one window
shared by all: a refill reads from every partition with messages on disk at once, and merges what comes back by
received time (order is kept within a partition; there is none across partitions).
"""

from __future__ import annotations

import heapq
import logging
from collections import deque
from collections.abc import Callable

from broker_core.protocol import M_BODY
from broker_core.storage.owed import GroupStart, SeqRuns
from broker_core.storage.partitions import partition_of
from broker_core.storage.store import StoredMessage

log = logging.getLogger("broker_core.group")

WINDOW_MESSAGES = 10_000
WINDOW_BYTES = 16 * 1024 * 1024


def backlog_for(store, group: str, window: tuple[int, int]) -> Backlog | PartitionedBacklog | None:
    """The group's backlog on disk when its store can read messages back (the file level: one position in one log,
    or one per partition of a placed topic), else None (the memory level keeps every owed message in memory)."""
    if getattr(store, "readable", False):
        return Backlog(store, group, store.next_seq, *window)
    if getattr(store, "partitions_readable", False):
        return PartitionedBacklog(store, group, *window)
    return None


class _Reads:
    """What waits for a backlog's read in flight (`reading`, `queued`)."""

    __slots__ = ()

    def when_idle(self, fn: Callable[[], None]) -> None:
        """Run `fn` now if no read is in flight, else once the one in flight is done (its messages taken in)."""
        if self.reading:
            self.queued.append(fn)
        else:
            fn()

    def _run_queued(self) -> None:
        while self.queued and not self.reading:
            self.queued.pop(0)()


class Backlog(_Reads):
    __slots__ = ("store", "group", "cursor", "end", "unloaded", "finished", "inserts", "head_ms", "reading",
                 "hint", "mean_size", "max_messages", "max_bytes", "closed", "loaded", "queued")

    def __init__(self, store, group: str, start: int, max_messages: int = WINDOW_MESSAGES,
                 max_bytes: int = WINDOW_BYTES):
        self.store = store
        self.group = group
        self.cursor = self.end = start
        self.unloaded = 0
        self.finished = SeqRuns()
        self.inserts: deque[tuple[int, StoredMessage]] = deque()
        self.head_ms: int | None = None  # when the first unloaded owed message was received (None: unknown)
        self.reading = False
        self.hint = None
        self.mean_size = 1024.0
        self.max_messages = max_messages
        self.max_bytes = max_bytes
        self.closed = False
        self.loaded = 0  # messages read back from the log (stats)
        self.queued: list[Callable[[], None]] = []  # what waits for the read in flight (`when_idle`)

    @property
    def on_disk(self) -> bool:
        """Some owed message is not in memory."""
        return self.cursor < self.end or bool(self.inserts)

    @property
    def limit(self) -> int:
        """Messages the group may hold waiting in memory."""
        return max(16, min(self.max_messages, int(self.max_bytes / max(self.mean_size, 1.0))))

    def on_disk_before(self, m: StoredMessage) -> bool:
        """Some owed message is on disk that a committed transaction message owed from now must come after."""
        return self.on_disk

    def on_disk_before_any(self, messages: list[StoredMessage]) -> bool:
        """Some owed message is on disk that these new ones must come after."""
        return self.on_disk

    def depth(self) -> int:
        return self.unloaded + len(self.inserts)

    def oldest_ms(self) -> int | None:
        times = [m.received_ms for _, m in self.inserts]
        if self.unloaded and self.head_ms is not None:
            times.append(self.head_ms)
        return min(times, default=None)

    def resume(self, start: GroupStart, end: int) -> None:
        """Recovery: the group owes `start.owed` messages of the log from `start.start` on."""
        self.cursor, self.end = start.start, end
        self.finished = start.finished
        self.unloaded, self.head_ms = start.owed, start.head_ms

    def took(self, messages: list[StoredMessage]) -> None:
        """Messages now owed, kept in memory (the window had room): the position moves past them."""
        self.cursor = self.end = max(self.end, messages[-1].seq + 1)
        self._observe(messages)

    def spill(self, messages: list[StoredMessage]) -> None:
        """Messages now owed, left in the log (the window is full, or older ones are still on disk)."""
        if not self.unloaded:
            self.head_ms = messages[0].received_ms
        self.end = max(self.end, messages[-1].seq + 1)
        self.unloaded += len(messages)
        self._observe(messages)

    def insert(self, m: StoredMessage) -> None:
        """A committed transaction message, owed from now: after what is on disk."""
        self.inserts.append((self.end, m))

    def _observe(self, messages: list[StoredMessage]) -> None:
        """Follow the mean body size: up at once (the window shrinks before it holds too many large bodies),
        down slowly."""
        size = sum(len(m.fields[M_BODY]) for m in messages) / len(messages)
        if size >= self.mean_size:
            self.mean_size = size
        else:
            self.mean_size += (size - self.mean_size) * min(1.0, len(messages) / 1024)

    # -- reading ------------------------------------------------------------------------------

    def read(self, room: int, on_loaded: Callable[[list[StoredMessage]], None]) -> None:
        """Read up to `room` owed messages from the cursor on; `on_loaded(messages)` (in order, committed ones
        included) on the loop thread. One read at a time."""
        self.reading = True
        max_bytes = max(1, int(self.max_bytes / 2))

        def done(result, exc) -> None:
            self.reading = False
            if self.closed:  # the group went: what was read stays on disk (the position did not move)
                self._run_queued()
                return
            if exc is not None:
                log.error("group %s: reading its backlog from the log failed (tried again at the next tick): %s",
                          self.group, exc)
                self._run_queued()
                return
            on_loaded(self._advance(result))
            self._run_queued()

        self.store.read_owed(self.group, self.cursor, self.end, room, max_bytes, self.hint, done)

    def _advance(self, result) -> list[StoredMessage]:
        """Move the position past a read: the messages the group still owes, with the committed ones due."""
        out: list[StoredMessage] = []
        finished, inserts = self.finished, self.inserts
        taken = 0
        for m in result.messages:
            while inserts and inserts[0][0] <= m.seq:
                out.append(inserts.popleft()[1])
            if finished and m.seq in finished:
                continue
            out.append(m)
            taken += 1
        self.cursor = max(self.cursor, result.next_seq)
        while inserts and inserts[0][0] <= self.cursor:
            out.append(inserts.popleft()[1])
        if finished:
            finished.drop_below(self.cursor)
        self.hint = result.hint
        self.loaded += taken
        self.unloaded = max(0, self.unloaded - taken) if self.cursor < self.end else 0
        self.head_ms = result.next_ms
        if result.messages:
            self._observe(result.messages)
        return out

    def skip(self, keep: Callable[[StoredMessage], bool], on_batch: Callable[[list[StoredMessage]], None],
             on_done: Callable[[], None]) -> None:
        """Finish without delivering the messages on disk from the cursor on while `keep` says no (a position
        reset, a dropped group): each batch goes to `on_batch`; the first message kept stops it (it stays on
        disk, at the cursor). `on_done` once stopped."""
        self.reading = True
        skipped_inserts = [m for _, m in self.inserts if not keep(m)]
        self.inserts = deque((p, m) for p, m in self.inserts if keep(m))
        if skipped_inserts:
            on_batch(skipped_inserts)

        def done(result, exc) -> None:
            if exc is not None:
                self.reading = False
                if exc is not None:
                    log.error("group %s: skipping its backlog on disk failed: %s", self.group, exc)
                on_done()
                self._run_queued()
                return
            batch = []
            stop = None
            for m in result.messages:
                if self.finished and m.seq in self.finished:
                    continue
                if keep(m):
                    stop = m
                    break
                batch.append(m)
            if stop is not None:
                self.cursor, self.head_ms, self.hint = stop.seq, stop.received_ms, None
            else:
                self.cursor, self.head_ms, self.hint = max(self.cursor, result.next_seq), result.next_ms, result.hint
            if self.finished:
                self.finished.drop_below(self.cursor)
            self.unloaded = max(0, self.unloaded - len(batch)) if self.cursor < self.end else 0
            if batch:
                on_batch(batch)
            if stop is None and self.cursor < self.end:
                self.store.read_owed(self.group, self.cursor, self.end, 4096, self.max_bytes, self.hint, done)
                return
            self.reading = False
            on_done()
            self._run_queued()

        if self.cursor < self.end:
            self.store.read_owed(self.group, self.cursor, self.end, 4096, self.max_bytes, self.hint, done)
        else:
            self.reading = False
            on_done()
            self._run_queued()



class PartitionedBacklog(_Reads):
    """A group's backlog on disk for a topic placed in partitions: a `Backlog` per partition led here (made when
    the group is first owed a message of it, or recovered), sharing one window. Reads go to every partition with
    messages on disk at once (the room shared between them) and come back as one batch, merged by received time."""

    __slots__ = ("store", "group", "parts", "max_messages", "max_bytes", "closed", "reading", "queued")

    def __init__(self, store, group: str, max_messages: int = WINDOW_MESSAGES, max_bytes: int = WINDOW_BYTES):
        self.store = store  # the PartitionedStore: `stores` maps a partition to its own store
        self.group = group
        self.parts: dict[int, Backlog] = {}
        self.max_messages = max_messages
        self.max_bytes = max_bytes
        self.closed = False
        self.reading = False
        self.queued: list[Callable[[], None]] = []

    def _part(self, seq: int) -> Backlog:
        """The backlog of the partition holding `seq`, made with its position at `seq` if it has none yet."""
        pid = partition_of(seq)
        part = self.parts.get(pid)
        if part is None:
            part = self.parts[pid] = Backlog(self.store.stores[pid], self.group, seq, self.max_messages,
                                             self.max_bytes)
        return part

    @property
    def on_disk(self) -> bool:
        return any(p.on_disk for p in self.parts.values())

    @property
    def limit(self) -> int:
        """Messages the group may hold waiting in memory (the largest mean body size of its partitions counts)."""
        mean = max((p.mean_size for p in self.parts.values()), default=1024.0)
        return max(16, min(self.max_messages, int(self.max_bytes / max(mean, 1.0))))

    @property
    def loaded(self) -> int:
        return sum(p.loaded for p in self.parts.values())

    def depth(self) -> int:
        return sum(p.depth() for p in self.parts.values())

    def oldest_ms(self) -> int | None:
        return min((t for p in self.parts.values() if (t := p.oldest_ms()) is not None), default=None)

    def resume(self, start: GroupStart, end: int) -> None:
        """Recovery of one partition (the one its first owed seq is in), also of one opened again (led here after
        being followed): the position is rebuilt, read from the partition's store as it is now."""
        part = self._part(start.start)
        part.store, part.hint = self.store.stores[partition_of(start.start)], None
        part.resume(start, end)

    def took(self, messages: list[StoredMessage]) -> None:
        for some in _by_partition(messages):
            self._part(some[0].seq).took(some)

    def spill(self, messages: list[StoredMessage]) -> None:
        for some in _by_partition(messages):
            self._part(some[0].seq).spill(some)

    def on_disk_before(self, m: StoredMessage) -> bool:
        """Its partition has owed messages on disk (a partition with none takes the message into memory)."""
        part = self.parts.get(partition_of(m.seq))
        return part is not None and part.on_disk

    def on_disk_before_any(self, messages: list[StoredMessage]) -> bool:
        """A partition of these new messages has owed messages on disk (the others' may go to memory at once)."""
        return any(self.on_disk_before(some[0]) for some in _by_partition(messages))

    def insert(self, m: StoredMessage) -> None:
        self.parts[partition_of(m.seq)].insert(m)  # (only when `on_disk_before`)

    def read(self, room: int, on_loaded: Callable[[list[StoredMessage]], None]) -> None:
        """Read up to `room` owed messages, shared between the partitions with messages on disk; `on_loaded` once
        with all of them, merged by received time. One read (of every partition) at a time."""
        parts = [p for p in self.parts.values() if p.on_disk]
        if not parts:
            return
        self.reading = True
        share, share_bytes = max(1, room // len(parts)), max(1, int(self.max_bytes / 2 / len(parts)))
        results: list[tuple[Backlog, object]] = []
        waiting = [len(parts)]

        def done(part: Backlog, result, exc) -> None:
            if exc is not None:
                log.error("group %s: reading its backlog from the log failed (tried again at the next tick): %s",
                          self.group, exc)
            else:
                results.append((part, result))
            waiting[0] -= 1
            if waiting[0]:
                return
            self.reading = False
            # Positions move only now, as what was read reaches the group: until then it is still on disk for the
            # partition's new messages (they spill behind it) and for a rescale's drain barrier (`owes_below`).
            # A group that went, or a partition led elsewhere now, leaves what was read on disk.
            got = [] if self.closed else [part._advance(result) for part, result in results if not part.closed]
            if got:
                on_loaded(list(heapq.merge(*got, key=lambda m: m.received_ms)))
            self._run_queued()

        for part in parts:
            part.store.read_owed(self.group, part.cursor, part.end, share, share_bytes, part.hint,
                                 lambda result, exc, part=part: done(part, result, exc))

    def skip(self, keep: Callable[[StoredMessage], bool], on_batch: Callable[[list[StoredMessage]], None],
             on_done: Callable[[], None]) -> None:
        """`Backlog.skip` for each partition in turn (each stops at its first message kept)."""
        self.reading = True
        parts = list(self.parts.values())

        def next_part() -> None:
            if parts:
                parts.pop(0).skip(keep, on_batch, next_part)
                return
            self.reading = False
            on_done()
            self._run_queued()

        next_part()


def _by_partition(messages: list[StoredMessage]) -> list[list[StoredMessage]]:
    """Messages in runs of one partition (a batch stored by one append is one run)."""
    if partition_of(messages[0].seq) == partition_of(messages[-1].seq):
        return [messages]
    runs: dict[int, list[StoredMessage]] = {}
    for m in messages:
        runs.setdefault(partition_of(m.seq), []).append(m)
    return list(runs.values())
