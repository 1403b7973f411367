"""The broker's side of tracing without I/O: the sink methods (TraceSink) add records to a `RecordBuffer`;
`take_records()` hands over the records since the last take as plain lists (`Records`), which `pack` turns
into msgpack for the trace process, and `to_batch` (in the trace process) into one Arrow record batch of
schema.wire_schema(); `take()` does both at once (for a writer in the same process).

A record's per-message values are taken when it is emitted, while the publish or delivery path has just
touched its messages, as plain lists (C-level `map` passes), or as a `Run` when they are all the same
(a batch of one message type, first deliveries); the batch is built column-wise once per shipment, without
a Python object per value where it can (ASCII strings are joined and cut by their lengths; runs repeat
one value). A record whose messages the trace process already has names them instead of repeating their
ids, types, keys and business ids: a publish batch's `stored` record its `published` record (the handle
`emit_messages` returned), a delivery or ack frame the runs of published records its seqs make. Records
are numbered across batches; a record may name records of its own batch and of the one taken before
(the writer resolves those), never of one dropped.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from itertools import chain, repeat
from time import time_ns
from typing import NamedTuple

import msgpack
import numpy as np
import pyarrow as pa

from broker_core.protocol import M_BODY, M_BUSINESS_ID, M_ID, M_KEY, M_TYPE
from broker_core.tracing.schema import MESSAGE_VALUES, RECORD_VALUES, SIZED, wire_schema

_NO_VALUES = (None,) * len(MESSAGE_VALUES)  # a record naming its messages: no value of its own


class RecordBuffer:
    def __init__(self) -> None:
        self._first = 0  # the number of the first record since the last take
        self._floor = 0  # the first record a new record may name
        self._start()
        # per topic, the seq runs of nameable published records: (first seqs, counts, record numbers)
        self._runs: dict[str, tuple[list, list, list]] = {}

    def _start(self) -> None:
        self._scalars: list[tuple] = []
        self._counts: list[int] = []
        self._refs: list = []  # per record: None or its runs as (record, offset, count) tuples
        self._parts: list[list] = []  # per record: one part per MESSAGE_VALUES column (turned into columns at take)

    @property
    def records(self) -> int:
        """Records since the last take() or drop()."""
        return len(self._counts)

    # --- the sink methods ---------------------------------------------------------------------

    def emit(self, event: str, *, message_id, topic, message_type, key=None, business_id=None, app_id=None,
             client_host=None, group=None, consumer=None, attempt=None, detail=None, size=None,
             ts_us=None) -> None:
        self._add((ts_us or time_ns() // 1000, event, topic, app_id, client_host, group, consumer, detail), 1,
                  [[message_id], Run(message_type, 1), _one(key), _one(business_id), _one(attempt), _one(size)])

    def emit_messages(self, event: str, topic: str, messages: list, *, app_id=None, client_host=None, ts_us=None,
                      same_as=None) -> int | None:
        n = len(messages)
        if not n:
            return None
        number = self._first + len(self._counts)
        sized = event in SIZED
        scalars = (ts_us or time_ns() // 1000, event, topic, app_id, client_host, None, None, None)
        if same_as is not None and same_as >= self._floor and not sized:
            self._add(scalars, n, _NO_VALUES, [(same_as, 0, n)])
            return None
        columns = _columns([m.fields for m in messages])
        sizes = None
        if sized:  # one value for a batch of equal bodies
            sizes = list(map(len, columns[M_BODY]))
            if sizes.count(sizes[0]) == n:  # (list.count: a direct loop, not countOf's iterator)
                sizes = Run(sizes[0], n)
        self._add(scalars, n, [*_strings(columns, n), None, sizes])
        if event == "published":
            starts, counts, numbers = self._runs.setdefault(topic, ([], [], []))
            first_seq = messages[0].seq  # a batch's seqs follow each other (the store appends it whole)
            if starts and first_seq < starts[-1] + counts[-1]:  # seqs started again (a new store)
                del starts[:], counts[:], numbers[:]
            starts.append(first_seq)
            counts.append(n)
            numbers.append(number)
        return number

    def emit_group(self, event: str, topic: str, group: str, rows: list, *, consumer=None, client_host=None,
                   ts_us=None) -> None:
        if not rows:
            return
        scalars = (ts_us or time_ns() // 1000, event, topic, None, client_host, group, consumer, None)
        seqs, attempts, fields = zip(*rows, strict=True)  # one pass, in C, for the three columns
        self._framed(scalars, topic, seqs, lambda: _columns(fields), _attempts(attempts))

    def emit_attempts(self, event: str, topic: str, group: str, entries: list, *, consumer=None, client_host=None,
                      ts_us=None) -> None:
        if not entries:
            return
        scalars = (ts_us or time_ns() // 1000, event, topic, None, client_host, group, consumer, None)
        messages, attempts = list(zip(*entries, strict=True))[:2]
        self._framed(scalars, topic, [m.seq for m in messages], lambda: _columns([m.fields for m in messages]),
                     _attempts(attempts))

    def close(self) -> None:
        return None

    # --- records ------------------------------------------------------------------------------

    def _framed(self, scalars: tuple, topic: str, seqs: list, fields, attempts) -> None:
        """A delivery or ack frame: it names published records when its seqs are one run of theirs."""
        n = len(seqs)
        named = self._named(topic, seqs)
        if named is not None:
            self._add(scalars, n, [None, None, None, None, attempts, None], named)
        else:
            self._add(scalars, n, [*_strings(fields(), n), attempts, None])

    def _add(self, scalars: tuple, n: int, parts: list, runs: list | None = None) -> None:
        self._scalars.append(scalars)
        self._counts.append(n)
        self._refs.append(runs)
        self._parts.append(parts)

    def _named(self, topic: str, seqs: list[int]) -> list | None:
        """(record number, offset, count) of the published records holding `seqs` in that order; None if
        they are not one run of seqs, or not all among the nameable records."""
        runs = self._runs.get(topic)
        if runs is None or not seqs:
            return None
        starts, counts, numbers = runs
        seq, left = seqs[0], len(seqs)
        # spanning exactly len(seqs), and each the one before plus one: one run
        if seqs[-1] - seq != left - 1 or tuple(seqs) != tuple(range(seq, seq + left)):
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

    # --- shipping -----------------------------------------------------------------------------

    def take_records(self) -> Records | None:
        """The records since the last take (or drop), None if there are none; they stay nameable until the
        next take."""
        k = len(self._counts)
        if not k:
            return None
        refs = [None if runs is None else [{"record": r, "offset": o, "count": c} for r, o, c in runs]
                for runs in self._refs]
        parts = [list(column) for column in zip(*self._parts, strict=True)]
        records = Records(self._first, self._scalars, self._counts, refs, parts)
        self._restart(self._first, self._first + k)
        return records

    def take(self) -> pa.RecordBatch | None:
        """take_records() as one Arrow record batch."""
        records = self.take_records()
        return None if records is None else to_batch(records)

    def drop(self) -> int:
        """Forget the records since the last take (they will never be written); returns their events."""
        events = sum(self._counts)
        end = self._first + len(self._counts)
        self._restart(end, end)
        return events

    def _restart(self, floor: int, first: int) -> None:
        self._floor, self._first = floor, first
        self._start()
        for topic, (starts, counts, numbers) in list(self._runs.items()):
            keep = bisect_left(numbers, floor)
            if keep == len(numbers):
                del self._runs[topic]
            elif keep:
                self._runs[topic] = (starts[keep:], counts[keep:], numbers[keep:])


class Records(NamedTuple):
    """Records as the buffer holds them: the first one's number, then per record its RECORD_VALUES (a tuple),
    its message count and its refs (None, or runs as dicts), and per MESSAGE_VALUES column one part per
    record: None (all null), a list of its messages' values, a Run, or Joined."""

    first: int
    scalars: list
    counts: list
    refs: list
    parts: list


