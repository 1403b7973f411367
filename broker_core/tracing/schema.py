"""The trace file format, shared by the broker (which writes it) and the index job (which reads it).

One format: Arrow IPC streams of *records*, their buffers zstd-compressed (docs/trace-events.md). A record is a publish batch, a delivery or
ack frame, or a single event: its own values (`ts_us`, `event`, `topic`, ...) once, `count` messages, and
its messages' values as lists of `count` items. A record either has its own `message_id`, `message_type`,
`key` and `business_id` lists, or names messages of earlier records of the same file in `refs` (runs of
`(record, offset, count)`) and takes those four values from them. A null list stands for `count` nulls.
The i-th message of a record is one event whose `event_id` is `event_id_prefix` + the 16 hex digits of
`event_id_first` + i.

`wire_schema()` is what the trace process decodes shipments into, `records_schema()` what a
file holds (the wire columns plus the writer's own), `event_schema()` one row per event (what
`read_events` gives the index job). Only pyarrow and numpy here: spark_jobs imports this module and
nothing else of broker_core.
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

FORMAT_VERSION = 2  # the `v` of a record
EVENT_KINDS = (
    "published", "stored", "prepared", "committed", "rolled_back",
    "delivered", "acked", "nacked", "timed_out", "dead_lettered", "expired", "redriven",
    "scheduled",  # a delayed message was stored in the schedule; `detail` = "due_ms=<Unix ms>"
)
SIZED = frozenset({"published", "prepared"})  # the kinds that record the body's size

# a record's own values as the broker ships them, then those the writer adds per file
RECORD_VALUES = ("ts_us", "event", "topic", "app_id", "client_host", "group", "consumer", "detail")
FILE_VALUES = ("cluster", "broker", "event_id_prefix", "event_id_first")
MESSAGE_VALUES = ("message_id", "message_type", "key", "business_id", "attempt", "size")
NAMED_VALUES = MESSAGE_VALUES[:4]  # what a record naming earlier records' messages takes from them

_s = pa.string()
RUN_TYPE = pa.struct([("record", pa.int64()), ("offset", pa.int32()), ("count", pa.int32())])
_TYPES = {"v": pa.int32(), "record": pa.int64(), "count": pa.int32(), "ts_us": pa.int64(), "attempt": pa.int32(),
          "size": pa.int64(), "event_id_first": pa.int64(), "refs": pa.list_(RUN_TYPE)}


def event_schema() -> pa.Schema:
    """The columns of one event (docs/trace-events.md, "Fields of one event")."""
    names = ("v", "event_id", "ts_us", "event", "message_id", "topic", "message_type", "key", "business_id",
             "cluster", "broker", "app_id", "client_host", "group", "consumer", "attempt", "detail", "size")
    return pa.schema([(name, _TYPES.get(name, _s)) for name in names])


def wire_schema() -> pa.Schema:
    """The columns of a batch of records the broker ships to its trace process."""
    return pa.schema([("record", _TYPES["record"]), ("count", _TYPES["count"])]
                     + [(name, _TYPES.get(name, _s)) for name in RECORD_VALUES]
                     + [("refs", _TYPES["refs"])]
                     + [(name, pa.list_(_TYPES.get(name, _s))) for name in MESSAGE_VALUES])


def records_schema() -> pa.Schema:
    """The columns of a trace file."""
    wire, cut = list(wire_schema()), 2 + len(RECORD_VALUES)
    return pa.schema([("v", _TYPES["v"]), *wire[:cut], *[(name, _TYPES.get(name, _s)) for name in FILE_VALUES],
                      *wire[cut:]])


def event_count(path: str) -> int:
    """How many events a trace file holds, from its small `count` column (no event is read)."""
    return int(pc.sum(read_records(path, ["count"]).column("count")).as_py() or 0)


def read_records(path: str, columns: list[str] | None = None) -> pa.Table:
    """A trace file's records (an Arrow IPC stream, tracing/writer.py), all columns or only `columns` (whose
    buffers alone are read and decompressed)."""
    options = None
    if columns is not None:
        names = records_schema().names
        options = pa.ipc.IpcReadOptions(included_fields=[names.index(c) for c in columns])
    with pa.memory_map(path) as source:
        return pa.ipc.open_stream(source, options=options).read_all()


def read_events(path: str) -> pa.Table:
    """A trace file as the table of its events (`event_schema()`)."""
    return records_to_events(read_records(path))


def records_to_events(table: pa.Table) -> pa.Table:
    """A table of records as the table of its events, records in order and each record's messages in order.
    Refuses a record naming one that is not in the table."""
    table = table.combine_chunks()
    k = table.num_rows
    counts = table.column("count").to_numpy(zero_copy_only=False).astype(np.int64)
    n = int(counts.sum())
    starts = np.cumsum(counts) - counts  # each record's first row
    record_of_row = np.repeat(np.arange(k, dtype=np.int64), counts)
    place = np.arange(n, dtype=np.int64) - starts[record_of_row]  # a row's message within its record
    refs = table.column("refs").combine_chunks() if k else pa.array([], _TYPES["refs"])
    named = ~np.asarray(pc.is_null(refs), dtype=bool) if k else np.zeros(0, dtype=bool)
    columns = {name: _own_values(table.column(name), counts, record_of_row, place, name in NAMED_VALUES and named)
               for name in MESSAGE_VALUES}
    if named.any():  # a named record's rows take the values of the rows it names
        take = pa.array(_named_sources(table, refs, named, counts, starts, n))
        for name in NAMED_VALUES:
            columns[name] = columns[name].take(take)
    take = pa.array(record_of_row)
    columns.update({name: table.column(name).take(take) for name in (*RECORD_VALUES, "cluster", "broker")})
    columns["v"] = pa.array(np.ones(n, dtype=np.int32))
    columns["event_id"] = _record_event_ids(table, counts, n)
    schema = event_schema()
    return pa.Table.from_arrays([columns[f.name].cast(f.type) for f in schema], schema=schema)


def _named_sources(table, refs, named, counts, starts, n: int) -> np.ndarray:
    """For each row, the row whose message it is: itself, or for a named record's rows the rows its runs
    name, in order. Refuses runs naming a record not in the table, one that names others itself, or past a
    record's messages, and records whose runs do not add up to their count."""
    lengths = pc.list_value_length(refs).fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    runs = pc.list_flatten(refs)
    number = runs.field("record").to_numpy(zero_copy_only=False)
    offset = runs.field("offset").to_numpy(zero_copy_only=False).astype(np.int64)
    count = runs.field("count").to_numpy(zero_copy_only=False).astype(np.int64)
    owner = np.repeat(np.arange(len(lengths)), lengths)
    records = table.column("record").to_numpy(zero_copy_only=False)
    order = np.argsort(records, kind="stable")
    at = np.searchsorted(records[order], number)
    j = order[np.minimum(at, len(order) - 1)]
    good = (at < len(order)) & (records[j] == number) & ~named[j] & (offset + count <= counts[j])
    if not good.all():
        bad = int(number[np.flatnonzero(~good)[0]])
        raise ValueError(f"a trace record names record {bad}, which is not a record of its file with messages of "
                         "its own (or not that many)")
    if not np.array_equal(np.bincount(owner, weights=count, minlength=len(counts))[named], counts[named]):
        raise ValueError("a trace record's runs do not add up to its count")
    done = np.cumsum(count) - count  # each run's start among all runs' rows
    first_of_owner = np.cumsum(lengths) - lengths
    dest = starts[owner] + done - done[np.minimum(first_of_owner[owner], len(done) - 1)]
    within = np.arange(int(count.sum())) - np.repeat(done, count)
    source = np.arange(n, dtype=np.int64)
    source[np.repeat(dest, count) + within] = np.repeat(starts[j] + offset, count) + within
    return source


