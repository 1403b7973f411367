"""A trace sink that writes from a child process, so writing trace files never holds the broker's GIL.

The broker side does as little per event as it can: `emit` and the batch methods (`emit_messages` for a
publish batch, `emit_group` for a delivery frame, `emit_attempts` for an ack frame's in-flight entries)
append one record to a `ChunkShipper`, holding the broker's own list. Once per `ship_interval_s` the
records become one chunk (trace_writer's CHUNK: per per-message column the values of all records joined
into one bytes object, so neither side makes a Python object per value), pickled and written to the
child's stdin through a non-blocking asyncio pipe. A record whose messages the child already has names
them instead of shipping their values: a publish batch's `stored` record its `published` record (the
handle `emit_messages` returned), a delivery or ack frame the runs of published records its seqs make.
The child (`python -m broker_core.trace_process DIR NODE_ID CLUSTER [parquet|jsonl] [NICE]`, at a lower
priority: `nice`, default 10) hands the chunk as it is to `ParquetTraceWriter.add_chunk` (the default),
or expands it into `JsonlTraceWriter.emit` calls (the older format). Tracing never blocks the broker:
when the child falls behind by more than `max_buffer_bytes`, chunks are dropped and counted. The child
stops (closing its open file) when its stdin closes, also after a kill -9 of the broker.
"""

from __future__ import annotations

import asyncio
import logging
import os
import pickle
import struct
import subprocess
import sys
from bisect import bisect_left, bisect_right
from operator import attrgetter, itemgetter
from pathlib import Path
from time import time_ns

from broker_core.protocol import M_BODY, M_BUSINESS_ID, M_ID, M_KEY, M_TYPE
from broker_core.trace import SIZED
from broker_core.trace_writer import HAS_ATTEMPT, HAS_SIZE

log = logging.getLogger("broker_core.trace")

LENGTH = struct.Struct(">I")
FORMATS = ("parquet", "jsonl")

_fields = attrgetter("fields")
_seq = attrgetter("seq")
_row_seq, _row_attempt, _row_fields = itemgetter(0), itemgetter(1), itemgetter(2)
_entry_message = itemgetter(0)
_body = itemgetter(M_BODY)
# a message array's values of the chunk's string columns (an emit() event's (id, type, key, business id) too)
_STRING_COLUMNS = (itemgetter(M_ID), itemgetter(M_TYPE), itemgetter(M_KEY), itemgetter(M_BUSINESS_ID))


class ProcessTraceSink:
    def __init__(self, directory: Path, *, node_id: str, cluster: str, ship_interval_s: float = 0.2,
                 max_buffer_bytes: int = 64 * 1024 * 1024, file_format: str = "parquet", nice: int = 10):
        if file_format not in FORMATS:
            raise ValueError(f"trace file format must be one of {FORMATS}")
        self.ship_interval_s = ship_interval_s
        self.max_buffer_bytes = max_buffer_bytes
        self.dropped = 0
        self._shipper = ChunkShipper()
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

    def emit(self, event: str, **fields) -> None:
        self._shipper.emit(event, **fields)
        if not self._scheduled:
            self._schedule()

    def emit_messages(self, event: str, topic: str, messages: list, **fields) -> int | None:
        handle = self._shipper.emit_messages(event, topic, messages, **fields)
        if not self._scheduled:
            self._schedule()
        return handle

    def emit_group(self, event: str, topic: str, group: str, rows: list, **fields) -> None:
        self._shipper.emit_group(event, topic, group, rows, **fields)
        if not self._scheduled:
            self._schedule()

    def emit_attempts(self, event: str, topic: str, group: str, entries: list, **fields) -> None:
        self._shipper.emit_attempts(event, topic, group, entries, **fields)
        if not self._scheduled:
            self._schedule()

    def _schedule(self) -> None:
        self._scheduled = True
        self.loop.call_later(self.ship_interval_s, self.ship)

    def ship(self) -> None:
        """Send what was recorded to the child now (the timer does, `ship_interval_s` after a first record)."""
        self._scheduled = False
        if not self._shipper.records:
            return
        transport = self._transport
        if transport is None or transport.is_closing() or transport.get_write_buffer_size() > self.max_buffer_bytes:
            self.dropped += self._shipper.drop()
            return
        data = pickle.dumps(self._shipper.take(), protocol=pickle.HIGHEST_PROTOCOL)
        transport.write(LENGTH.pack(len(data)) + data)

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