def pack(records: Records) -> bytes:
    """Records as msgpack: an array of the five fields, a Run as the map {"v": value, "n": count}, Joined as
    {"j": text, "n": count}; a value msgpack cannot hold (a UUID) as its str()."""
    parts = [[{"v": p.value, "n": p.n} if type(p) is Run else {"j": p.text, "n": p.n} if type(p) is Joined else p
              for p in column] for column in records.parts]
    return msgpack.packb([records.first, records.scalars, records.counts, records.refs, parts], use_bin_type=True,
                         default=str)


def unpack(data: bytes) -> Records:
    first, scalars, counts, refs, parts = msgpack.unpackb(data, raw=False)
    return Records(first, scalars, counts, refs,
                   [[p if type(p) is not dict else Run(p["v"], p["n"]) if "v" in p else Joined(p["j"], p["n"])
                     for p in column] for column in parts])


def to_batch(records: Records) -> pa.RecordBatch:
    """Records as one Arrow record batch (schema.wire_schema())."""
    schema = wire_schema()
    k = len(records.counts)
    columns = list(zip(*records.scalars, strict=True))
    arrays = [pa.array(np.arange(records.first, records.first + k, dtype=np.int64)),
              pa.array(records.counts, pa.int32()),
              *[_array(list(values), schema.field(name).type) for name, values in zip(RECORD_VALUES, columns,
                                                                                     strict=True)],
              pa.array(records.refs, schema.field("refs").type),
              *[_list_array(parts, schema.field(name).type)
                for name, parts in zip(MESSAGE_VALUES, records.parts, strict=True)]]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


class Run(NamedTuple):
    """n messages' values that are all `value`."""

    value: object
    n: int

    def __len__(self) -> int:
        return self.n


