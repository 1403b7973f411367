"""Reading a file-level schedule log in order, a chunk at a time, up to a point: what a replicated topic's leader
sends a follower that (re)joins, so that its copy of the schedule holds every message still scheduled
(`broker_core.replication.schedule_sync`). Runs in the store's executor; no state of its own.

Segments are numbered 1, 2, ... and a segment whose entries were all delivered is deleted: a missing segment
below the point is skipped. A segment not written as far as it will be (the point's, or one sealed this run:
`ends` says where it ends; `FileSchedule.add` buffers writes until its next job) is waited for: the read
returns nothing and the same cursor."""

from __future__ import annotations

import os
from pathlib import Path

from broker_core.storage.schedule import KIND_SCHEDULED
from broker_core.storage.store import RECORD_HEADER, scan_records

Cursor = tuple[int, int]  # (segment, offset)


def segment_path(directory: Path, segment: int) -> Path:
    return directory / f"{segment:010d}.slog"


def read_log(directory: Path, cursor: Cursor, point: Cursor, max_bytes: int,
             ends: dict[int, int]) -> tuple[list[list], Cursor | None]:
    """The scheduled entries ([due_ms, app_id, received_ms, message array]) of about `max_bytes` of log from
    `cursor`, below `point`, and where the next read starts (None: the point is reached). `ends`: where the
    segments sealed by this process end (others: where their files end)."""
    segment, offset = cursor
    while (segment, offset) < point:
        limit = point[1] if segment == point[0] else ends.get(segment)
        if limit is not None and offset >= limit:
            segment, offset = segment + 1, 0
            continue
        want = max_bytes if limit is None else min(max_bytes, limit - offset)
        try:
            data = _read(segment_path(directory, segment), offset, want)
        except FileNotFoundError:
            if segment >= point[0]:
                return [], (segment, offset)  # not made yet: wait for the write
            segment, offset = segment + 1, 0  # every entry of it was delivered: deleted
            continue
        records, used = scan_records(data)
        if not used and len(data) >= RECORD_HEADER.size and len(data) == want:  # one record larger than the chunk
            whole = RECORD_HEADER.size + RECORD_HEADER.unpack_from(data, 0)[0]
            records, used = scan_records(_read(segment_path(directory, segment), offset, whole))
        if used:
            return [payload for kind, payload in records if kind == KIND_SCHEDULED], (segment, offset + used)
        if limit is None:
            segment, offset = segment + 1, 0  # the end of a sealed segment
            continue
        return [], (segment, offset)  # written up to here only: wait for the rest
    return [], None


def _read(path: Path, offset: int, size: int) -> bytes:
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.pread(fd, size, offset)
    finally:
        os.close(fd)
