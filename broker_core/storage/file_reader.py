"""Reading a group's messages back from a file-stored topic's log (issue 20: the backlog on disk).

A group holds no message bodies for its backlog: when its window of messages in memory runs low it asks the
store for the next ones it is owed from its position on (`read_owed`), and the store reads them here, in its
executor (never on the event loop). A segment keeps a sparse index of where its records start (a (first seq,
offset) pair every `INDEX_EVERY` bytes), so a read parses at most that much before the first message it wants;
a group also hands back the place its last read stopped (`ReadHint`), so a drain reads each record once.
"""

from __future__ import annotations

import os
import zlib
from bisect import bisect_right
from collections.abc import Iterator

import msgpack

from broker_core.protocol import M_BODY
from broker_core.storage.store import (
    KIND_BATCH,
    KIND_REDRIVE,
    MAX_RECORD,
    RECORD_HEADER,
    StoredMessage,
)

INDEX_EVERY = 256 * 1024  # bytes of log between two entries of a segment's sparse index
CHUNK = 1024 * 1024  # bytes read from a segment at a time


def iter_records(data, start: int = 0) -> Iterator[tuple[int, int, int, list]]:
    """The intact records of record-file bytes from `start`: (offset, end, kind, payload); stops at the first
    torn or corrupt one."""
    view = memoryview(data)
    pos, size = start, len(data)
    header = RECORD_HEADER.size
    while pos + header <= size:
        length, crc, kind = RECORD_HEADER.unpack_from(view, pos)
        end = pos + header + length
        if length > MAX_RECORD or end > size:
            return
        body = view[pos + header:end]
        if zlib.crc32(body, zlib.crc32(bytes((kind,)))) != crc:
            return
        try:
            payload = msgpack.unpackb(body, raw=False, use_list=True)
        except Exception:  # a checksum collision on garbage; treat as corrupt
            return
        yield pos, end, kind, payload
        pos = end


def iter_file_records(path, offset: int) -> Iterator[tuple[int, int, int, list]]:
    """The records of a log file from `offset` on (absolute offsets), read a chunk at a time; a file that is gone
    (its segment was deleted: nothing in it was owed any more) has none."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return
    try:
        buf, base = b"", offset
        while True:
            chunk = os.pread(fd, max(CHUNK, _wanted(buf)), base + len(buf))
            if not chunk:
                return
            buf = buf + chunk if buf else chunk
            used = 0
            for pos, end, kind, payload in iter_records(buf):
                used = end
                yield base + pos, base + end, kind, payload
            buf, base = buf[used:], base + used
    finally:
        os.close(fd)


def _wanted(buf: bytes) -> int:
    """Bytes to read next so that the record `buf` starts with is whole."""
    if len(buf) < RECORD_HEADER.size:
        return CHUNK
    length = RECORD_HEADER.unpack_from(buf, 0)[0]
    return min(MAX_RECORD, RECORD_HEADER.size + length) - len(buf) + CHUNK


class ReadHint:
    """Where a group's last read stopped: the seq it reached and the offset of the record holding it."""

    __slots__ = ("seq", "base", "offset")

    def __init__(self, seq: int, base: int, offset: int):
        self.seq, self.base, self.offset = seq, base, offset


class ReadResult:
    """What a read found: the messages (in seq order), the seq it examined up to (`next_seq`: every seq below it
    in the range was looked at), the received time of the first owed message it left (`next_ms`, None when it
    left none it saw) and where to resume (`hint`)."""

    __slots__ = ("messages", "next_seq", "next_ms", "hint", "bytes")

    def __init__(self, messages, next_seq, next_ms, hint, size):
        self.messages, self.next_seq, self.next_ms, self.hint, self.bytes = messages, next_seq, next_ms, hint, size


def read_owed(segments: list[tuple], group: str, start: int, end: int, max_count: int, max_bytes: int,
              hint: ReadHint | None) -> ReadResult:
    """The messages owed to `group` at publish with seq in [start, end), from the first, at most `max_count` of
    them and about `max_bytes` of bodies (one at least). `segments`: (segment, base, index) of the topic's
    segments in order, snapshotted on the loop thread (`index`: its (first seq, offset) pairs)."""
    out: list[StoredMessage] = []
    size = 0
    for i, (seg, base, index) in enumerate(segments):
        upper = segments[i + 1][1] if i + 1 < len(segments) else None
        if upper is not None and upper <= start:
            continue
        if base >= end:
            break
        offset = 0
        if hint is not None and hint.base == base and hint.seq == start:
            offset = hint.offset
        elif index:
            j = bisect_right(index, (start, float("inf"))) - 1
            offset = index[j][1] if j >= 0 else 0
        for pos, _, kind, payload in iter_file_records(seg.log_path, offset):
            if kind == KIND_BATCH:
                first, app_id, received_ms, arrays, groups = payload[:5]
                app_ids = None
            elif kind == KIND_REDRIVE:
                first, received_ms, owner, entries = payload[:4]
                arrays, app_ids, app_id = [e[2] for e in entries], [e[1] for e in entries], None
                groups = [(owner,)] * len(entries)
            else:
                continue  # a prepared message is owed from its commit (the topic holds it in memory); no message
            n = len(arrays)
            if first + n <= start:
                continue
            last_list = last_tuple = None
            for k in range(max(0, start - first), n):
                seq = first + k
                if seq >= end:
                    return ReadResult(out, end, None, None, size)
                owners = groups[k]
                if group not in owners:
                    continue
                if len(out) >= max_count or (out and size >= max_bytes):
                    return ReadResult(out, seq, received_ms, ReadHint(seq, base, pos), size)
                if owners != last_list:  # one tuple for a run of messages owed to the same groups
                    last_list, last_tuple = owners, tuple(owners)
                fields = arrays[k]
                out.append(StoredMessage(seq, fields, app_ids[k] if app_ids else app_id, received_ms, last_tuple,
                                         seg))
                size += len(fields[M_BODY])
    return ReadResult(out, end, None, None, size)
