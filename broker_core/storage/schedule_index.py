"""The schedule store's index files by time (issue 21 item 3): minute files near now, hour files further ahead.

A delayed message's index entry (`storage.schedule.pack_index`) goes to the file of its one-minute bucket
(`<minute>.idx`) when its hour starts within `split_ahead_ms` (two hours) of now, else to the file of its hour
(`<hour>.hidx`, the same entries): a month of messages due at every minute is ~720 hour files rather than
~43,200 minute files (each fsynced by the index sync and at a stop when written to). Shortly before an hour comes
(`due`, from the store's tick) or when one of its minutes is loaded (`ensure_split`, whichever is first), its hour
file is split: its entries are appended to their minute files, those are fsynced, then the hour file goes. A crash
in between leaves both: the next split appends the entries again, and an entry indexed twice is loaded once
(entries are named by their place in the log). Writes and splits hold one lock, so an entry is either in its hour
file before that hour is split, or in its minute file.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable
from pathlib import Path

from broker_core.storage.fsync import fsync_dir
from broker_core.storage.schedule import BUCKET_MS, bucket_of, pack_index, unpack_index

HOUR_MS = 3_600_000
MINUTES = HOUR_MS // BUCKET_MS  # one-minute buckets in an hour
SPLIT_AHEAD_MS = 2 * HOUR_MS

Entry = tuple[int, int, int, int]  # due_ms, segment, offset, length


def hour_of(due_ms: int) -> int:
    return due_ms // HOUR_MS


class HourIndex:
    """Which index file an entry goes to, the hour files not split yet, and their splitting (executor threads)."""

    def __init__(self, directory: Path, append: Callable[[str, bytes], None], split_ahead_ms: int = SPLIT_AHEAD_MS):
        self.dir = Path(directory)
        self._dir = str(self.dir)
        self._append = append  # append bytes to a file (and mark it for the next index sync)
        self.split_ahead_ms = split_ahead_ms
        self._lock = threading.Lock()
        self.pending: set[int] = set()  # hours with an hour file not split yet
        self._split: set[int] = set()  # hours split since the start: their entries go to minute files
        self.splits = 0

    def recover(self) -> dict[int, list[Entry]]:
        """The hour files on disk (not split yet): their entries by minute bucket (the store cut torn tails off)."""
        by_bucket: dict[int, list[Entry]] = {}
        for path in self.dir.glob("*.hidx"):
            hour = int(path.stem)
            self.pending.add(hour)
            for entry in unpack_index(path.read_bytes(), hour * MINUTES):
                by_bucket.setdefault(bucket_of(entry[0]), []).append(entry)
        return by_bucket

    def write(self, entries: Iterable[Entry], now_ms: int) -> None:
        """Append the entries to their index files: an hour file for an hour not split and not near, else the
        minute file."""
        files: dict[str, list[bytes]] = {}
        with self._lock:
            for due_ms, segment, offset, length in entries:
                hour = hour_of(due_ms)
                if hour not in self._split and hour * HOUR_MS >= now_ms + self.split_ahead_ms:
                    self.pending.add(hour)
                    path, packed = f"{self._dir}/{hour}.hidx", pack_index(due_ms, hour * MINUTES, segment, offset,
                                                                             length)
                else:
                    bucket = bucket_of(due_ms)
                    path, packed = f"{self._dir}/{bucket}.idx", pack_index(due_ms, bucket, segment, offset, length)
                files.setdefault(path, []).append(packed)
            for path, packed in files.items():
                self._append(path, b"".join(packed))

    def due(self, now_ms: int) -> list[int]:
        """Hours to split now (they start within `split_ahead_ms`)."""
        with self._lock:
            return sorted(h for h in self.pending if h * HOUR_MS < now_ms + self.split_ahead_ms)

    def ensure_split(self, bucket: int) -> None:
        """Before a minute bucket is loaded: its hour's entries are in the minute files."""
        self.split(bucket // MINUTES)

    def split(self, hour: int) -> None:
        """Move an hour file's entries to their minute files (fsynced), then delete it; from now on the hour's
        entries go to minute files."""
        with self._lock:
            self._split.add(hour)
            if hour not in self.pending:
                return
            path = self.dir / f"{hour}.hidx"
            try:
                data = path.read_bytes()
            except FileNotFoundError:
                data = b""
            files: dict[str, list[bytes]] = {}
            for due_ms, segment, offset, length in unpack_index(data, hour * MINUTES):
                bucket = bucket_of(due_ms)
                files.setdefault(f"{self._dir}/{bucket}.idx", []).append(
                    pack_index(due_ms, bucket, segment, offset, length))
            for name, packed in files.items():
                self._append(name, b"".join(packed))
                fd = os.open(name, os.O_RDONLY)
                try:
                    os.fsync(fd)  # durable before the hour file goes
                finally:
                    os.close(fd)
            if files:
                fsync_dir(self.dir)
            path.unlink(missing_ok=True)
            self.pending.discard(hour)
            self.splits += 1
