"""Trace files of format 2: one row per record (a publish batch, a delivery or ack frame, a single event),
and reading any Parquet trace file as events (docs/trace-events.md).

A record's values (`ts_us`, `event`, `topic`, `app_id`, `client_host`, `group`, `consumer`, `detail`,
`cluster`, `broker`) are stored once, with `count`, its number of messages (events). Its messages' values
are lists, one item per message: a record either has its own `message_id`, `message_type`, `key` and
`business_id` lists, or names the messages of earlier records of the same file in `refs` (runs of
`(record, offset, count)`: a publish batch's `stored` record its `published` record, a delivery or ack
frame the published records it takes messages from) and has none. `attempt` and `size` are always the
record's own. A null list stands for `count` nulls. A record's n events get the event ids
`event_id_prefix` + the 16 hex digits of `event_id_first` + i. So a value is written once per message,
not once per event; `records_to_events` turns a file back into the rows of format 1 (`event_schema`).

Only pyarrow and numpy: the broker's trace writer and the index job (spark_jobs) both use this module.
"""

from __future__ import annotations

import functools

RECORDS_VERSION = 2
# a record's own values, in the order of the file's columns after `v`
RECORD_VALUES = ("ts_us", "event", "topic", "app_id", "client_host", "group", "consumer", "detail", "cluster",
                 "broker", "event_id_prefix", "event_id_first")
MESSAGE_VALUES = ("message_id", "message_type", "key", "business_id", "attempt", "size")
NAMED_VALUES = MESSAGE_VALUES[:4]  # what a record naming earlier records' messages takes from them


def event_schema():
    """The columns of an event (format 1, and what `records_to_events` gives)."""
    import pyarrow as pa

    s = pa.string()
    return pa.schema([("v", pa.int32()), ("event_id", s), ("ts_us", pa.int64()), ("event", s), ("message_id", s),
                      ("topic", s), ("message_type", s), ("key", s), ("business_id", s), ("cluster", s),
                      ("broker", s), ("app_id", s), ("client_host", s), ("group", s), ("consumer", s),
                      ("attempt", pa.int32()), ("detail", s), ("size", pa.int64())])


def records_schema():
    """The columns of a trace file of format 2."""
    import pyarrow as pa

    events = event_schema()
    kinds = {"event_id_prefix": pa.string(), "event_id_first": pa.int64()}
    run = pa.struct([("record", pa.int64()), ("offset", pa.int32()), ("count", pa.int32())])
    return pa.schema([("v", pa.int32()), ("record", pa.int64()), ("count", pa.int32())]
                     + [(name, kinds.get(name) or events.field(name).type) for name in RECORD_VALUES]
                     + [("refs", pa.list_(run))]
                     + [(name, pa.list_(events.field(name).type)) for name in MESSAGE_VALUES])


def is_records(schema) -> bool:
    """Whether a Parquet trace file's schema is of format 2."""
    return "event_id_first" in schema.names


def event_count(path: str) -> int:
    """How many events a Parquet trace file of either format holds, from its footer and (format 2) its
    small `count` column: no event is read."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    parquet = pq.ParquetFile(path)
    if not is_records(parquet.schema_arrow):
        return parquet.metadata.num_rows
    return int(pc.sum(parquet.read(columns=["count"]).column("count")).as_py() or 0)


def read_parquet_events(path: str):
    """A Parquet trace file of either format as an Arrow table of `event_schema()`."""
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    return records_to_events(table) if is_records(table.schema) else table


def records_to_events(table):
    """A table of format 2 (records) as the table of its events (`event_schema()`), records in order and
    each record's messages in order."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    table = table.combine_chunks()
    k = table.num_rows
    counts = table.column("count").to_numpy(zero_copy_only=False).astype(np.int64)
    n = int(counts.sum())
    starts = np.cumsum(counts) - counts  # each record's first row
    record_of_row = np.repeat(np.arange(k, dtype=np.int64), counts)
    place = np.arange(n, dtype=np.int64) - starts[record_of_row]  # a row's message within its record
    refs = table.column("refs").combine_chunks() if k else pa.array([], table.schema.field("refs").type)
    named = ~np.asarray(pc.is_null(refs), dtype=bool) if k else np.zeros(0, dtype=bool)
    columns = {name: _own_values(table.column(name), counts, record_of_row, place, name in NAMED_VALUES and named)
               for name in MESSAGE_VALUES}
    if named.any():  # a named record's rows take the values of the rows it names
        take = pa.array(_named_sources(table, refs, named, counts, starts, n))
        for name in NAMED_VALUES:
            columns[name] = columns[name].take(take)
    take = pa.array(record_of_row)
    columns.update({name: table.column(name).take(take) for name in RECORD_VALUES[:10]})
    columns["v"] = pa.array(np.ones(n, dtype=np.int32))
    columns["event_id"] = _record_event_ids(table, counts, n)
    schema = event_schema()
    return pa.Table.from_arrays([columns[f.name].cast(f.type) for f in schema], schema=schema)


