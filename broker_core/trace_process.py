"""A trace sink that writes from a child process, so writing trace files never holds the broker's GIL.

The broker side does as little per event as it can: `emit` appends one tuple, and the batch methods
(`emit_messages` for a publish batch, `emit_group` for a delivery frame, `emit_attempts` for an ack
frame's in-flight entries) append one record holding the broker's own list. A publish batch's `stored`
record names its `published` record instead of its messages (the same list: the child repeats that
record's columns). Once per `ship_interval_s`
the records become one chunk (trace_writer's CHUNK: a tuple of scalars per record, and per per-message
column the values of all records joined into one bytes object, so neither side makes a Python object
per value), pickled and written to the child's stdin through a non-blocking asyncio pipe. The child
(`python -m broker_core.trace_process DIR NODE_ID CLUSTER [parquet|jsonl] [NICE]`, at a lower priority:
`nice`, default 10) hands the chunk as it is to `ParquetTraceWriter.add_chunk` (the default), or expands
it into `JsonlTraceWriter.emit` calls (the older format). Tracing never blocks the broker: when the
child falls behind by more than `max_buffer_bytes`, chunks are dropped and counted. The child stops
(closing its open file) when its stdin closes, also after a kill -9 of the broker.
"""

from __future__ import annotations

import asyncio
import logging
import os
import pickle
import struct
import subprocess
import sys
from operator import attrgetter, itemgetter
from pathlib import Path
from time import time_ns

from broker_core.protocol import M_BODY, M_BUSINESS_ID, M_ID, M_KEY, M_TYPE
from broker_core.trace import SIZED
from broker_core.trace_writer import HAS_ATTEMPT, HAS_SIZE

log = logging.getLogger("broker_core.trace")

LENGTH = struct.Struct(">I")
FORMATS = ("parquet", "jsonl")
# what a batch record holds: StoredMessages, (seq, attempt, fields) rows, or (StoredMessage, attempt, ...) entries
MESSAGES, ROWS, ENTRIES = 0, 1, 2

_fields = attrgetter("fields")
_row_fields = itemgetter(2)
_row_attempt = itemgetter(1)
_entry_message = itemgetter(0)
_body = itemgetter(M_BODY)
_id, _type, _key, _bid = itemgetter(M_ID), itemgetter(M_TYPE), itemgetter(M_KEY), itemgetter(M_BUSINESS_ID)