def _own_values(column, counts, record_of_row, place, named) -> pa.Array:
    """One value per row from a list column: a record's list holds its `count` values, or is null (all
    null; for a named record, whose values come from the records it names, null too)."""
    column = column.combine_chunks()
    lengths = pc.list_value_length(column).fill_null(0).to_numpy(zero_copy_only=False)
    has = lengths > 0
    if np.any(has & (lengths != counts)):
        raise ValueError("a trace record's list holds neither its count of items nor none")
    if named is not False and np.any(has & named):
        raise ValueError("a trace record names earlier records' messages and has values of its own")
    values = pc.list_flatten(column)
    if has.all():
        return values
    offsets = np.cumsum(lengths) - lengths
    rows_have = has[record_of_row]
    index = np.where(rows_have, offsets[record_of_row] + place, 0)
    return values.take(pa.array(index, mask=~rows_have)) if len(values) else pa.nulls(len(index), values.type)


def _record_event_ids(table, counts, n: int) -> pa.Array:
    """The event ids of the records' messages: one run when the records follow each other (they do in a
    file the broker wrote: one prefix, each record's first id the one after the record before's last)."""
    if not n:
        return pa.array([], _s)
    prefixes = table.column("event_id_prefix").to_pylist()
    firsts = table.column("event_id_first").to_numpy()
    if len(set(prefixes)) == 1 and np.array_equal(firsts[1:], firsts[:-1] + counts[:-1]):
        return event_ids(prefixes[0], int(firsts[0]), n)
    return pa.concat_arrays([event_ids(p, int(f), int(c)) for p, f, c in zip(prefixes, firsts, counts, strict=True)
                             if c])


@functools.cache
def _hex4() -> np.ndarray:
    """The 4 lowercase hex digits of 0..65535, each as the uint32 of its 4 bytes."""
    nibbles = np.arange(65536)[:, None] >> np.array([12, 8, 4, 0]) & 15
    return np.ascontiguousarray(np.frombuffer(b"0123456789abcdef", dtype=np.uint8)[nibbles]).view(np.uint32).ravel()


def event_ids(prefix: str, first: int, n: int) -> pa.Array:
    """n event ids from `first` on, 32 hex characters each: the writer's random prefix (16) and the counter
    (16), built by table lookups of 4 hex digits (no Python string per id)."""
    data = np.empty((n, 8), dtype=np.uint32)
    data[:, :4] = np.frombuffer(prefix.encode(), dtype=np.uint32)
    hex4 = _hex4()
    low = np.arange(first, first + n, dtype=np.uint64) & np.uint64(0xFFFF)
    data[:, 7] = hex4[low.astype(np.uint16)]
    start = 0
    while start < n:  # the upper 48 bits are the same for a run of up to 65,536 ids
        high = (first + start) >> 16
        stop = min(n, start + 0x10000 - ((first + start) & 0xFFFF))
        data[start:stop, 4:7] = hex4[[(high >> 32) & 0xFFFF, (high >> 16) & 0xFFFF, high & 0xFFFF]]
        start = stop
    offsets = np.arange(0, 32 * (n + 1), 32, dtype=np.int32)
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(data))


def read_trace_events(directory) -> list[dict]:
    """Every event of the closed trace files under `directory`, in file order, as dicts of the fields that
    are set: for tests and tools."""
    events = []
    for path in sorted(Path(directory).rglob("trace-*.arrows")):
        events += [{k: v for k, v in row.items() if v is not None} for row in read_events(str(path)).to_pylist()]
    return events
