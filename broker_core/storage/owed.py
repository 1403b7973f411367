"""What a group is owed, in compact form (issue 20: the backlog on disk).

A group does not hold its backlog's messages: it holds a position in the topic's log (the next seq it has not
taken into memory) and, above it, the seqs it has already finished (acked, dead-lettered, skipped) as sorted
runs. Recovery rebuilds both from the ack files (`GroupStart`); the group reads the rest from the log when it
needs it (`broker_core.storage.file_reader`).
"""

from __future__ import annotations

from array import array
from bisect import bisect_right
from collections.abc import Callable, Iterator


class SeqRuns:
    """A set of seqs kept as sorted, disjoint half-open runs [start, end): compact when the seqs come in runs
    (acks mostly do), and cheap to add to in increasing order and to drop from below."""

    __slots__ = ("starts", "ends")

    def __init__(self) -> None:
        self.starts = array("q")
        self.ends = array("q")

    def add(self, seq: int) -> None:
        """Add a seq not below any seq added before (recovery adds them in log order)."""
        ends = self.ends
        if ends and seq <= ends[-1]:
            if seq == ends[-1]:
                ends[-1] = seq + 1
            elif seq < self.starts[-1]:
                raise ValueError(f"seq {seq} added below the runs ({self.starts[-1]}..)")
            return
        self.starts.append(seq)
        ends.append(seq + 1)

    def __contains__(self, seq: int) -> bool:
        i = bisect_right(self.starts, seq) - 1
        return i >= 0 and seq < self.ends[i]

    def __len__(self) -> int:
        return sum(e - s for s, e in zip(self.starts, self.ends, strict=True))

    def __bool__(self) -> bool:
        return bool(self.starts)

    def runs(self) -> int:
        return len(self.starts)

    def drop_below(self, seq: int) -> None:
        """Forget every seq below `seq` (the group's position passed them)."""
        i = bisect_right(self.ends, seq)
        if i:
            del self.starts[:i]
            del self.ends[:i]
        if self.starts and self.starts[0] < seq:
            self.starts[0] = seq


class GroupStart:
    """A group's position after recovery: the first seq it still owes (`start`), the seqs above it it already
    finished (`finished`), how many it owes from `start` on in the log (`owed`) and when the first of them was
    received (`head_ms`)."""

    __slots__ = ("start", "finished", "owed", "head_ms")

    def __init__(self) -> None:
        self.start: int | None = None
        self.finished = SeqRuns()
        self.owed = 0
        self.head_ms: int | None = None

    def saw(self, seq: int, received_ms: int, done: bool) -> None:
        """A message owed to the group at publish, in log order: `done` if the group finished it."""
        if done:
            if self.start is not None:
                self.finished.add(seq)
            return
        if self.start is None:
            self.start, self.head_ms = seq, received_ms
        self.owed += 1


class Recovered:
    """What a file store's recovery hands the topic: each group's position (`starts`), the messages owed that live
    in memory (`in_memory`: committed transaction messages, with the groups that still owe them) and the end of the
    log (`end`: the next seq). Iterating it reads every owed message from the log (tests and tools; the broker
    uses the positions)."""

    def __init__(self, read_all: Callable[[Recovered], Iterator[tuple]]):
        self.starts: dict[str, GroupStart] = {}
        self.in_memory: list[tuple] = []
        self.end = 1
        self._read_all = read_all

    def start(self, group: str) -> GroupStart:
        start = self.starts.get(group)
        if start is None:
            start = self.starts[group] = GroupStart()
        return start

    def owed_groups(self, seq: int, groups: tuple[str, ...]) -> tuple[str, ...]:
        """Of the groups a log message was owed to at publish, those that still owe it."""
        out = []
        for g in groups:
            s = self.starts.get(g)
            if s is not None and s.start is not None and seq >= s.start and seq not in s.finished:
                out.append(g)
        return tuple(out)

    def __iter__(self) -> Iterator[tuple]:
        return self._read_all(self)