class ProcessTraceSink:
    def __init__(self, directory: Path, *, node_id: str, cluster: str, ship_interval_s: float = 0.2,
                 max_buffer_bytes: int = 64 * 1024 * 1024, file_format: str = "parquet", nice: int = 10):
        if file_format not in FORMATS:
            raise ValueError(f"trace file format must be one of {FORMATS}")
        self.ship_interval_s = ship_interval_s
        self.max_buffer_bytes = max_buffer_bytes
        self.dropped = 0
        self._records: list[tuple] = []  # in the order of the steps: event tuples and batch records
        self._next = 0  # the number of the next record (numbered across chunks, as the child counts them)
        self._first = 0  # the number of the first record not shipped yet
        # id(list) -> (list, record number): message lists shipped in this chunk or the one before, which
        # a later record of the same list may name (the child keeps one chunk back)
        self._lists: dict[int, tuple[list, int]] = {}
        self._scheduled = False
        self._transport: asyncio.WriteTransport | None = None
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "broker_core.trace_process", str(directory), node_id, cluster, file_format,
             str(nice)],
            stdin=subprocess.PIPE, start_new_session=False)
        self.loop = asyncio.get_running_loop()

    async def start(self) -> ProcessTraceSink:
        self._transport, _ = await self.loop.connect_write_pipe(asyncio.BaseProtocol, self._proc.stdin)
        return self

    def emit(self, event: str, *, message_id, topic, message_type, key=None, business_id=None, app_id=None,
             client_host=None, group=None, consumer=None, attempt=None, detail=None, size=None,
             ts_us=None) -> None:
        self._records.append((event, ts_us or time_ns() // 1000, message_id, topic, message_type, key, business_id,
                              app_id, client_host, group, consumer, attempt, detail, size))
        self._next += 1
        if not self._scheduled:
            self._scheduled = True
            self.loop.call_later(self.ship_interval_s, self.ship)

    def emit_messages(self, event: str, topic: str, messages: list, *, app_id=None, client_host=None,
                      ts_us=None) -> None:
        ref = None
        if event not in SIZED:  # a record with sizes ships its own columns
            seen = self._lists.pop(id(messages), None)
            if seen is not None and seen[0] is messages:
                ref = seen[1]
        if ref is None:
            self._lists[id(messages)] = (messages, self._next)
        self._records.append((event, topic, ts_us or time_ns() // 1000, app_id, client_host, None, None,
                              messages, MESSAGES, ref))
        self._next += 1
        if not self._scheduled:
            self._scheduled = True
            self.loop.call_later(self.ship_interval_s, self.ship)

    def emit_group(self, event: str, topic: str, group: str, rows: list, *, consumer=None, client_host=None,
                   ts_us=None) -> None:
        self._records.append((event, topic, ts_us or time_ns() // 1000, None, client_host, group, consumer,
                              rows, ROWS, None))
        self._next += 1
        if not self._scheduled:
            self._scheduled = True
            self.loop.call_later(self.ship_interval_s, self.ship)

    def emit_attempts(self, event: str, topic: str, group: str, entries: list, *, consumer=None, client_host=None,
                      ts_us=None) -> None:
        self._records.append((event, topic, ts_us or time_ns() // 1000, None, client_host, group, consumer,
                              entries, ENTRIES, None))
        self._next += 1
        if not self._scheduled:
            self._scheduled = True
            self.loop.call_later(self.ship_interval_s, self.ship)

    def ship(self) -> None:
        """Send what was recorded to the child now (the timer does, `ship_interval_s` after a first record)."""
        self._scheduled = False
        records, self._records = self._records, []
        if not records:
            return
        first, self._first = self._first, self._next
        transport = self._transport
        if transport is None or transport.is_closing() or transport.get_write_buffer_size() > self.max_buffer_bytes:
            self.dropped += sum(len(r[7]) if len(r) == 10 else 1 for r in records)
            self._lists.clear()  # the child never sees these records: no later one may name them
            return
        data = pickle.dumps(columns(records, first), protocol=pickle.HIGHEST_PROTOCOL)
        transport.write(LENGTH.pack(len(data)) + data)
        if self._lists:  # keep this chunk's lists only
            self._lists = {k: v for k, v in self._lists.items() if v[1] >= first}

    def close(self) -> None:
        self.ship()
        if self._transport is not None:
            self._transport.close()
        else:
            self._proc.stdin.close()

    async def wait_closed(self, timeout: float = 10.0) -> None:
        """Wait for the child to finish writing (call after close())."""
        for _ in range(int(timeout / 0.05)):
            if self._proc.poll() is not None:
                return
            await asyncio.sleep(0.05)
        log.warning("trace writer process did not stop in %.0fs; killing it", timeout)
        self._proc.kill()