class ChunkShipper:
    """Trace records as trace_writer CHUNKs, one per `take()`: the sink methods (TraceSink) without I/O.

    A record holds the broker's list until the chunk is taken; its per-message values are taken from the
    messages then, column by column over the whole chunk. Records are numbered across chunks; a record
    may name records of its own chunk and of the last one taken (the child keeps one chunk back), never
    of one dropped."""

    def __init__(self) -> None:
        self._records: list[tuple] = []
        self._first = 0  # the number of the first record not taken or dropped yet
        self._floor = 0  # the first record a new record may name
        # per topic, the seq runs of published records of the last chunk taken: (first seqs, counts, numbers)
        self._runs: dict[str, tuple[list, list, list]] = {}

    @property
    def records(self) -> int:
        """Records since the last take() or drop()."""
        return len(self._records)

    def emit(self, event: str, *, message_id, topic, message_type, key=None, business_id=None, app_id=None,
             client_host=None, group=None, consumer=None, attempt=None, detail=None, size=None,
             ts_us=None) -> None:
        self._records.append((event, ts_us or time_ns() // 1000, message_id, topic, message_type, key, business_id,
                              app_id, client_host, group, consumer, attempt, detail, size))

    def emit_messages(self, event: str, topic: str, messages: list, *, app_id=None, client_host=None, ts_us=None,
                      same_as=None) -> int | None:
        number = self._first + len(self._records)
        named = same_as if same_as is not None and same_as >= self._floor and event not in SIZED else None
        self._records.append((event, topic, ts_us or time_ns() // 1000, app_id, client_host, None, None,
                              messages, MESSAGES, named))
        return number if named is None else None

    def emit_group(self, event: str, topic: str, group: str, rows: list, *, consumer=None, client_host=None,
                   ts_us=None) -> None:
        self._records.append((event, topic, ts_us or time_ns() // 1000, None, client_host, group, consumer,
                              rows, ROWS, None))

    def emit_attempts(self, event: str, topic: str, group: str, entries: list, *, consumer=None, client_host=None,
                      ts_us=None) -> None:
        self._records.append((event, topic, ts_us or time_ns() // 1000, None, client_host, group, consumer,
                              entries, ENTRIES, None))

    def take(self) -> tuple:
        """The chunk of the records since the last take (or drop); they stay nameable until the next take."""
        records, first = self._records, self._first
        self._records, self._first = [], first + len(records)
        chunk = _chunk(records, first, self._runs)
        self._floor = first
        self._prune()
        return chunk

    def drop(self) -> int:
        """Forget the records since the last take (the child will never get them); returns their events."""
        records, self._records = self._records, []
        self._first += len(records)
        self._floor = self._first
        self._prune()
        return sum(len(r[7]) if len(r) == 10 else 1 for r in records)

    def _prune(self) -> None:
        for topic, (starts, counts, numbers) in list(self._runs.items()):
            keep = bisect_left(numbers, self._floor)
            if keep == len(numbers):
                del self._runs[topic]
            elif keep:
                self._runs[topic] = (starts[keep:], counts[keep:], numbers[keep:])


# what a batch record holds: StoredMessages, (seq, attempt, fields) rows, or (StoredMessage, attempt, ...) entries
MESSAGES, ROWS, ENTRIES = 0, 1, 2


def _chunk(records: list[tuple], first: int, runs: dict) -> tuple:
    """Records (numbered from `first`) as one CHUNK. Per record a tuple and a list extension or two; per
    message a few C-level passes (itemgetter, join), no Python object. `runs` (per topic, the published
    records' seq runs of the chunk before) gets this chunk's: a delivery or ack frame whose seqs are a
    run of published messages names those records (a seq compare per message instead of four columns)."""
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
        event, topic, ts_us, app_id, client_host, group, consumer, items, kind, named = record
        n = len(items)
        counts.append(n)
        if named is not None:
            scalars.append((event, topic, ts_us, app_id, client_host, group, consumer, None, 0))
            refs.append((i, [(named, 0, n)]))
        elif kind != MESSAGES:  # ROWS or ENTRIES: an attempt each
            scalars.append((event, topic, ts_us, app_id, client_host, group, consumer, None, HAS_ATTEMPT))
            attempts += map(_row_attempt, items)
            seqs = list(map(_row_seq, items)) if kind == ROWS else list(map(_seq, map(_entry_message, items)))
            named = _published(runs.get(topic), seqs)
            if named is not None:
                refs.append((i, named))
                continue
            fields += map(_row_fields, items) if kind == ROWS else map(_fields, map(_entry_message, items))
        elif event in SIZED:
            scalars.append((event, topic, ts_us, app_id, client_host, group, consumer, None, HAS_SIZE))
            arrays = list(map(_fields, items))
            fields += arrays
            sizes += map(len, map(_body, arrays))
            if event == "published" and n:
                starts, run_counts, numbers = runs.setdefault(topic, ([], [], []))
                if starts and items[0].seq < starts[-1] + run_counts[-1]:  # seqs started again (a new store)
                    del starts[:], run_counts[:], numbers[:]
                starts.append(items[0].seq)  # a batch's seqs follow each other (the store appends it whole)
                run_counts.append(n)
                numbers.append(first + i)
        else:
            scalars.append((event, topic, ts_us, app_id, client_host, group, consumer, None, 0))
            fields += map(_fields, items)
    return (first, scalars, counts, refs, *(_joined(list(map(get, fields))) for get in _STRING_COLUMNS),
            _ints(attempts), _ints(sizes))


def _published(runs: tuple[list, list, list] | None, seqs: list[int]) -> list | None:
    """(record number, offset, count) of the published records holding `seqs` in that order; None if
    they are not one run of seqs, or not all among `runs`."""
    if runs is None or not seqs:
        return None
    starts, counts, numbers = runs
    seq, left = seqs[0], len(seqs)
    if seqs[-1] - seq != left - 1 or seqs != list(range(seq, seq + left)):
        return None
    j = bisect_right(starts, seq) - 1
    named = []
    while left:
        if j < 0 or j >= len(starts) or not starts[j] <= seq < starts[j] + counts[j]:
            return None
        offset = seq - starts[j]
        take = min(counts[j] - offset, left)
        named.append((numbers[j], offset, take))
        seq, left, j = seq + take, left - take, j + 1
    return named


def _joined(values: list):
    """A string column as shipped (trace_writer's CHUNK): None if all null; the values as UTF-8 joined by
    NUL, with the rows that are null (empty there) when some are; the list itself when some value is not
    a string or holds a NUL."""
    nulls = None
    try:
        joined = "\0".join(values)
    except TypeError:
        count = values.count(None)
        if count == len(values):
            return None
        nulls = [i for i, value in enumerate(values) if value is None]
        try:
            joined = "\0".join(["" if value is None else value for value in values])
        except TypeError:
            return values
    if joined.count("\0") != len(values) - 1:
        return values
    try:
        data = joined.encode()
    except UnicodeEncodeError:
        return values
    return (data, nulls) if nulls else data


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
