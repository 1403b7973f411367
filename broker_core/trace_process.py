"""A trace sink that writes from a child process, so writing trace files never holds the broker's GIL.

The broker side does as little per event as it can: `emit` and the batch methods (`emit_messages` for a
publish batch, `emit_group` for a delivery frame, `emit_attempts` for an ack frame's in-flight entries)
add one record to a `ChunkShipper`, which takes its messages' values at once, a few C-level passes
(itemgetter, join) per record and column. Once per `ship_interval_s` the records become one chunk
(trace_writer's CHUNK: per per-message column the values of all records joined into one bytes object,
so neither side makes a Python object per value), pickled and written to the child's stdin through a
non-blocking asyncio pipe. A record whose messages the child already has names them instead of
shipping their values: a publish batch's `stored` record its `published` record (the handle
`emit_messages` returned), a delivery or ack frame the runs of published records its seqs make.
The child (`python -m broker_core.trace_process DIR NODE_ID CLUSTER [parquet|jsonl] [NICE] [ROLL_BYTES]
[ROLL_SECONDS]`, at a lower priority: `nice`, default 10) hands the chunk as it is to `ParquetTraceWriter.add_chunk` (the default),
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
from itertools import islice, repeat
from operator import attrgetter, countOf, itemgetter, lt
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
_SHARED = itemgetter(M_TYPE, M_KEY, M_BUSINESS_ID)  # the columns a batch's messages often all share


class ProcessTraceSink:
    def __init__(self, directory: Path, *, node_id: str, cluster: str, ship_interval_s: float = 0.2,
                 max_buffer_bytes: int = 64 * 1024 * 1024, file_format: str = "parquet", nice: int = 10,
                 roll_bytes: int | None = None, roll_s: float | None = None):
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
             str(nice), str(roll_bytes or ""), str(roll_s or "")],
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

    A record's per-message values are taken when it is emitted, while the publish or delivery path has
    just touched its messages (the same work on messages gone cold by the end of the interval costs
    about three times as much), as one NUL-joined string per record and column; no list of the broker's
    is kept. Records are numbered across chunks; a record may name records of its own chunk and of the
    last one taken (the child keeps one chunk back), never of one dropped."""

    def __init__(self) -> None:
        self._chunk = _Chunk(0)
        self._floor = 0  # the first record a new record may name
        # per topic, the seq runs of nameable published records: (first seqs, counts, record numbers)
        self._runs: dict[str, tuple[list, list, list]] = {}

    @property
    def records(self) -> int:
        """Records since the last take() or drop()."""
        return len(self._chunk.counts)

    def emit(self, event: str, *, message_id, topic, message_type, key=None, business_id=None, app_id=None,
             client_host=None, group=None, consumer=None, attempt=None, detail=None, size=None,
             ts_us=None) -> None:
        self._chunk.own((event, topic, ts_us or time_ns() // 1000, app_id, client_host, group, consumer, detail,
                         HAS_ATTEMPT | HAS_SIZE), [(message_id, message_type, key, business_id)], lambda: (attempt,),
                        lambda: (size,))

    def emit_messages(self, event: str, topic: str, messages: list, *, app_id=None, client_host=None, ts_us=None,
                      same_as=None, arrays=None, sizes=None, ids=None, shared=None) -> int | None:
        chunk = self._chunk
        number = chunk.first + len(chunk.counts)
        n = len(messages)
        sized = event in SIZED
        scalars = (event, topic, ts_us or time_ns() // 1000, app_id, client_host, None, None, None,
                   HAS_SIZE if sized else 0)
        if same_as is not None and same_as >= self._floor and not sized:
            chunk.named(scalars, n, [(same_as, 0, n)])
            return None
        fields = arrays if arrays is not None else list(map(_fields, messages))
        if not sized:
            body_sizes = None
        elif sizes is not None:  # the caller's list (the server's check loop took them)
            body_sizes = lambda: sizes  # noqa: E731
        else:
            body_sizes = lambda: map(len, map(_body, fields))  # noqa: E731
        chunk.own(scalars, fields, None, body_sizes, ids, shared)
        if event == "published" and n:
            starts, counts, numbers = self._runs.setdefault(topic, ([], [], []))
            first_seq = messages[0].seq  # a batch's seqs follow each other (the store appends it whole)
            if starts and first_seq < starts[-1] + counts[-1]:  # seqs started again (a new store)
                del starts[:], counts[:], numbers[:]
            starts.append(first_seq)
            counts.append(n)
            numbers.append(number)
        return number

    def emit_group(self, event: str, topic: str, group: str, rows: list, *, consumer=None, client_host=None,
                   ts_us=None, attempt=None) -> None:
        scalars = (event, topic, ts_us or time_ns() // 1000, None, client_host, group, consumer, None, HAS_ATTEMPT)
        attempts = (lambda: map(_row_attempt, rows)) if attempt is None else (lambda: repeat(attempt, len(rows)))
        named = self._named(topic, list(map(_row_seq, rows)))
        if named is not None:
            self._chunk.named(scalars, len(rows), named, attempts)
        else:
            self._chunk.own(scalars, list(map(_row_fields, rows)), attempts)

    def emit_attempts(self, event: str, topic: str, group: str, entries: list, *, consumer=None, client_host=None,
                      ts_us=None, seqs=None) -> None:
        scalars = (event, topic, ts_us or time_ns() // 1000, None, client_host, group, consumer, None, HAS_ATTEMPT)
        named = self._named(topic, seqs if seqs is not None else list(map(_seq, map(_entry_message, entries))))
        if named is not None:
            self._chunk.named(scalars, len(entries), named, lambda: map(_row_attempt, entries))
        else:
            self._chunk.own(scalars, list(map(_fields, map(_entry_message, entries))), lambda: map(_row_attempt, entries))

    def _named(self, topic: str, seqs: list[int]) -> list | None:
        """(record number, offset, count) of the published records holding `seqs` in that order; None if
        they are not one run of seqs, or not all among the nameable records."""
        runs = self._runs.get(topic)
        if runs is None or not seqs:
            return None
        starts, counts, numbers = runs
        seq, left = seqs[0], len(seqs)
        # increasing, and spanning exactly len(seqs): one run (no list of ints made to compare)
        if seqs[-1] - seq != left - 1 or not all(map(lt, seqs, islice(seqs, 1, None))):
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

    def take(self) -> tuple:
        """The chunk of the records since the last take (or drop); they stay nameable until the next take."""
        chunk = self._chunk
        self._restart(chunk.first, chunk.first + len(chunk.counts))
        return chunk.build()

    def drop(self) -> int:
        """Forget the records since the last take (the child will never get them); returns their events."""
        chunk = self._chunk
        end = chunk.first + len(chunk.counts)
        self._restart(end, end)
        return sum(chunk.counts)

    def _restart(self, floor: int, first: int) -> None:
        self._floor = floor
        self._chunk = _Chunk(first)
        for topic, (starts, counts, numbers) in list(self._runs.items()):
            keep = bisect_left(numbers, floor)
            if keep == len(numbers):
                del self._runs[topic]
            elif keep:
                self._runs[topic] = (starts[keep:], counts[keep:], numbers[keep:])


class _Chunk:
    """The records of one chunk as they come: per string column, one part per record that ships its own
    values (see `_part`)."""

    def __init__(self, first: int) -> None:
        self.first = first
        self.scalars: list[tuple] = []
        self.counts: list[int] = []
        self.refs: list[tuple] = []
        self.parts: list[list] = [[] for _ in _STRING_COLUMNS]
        self.attempts: list = []
        self.sizes: list = []

    def own(self, scalars: tuple, fields: list, attempts=None, sizes=None, ids=None, shared=None) -> None:
        """A record shipping its messages' values (`attempts`, `sizes`: see `_run`; `ids`, `shared`: what the
        caller took in passing, see TraceSink.emit_messages)."""
        n = len(fields)
        self.scalars.append(scalars)
        self.counts.append(n)
        if n > 1 and ids is not None and ids[0] != ids[-1]:
            self.parts[0].append((_joined(ids, n), n))
            if shared is not None:
                for parts, value in zip(self.parts[1:], shared, strict=True):
                    parts.append((_same_part(value, n), n))
            else:
                for parts, get in zip(self.parts[1:], _STRING_COLUMNS[1:], strict=True):
                    parts.append((_part(fields, get, n), n))
        elif n > 1 and _SHARED(fields[-1]) == (shared := _SHARED(fields[0])) and countOf(map(_SHARED, fields), shared) == n:
            # a batch of one type, key and business id (often: no key, no business id): one pass for the three
            self.parts[0].append((_part(fields, _STRING_COLUMNS[0], n), n))
            for parts, value in zip(self.parts[1:], shared, strict=True):
                parts.append((_same_part(value, n), n))
        elif n:
            for parts, get in zip(self.parts, _STRING_COLUMNS, strict=True):
                parts.append((_part(fields, get, n), n))
        if attempts is not None:
            self.attempts.append(_run(attempts, n))
        if sizes is not None:
            self.sizes.append(_run(sizes, n))

    def named(self, scalars: tuple, n: int, runs: list, attempts=None) -> None:
        self.refs.append((len(self.counts), runs))
        self.scalars.append(scalars)
        self.counts.append(n)
        if attempts is not None:
            self.attempts.append(_run(attempts, n))

    def build(self) -> tuple:
        return (self.first, self.scalars, self.counts, self.refs, *map(_column, self.parts), _ints(self.attempts),
                _ints(self.sizes))


def _joined(ids: list, n: int):
    """_part of a list of n string ids, not all the same."""
    if "\0" in "".join(ids):  # (a memchr over a copy: cheaper than counting the separators)
        return list(ids)
    return "\0".join(ids)


def _same_part(value, n: int):
    """_part of n rows that all hold `value`: n when null; the value joined n times by NUL (no join of n
    objects); else the list."""
    if value is None:
        return n
    if type(value) is str and "\0" not in value:
        return "\0".join([value] * n)
    return [value] * n


def _run(values, n: int):
    """A record's n attempts or sizes (`values()` iterates them, again on each call): (value, count) when
    all are the same int (counted without a list), else the list."""
    first = next(iter(values()), None)
    if type(first) is int and countOf(values(), first) == n:
        return first, n
    return list(values())


def _part(fields: list, get, n: int):
    """One record's values of a string column: joined by NUL; n when all are null; else the list (some
    null, or not strings, or holding a NUL)."""
    first = get(fields[0])
    if get(fields[-1]) == first and countOf(map(get, fields), first) == n:
        return _same_part(first, n)  # one value for all (a batch of one message type, no keys)
    if first is None:
        return list(map(get, fields))
    try:
        joined = "\0".join(map(get, fields))
    except TypeError:
        return list(map(get, fields))
    return joined if joined.count("\0") == n - 1 else list(map(get, fields))


def _column(parts: list):
    """A string column as shipped (trace_writer's CHUNK): None if all null; the values as UTF-8 joined by
    NUL, with the rows that are null (empty there) when some are; the list of values when one is not a
    string or holds a NUL."""
    kinds = {type(part) for part, _ in parts}
    if kinds <= {int}:
        return None
    if kinds == {str}:
        pieces, nulls = [part for part, _ in parts], None
    else:
        pieces, nulls, row = [], [], 0
        for part, n in parts:
            if type(part) is str:
                pieces.append(part)
            elif type(part) is int:
                pieces.append("\0" * (n - 1))
                nulls += range(row, row + n)
            else:
                for j, value in enumerate(part):
                    if value is None:
                        nulls.append(row + j)
                    elif type(value) is not str or "\0" in value:
                        return _values(parts)
                pieces.append("\0".join(["" if value is None else value for value in part]))
            row += n
    try:
        data = "\0".join(pieces).encode()
    except UnicodeEncodeError:
        return _values(parts)
    return (data, nulls) if nulls else data


def _values(parts: list) -> list:
    values: list = []
    for part, n in parts:
        values += part.split("\0") if type(part) is str else [None] * n if type(part) is int else part
    return values


def _ints(runs: list):
    """An int column as shipped, from the records' runs: the one value all have (attempt 1, a batch of
    equal bodies), or the list of values."""
    if runs and all(type(r) is tuple for r in runs) and len({r[0] for r in runs}) == 1:
        return runs[0][0]
    values: list = []
    for r in runs:
        values += [r[0]] * r[1] if type(r) is tuple else r
    return values


def _child(directory: str, node_id: str, cluster: str, file_format: str = "parquet", nice: str = "0",
           roll_bytes: str = "", roll_s: str = "") -> None:
    if int(nice):
        os.nice(int(nice))  # the broker and its clients come first; the writer catches up when they idle
    from broker_core.trace_writer import ChunkDecoder, JsonlTraceWriter, ParquetTraceWriter

    roll = {**({"max_bytes": int(roll_bytes)} if roll_bytes else {}), **({"max_age_s": float(roll_s)} if roll_s else {})}
    if file_format == "jsonl":
        writer = JsonlTraceWriter(directory, node_id=node_id, cluster=cluster, **roll)
        decoder = ChunkDecoder()
    else:
        writer = ParquetTraceWriter(directory, node_id=node_id, cluster=cluster, **roll)
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
            scalars, counts, per_message, _, _ = decoder.decode(chunk)
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
    _child(*sys.argv[1:8])