def columns(records: list[tuple], first: int = 0) -> tuple:
    """The sink's records (numbered from `first`) as one trace_writer CHUNK. Per record this costs a tuple
    and a list extension or two; per message a few C-level passes (itemgetter, join), no Python object."""
    scalars, counts, refs = [], [], []
    fields: list = []  # the message arrays (or, for emit's events, (id, type, key, business id)) in turn
    attempts, sizes = [], []
    for i, record in enumerate(records):
        if len(record) != 10:  # one event from emit()
            (event, ts_us, message_id, topic, message_type, key, business_id, app_id, client_host, group, consumer,
             attempt, detail, size) = record
            scalars.append((event, topic, ts_us, app_id, client_host, group, consumer, detail,
                            HAS_ATTEMPT | HAS_SIZE))
            counts.append(1)
            fields.append((message_id, message_type, key, business_id))
            attempts.append(attempt)
            sizes.append(size)
            continue
        event, topic, ts_us, app_id, client_host, group, consumer, items, kind, ref = record
        counts.append(len(items))
        if ref is not None:
            scalars.append((event, topic, ts_us, app_id, client_host, group, consumer, None, 0))
            refs.append((i, ref))
        elif kind != MESSAGES:  # ROWS or ENTRIES: an attempt each
            scalars.append((event, topic, ts_us, app_id, client_host, group, consumer, None, HAS_ATTEMPT))
            fields += map(_row_fields, items) if kind == ROWS else map(_fields, map(_entry_message, items))
            attempts += map(_row_attempt, items)
        elif event in SIZED:
            scalars.append((event, topic, ts_us, app_id, client_host, group, consumer, None, HAS_SIZE))
            arrays = list(map(_fields, items))
            fields += arrays
            sizes += map(len, map(_body, arrays))
        else:
            scalars.append((event, topic, ts_us, app_id, client_host, group, consumer, None, 0))
            fields += map(_fields, items)
    return (first, scalars, counts, refs, _joined(list(map(_id, fields))), _joined(list(map(_type, fields))),
            _joined(list(map(_key, fields))), _joined(list(map(_bid, fields))), _ints(attempts), _ints(sizes))


def _joined(values: list):
    """A string column as shipped: its values joined by NUL as UTF-8 bytes; None if all are null; the list
    itself if some are null, or not strings, or hold a NUL."""
    try:
        joined = "\0".join(values)
    except TypeError:
        return None if values.count(None) == len(values) else values
    if joined.count("\0") != len(values) - 1:
        return values
    try:
        return joined.encode()
    except UnicodeEncodeError:
        return values


def _ints(values: list):
    """An int column as shipped: the one value all have (attempt 1, a batch of equal bodies), or the list."""
    if values and type(values[0]) is int and values.count(values[0]) == len(values):
        return values[0]
    return values


def _child(directory: str, node_id: str, cluster: str, file_format: str = "parquet", nice: str = "0") -> None:
    if int(nice):
        os.nice(int(nice))  # the broker and its clients come first; the writer catches up when they idle
    from broker_core.trace_writer import ChunkDecoder, JsonlTraceWriter, ParquetTraceWriter

    if file_format == "jsonl":
        writer = JsonlTraceWriter(directory, node_id=node_id, cluster=cluster)
        decoder = ChunkDecoder()
    else:
        writer = ParquetTraceWriter(directory, node_id=node_id, cluster=cluster)
    stream = sys.stdin.buffer
    try:
        while True:
            head = stream.read(LENGTH.size)
            if len(head) < LENGTH.size:
                break
            data = stream.read(LENGTH.unpack(head)[0])
            chunk = pickle.loads(data)
            if file_format != "jsonl":
                writer.add_chunk(chunk)
                continue
            unresolved = decoder.unresolved
            scalars, counts, per_message = decoder.decode(chunk)
            writer.dropped += decoder.unresolved - unresolved
            ids, types, keys, bids, attempts, sizes = (c.to_pylist() for c in per_message)
            i = 0
            for (event, topic, ts_us, app_id, client_host, group, consumer, detail, _), n in zip(
                    scalars, counts.tolist(), strict=True):
                for j in range(i, i + n):
                    writer.emit(event, message_id=ids[j], topic=topic, message_type=types[j], key=keys[j],
                                business_id=bids[j], app_id=app_id, client_host=client_host, group=group,
                                consumer=consumer, attempt=attempts[j], detail=detail, size=sizes[j], ts_us=ts_us)
                i += n
    finally:
        writer.close()


if __name__ == "__main__":
    _child(*sys.argv[1:6])