class Joined(NamedTuple):
    """n strings without a NUL, joined by NUL: one object for the broker to keep and ship."""

    text: str
    n: int

    def __len__(self) -> int:
        return self.n


def _one(value) -> list | None:
    return None if value is None else [value]


def _attempts(attempts: tuple):
    """The attempts of a frame's messages: a Run when all are first attempts."""
    n = len(attempts)
    return Run(1, n) if attempts.count(1) == n else list(attempts)


def _columns(arrays) -> list[tuple]:
    """Message arrays as their columns, one tuple per field (zip: one pass in C over every value, cheaper
    than a pass per field, in C or in Python)."""
    return list(zip(*arrays, strict=False))  # (an array may hold more fields than the ten)


def _strings(columns: list[tuple], n: int) -> list:
    """A record's (ids, types, keys, business ids) from its messages' columns: a list of n values or a Run
    each, or None when all are null. A column whose values are all the same (often: one type, no key, no
    business id) ships one value."""
    ids = columns[M_ID]
    try:  # joined by NUL when no id holds one (a search for one NUL, not a count of them)
        joined = None if "\0" in "".join(ids) else "\0".join(ids)
    except TypeError:  # not all strings
        joined = None
    parts = [Joined(joined, n) if joined is not None else list(ids)]
    for values in (columns[M_TYPE], columns[M_KEY], columns[M_BUSINESS_ID]):
        first = values[0]
        if values.count(first) == n:
            parts.append(None if first is None else Run(first, n))
        else:
            parts.append(list(values))
    return parts


def _list_array(parts: list, kind: pa.DataType) -> pa.ListArray:
    """One list per record (None: a null list; a list of values; a Run) as a list array of `kind`."""
    lengths = np.fromiter((0 if p is None else len(p) for p in parts), dtype=np.int32, count=len(parts))
    offsets = pa.array(np.concatenate(([0], np.cumsum(lengths, dtype=np.int32))))
    held = [p for p in parts if p is not None]
    runs = [p for p in held if type(p) is Run]
    if len(runs) == len(held):  # the values of runs only: each run's value repeated, no object per value
        values = _array([r.value for r in runs], kind.value_type).take(
            pa.array(np.repeat(np.arange(len(runs), dtype=np.int32), [r.n for r in runs])))
    else:
        values = _split_strings(held, int(lengths.sum())) if kind.value_type == pa.string() else None
        if values is None:
            values = _array(list(chain.from_iterable(repeat(p.value, p.n) if type(p) is Run else
                                                     p.text.split("\0") if type(p) is Joined else p
                                                     for p in held)), kind.value_type)
    nulls = [p is None for p in parts]
    return pa.ListArray.from_arrays(offsets, values, type=kind, mask=pa.array(nulls) if any(nulls) else None)


def _split_strings(held: list, count: int) -> pa.Array | None:
    """The string values of `held` parts as one Arrow array, without a Python object per value: every part
    joined by NUL into one text that Arrow splits (a Joined part's text as it is). None when a value is not
    a string or holds a NUL (the caller takes the values one by one)."""
    texts = []
    try:
        for p in held:
            if type(p) is Joined:
                texts.append(p.text)
            else:
                text = "\0".join(repeat(p.value, p.n) if type(p) is Run else p)
                if text.count("\0") != len(p) - 1:
                    return None
                texts.append(text)
    except TypeError:  # a null or a value of another type
        return None
    data = np.frombuffer("\0".join(texts).encode(), dtype=np.uint8)
    cuts = np.flatnonzero(data == 0)  # a NUL byte in UTF-8 is only ever the NUL character
    if len(cuts) != count - 1 or len(data) - len(cuts) >= 2**31:
        return None
    offsets = np.empty(count + 1, dtype=np.int32)  # value i ends where the i-th NUL was, less the i NULs before
    offsets[0] = 0
    offsets[1:count] = cuts - np.arange(count - 1)
    offsets[count] = len(data) - (count - 1)
    return pa.StringArray.from_buffers(count, pa.py_buffer(offsets), pa.py_buffer(data[data != 0]))


def _array(values: list, kind: pa.DataType) -> pa.Array:
    """An Arrow array of `kind`; values of another type (a UUID, a numeric string) become str() or int()."""
    if kind == pa.string() and values:
        try:
            joined = "".join(values)
        except TypeError:  # a null or not a string
            joined = None
        if joined is not None and joined.isascii():  # one UTF-8 copy, cut by the values' lengths
            offsets = np.zeros(len(values) + 1, dtype=np.int32)
            np.cumsum(np.fromiter(map(len, values), dtype=np.int32, count=len(values)), out=offsets[1:])
            return pa.StringArray.from_buffers(len(values), pa.py_buffer(offsets), pa.py_buffer(joined.encode()))
    try:
        return pa.array(values, kind)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        convert = str if pa.types.is_string(kind) else int
        return pa.array([None if v is None else convert(v) for v in values], kind)