def _named_sources(table, refs, named, counts, starts, n: int):
    """For each row, the row whose message it is: itself, or for a named record's rows the rows its runs
    name, in order (numpy, no loop per record). Refuses runs naming a record not in the table, one that
    names others itself, or past a record's messages, and records whose runs do not add up to their count."""
    import numpy as np
    import pyarrow.compute as pc

    lengths = pc.list_value_length(refs).fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    runs = pc.list_flatten(refs)
    number = runs.field("record").to_numpy(zero_copy_only=False)
    offset = runs.field("offset").to_numpy(zero_copy_only=False).astype(np.int64)
    count = runs.field("count").to_numpy(zero_copy_only=False).astype(np.int64)
    owner = np.repeat(np.arange(len(lengths)), lengths)
    records = table.column("record").to_numpy(zero_copy_only=False)
    known = ~np.isnan(records) if records.dtype.kind == "f" else np.ones(len(records), dtype=bool)
    order = np.flatnonzero(known)[np.argsort(records[known], kind="stable")]
    at = np.searchsorted(records[order], number)
    j = order[np.minimum(at, len(order) - 1)] if len(order) else np.zeros(len(number), dtype=np.int64)
    good = (at < len(order)) & (records[j] == number) & ~named[j] & (offset + count <= counts[j]) if len(order) \
        else np.zeros(len(number), dtype=bool)
    if not good.all():
        bad = int(number[np.flatnonzero(~good)[0]])
        raise ValueError(f"a trace record names record {bad}, which is not a record of its file with messages of "
                         "its own (or not that many)")
    if not np.array_equal(np.bincount(owner, weights=count, minlength=len(counts))[named], counts[named]):
        raise ValueError("a trace record's runs do not add up to its count")
    done = np.cumsum(count) - count  # each run's start among all runs' rows
    first_of_owner = np.cumsum(lengths) - lengths
    dest = starts[owner] + done - done[np.minimum(first_of_owner[owner], len(done) - 1)]
    source = np.arange(n, dtype=np.int64)
    rows = np.repeat(dest, count) + (np.arange(int(count.sum())) - np.repeat(done, count))
    source[rows] = np.repeat(starts[j] + offset, count) + (np.arange(int(count.sum())) - np.repeat(done, count))
    return source


def _own_values(column, counts, record_of_row, place, named):
    """One value per row from a list column: a record's list holds its `count` values, or is null (all
    null; for a named record, whose values come from the records it names, null too)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

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


def _record_event_ids(table, counts, n: int):
    """The event ids of the records' messages: one run when the records follow each other (they do in a
    file the broker wrote: one prefix, each record's first id the one after the record before's last)."""
    import numpy as np
    import pyarrow as pa

    if not n:
        return pa.array([], pa.string())
    prefixes = table.column("event_id_prefix").to_pylist()
    firsts = table.column("event_id_first").to_numpy()
    if len(set(prefixes)) == 1 and np.array_equal(firsts[1:], firsts[:-1] + counts[:-1]):
        return event_ids(prefixes[0], int(firsts[0]), n)
    return pa.concat_arrays([event_ids(p, int(f), int(c)) for p, f, c in zip(prefixes, firsts, counts, strict=True)
                             if c])


@functools.cache
def _hex4():
    """The 4 lowercase hex digits of 0..65535, each as the uint32 of its 4 bytes."""
    import numpy as np

    nibbles = np.arange(65536)[:, None] >> np.array([12, 8, 4, 0]) & 15
    return np.ascontiguousarray(np.frombuffer(b"0123456789abcdef", dtype=np.uint8)[nibbles]).view(np.uint32).ravel()


def event_ids(prefix: str, first: int, n: int):
    """n event ids from `first` on, 32 hex characters each: the writer's random prefix (16) and the counter
    (16), as 8 groups of 4 characters (numpy table lookups: the lowest group per id, the others once per
    65,536 ids)."""
    import numpy as np
    import pyarrow as pa

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
