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
from itertools import chain, islice, repeat
from operator import attrgetter, countOf, itemgetter, lt
from time import time_ns
from typing import NamedTuple

import msgpack
import numpy as np
import pyarrow as pa

from broker_core.protocol import M_BODY, M_BUSINESS_ID, M_ID, M_KEY, M_TYPE
from broker_core.tracing.schema import MESSAGE_VALUES, RECORD_VALUES, SIZED, wire_schema

_fields = attrgetter("fields")
_seq = attrgetter("seq")
_row_seq, _row_attempt, _row_fields = itemgetter(0), itemgetter(1), itemgetter(2)
_entry_message = itemgetter(0)
_body = itemgetter(M_BODY)
_STRINGS = (itemgetter(M_ID), itemgetter(M_TYPE), itemgetter(M_KEY), itemgetter(M_BUSINESS_ID))
_SHARED = itemgetter(M_TYPE, M_KEY, M_BUSINESS_ID)  # the values a batch's messages often all share


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
        self._refs: list = []
        self._parts: list[list] = [[] for _ in MESSAGE_VALUES]  # per column, per record: values or None

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
                      same_as=None, arrays=None, sizes=None, ids=None, shared=None) -> int | None:
        n = len(messages)
        if not n:
            return None
        number = self._first + len(self._counts)
        sized = event in SIZED
        scalars = (ts_us or time_ns() // 1000, event, topic, app_id, client_host, None, None, None)
        if same_as is not None and same_as >= self._floor and not sized:
            self._add(scalars, n, [None] * len(MESSAGE_VALUES), [(same_as, 0, n)])
            return None
        fields = arrays if arrays is not None else list(map(_fields, messages))
        if sized and sizes is None:
            sizes = list(map(len, map(_body, fields)))
        if sized:  # one value for a batch of equal bodies (counted without a list)
            sizes = Run(sizes[0], n) if countOf(sizes, sizes[0]) == n else list(sizes)
        self._add(scalars, n, [*_strings(fields, n, ids, shared), None, sizes if sized else None])
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
                   ts_us=None, attempt=None) -> None:
        n = len(rows)
        if not n:
            return
        scalars = (ts_us or time_ns() // 1000, event, topic, None, client_host, group, consumer, None)
        attempts = list(map(_row_attempt, rows)) if attempt is None else Run(attempt, n)
        self._framed(scalars, topic, list(map(_row_seq, rows)), lambda: list(map(_row_fields, rows)), attempts)

    def emit_attempts(self, event: str, topic: str, group: str, entries: list, *, consumer=None, client_host=None,
                      ts_us=None, seqs=None) -> None:
        if not entries:
            return
        scalars = (ts_us or time_ns() // 1000, event, topic, None, client_host, group, consumer, None)
        messages = list(map(_entry_message, entries))
        self._framed(scalars, topic, seqs if seqs is not None else list(map(_seq, messages)),
                     lambda: list(map(_fields, messages)), list(map(_row_attempt, entries)))

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
        self._refs.append(None if runs is None else [{"record": r, "offset": o, "count": c} for r, o, c in runs])
        for column, part in zip(self._parts, parts, strict=True):
            column.append(part)

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

    # --- shipping -----------------------------------------------------------------------------

    def take_records(self) -> Records | None:
        """The records since the last take (or drop), None if there are none; they stay nameable until the
        next take."""
        k = len(self._counts)
        if not k:
            return None
        records = Records(self._first, self._scalars, self._counts, self._refs, self._parts)
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


def _strings(fields: list, n: int, ids: list | None = None, shared: tuple | None = None) -> list:
    """A record's (ids, types, keys, business ids): a list of n values or a Run each, or None when all are
    null. A batch whose messages share type, key and business id (often: one type, no key, no business
    id) costs one pass for the three."""
    if shared is None and _SHARED(fields[-1]) == (first := _SHARED(fields[0])) and \
            countOf(map(_SHARED, fields), first) == n:
        shared = first
    ids = ids if ids is not None else list(map(_STRINGS[0], fields))
    try:
        joined = "\0".join(ids)
    except TypeError:  # not all strings
        joined = None
    parts = [Joined(joined, n) if joined is not None and joined.count("\0") == n - 1 else list(ids)]
    if shared is not None:
        return parts + [None if value is None else Run(value, n) for value in shared]
    for get in _STRINGS[1:]:
        values = list(map(get, fields))
        parts.append(None if countOf(values, None) == n else values)
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
        values = _array(list(chain.from_iterable(repeat(p.value, p.n) if type(p) is Run else
                                                 p.text.split("\0") if type(p) is Joined else p for p in held)),
                        kind.value_type)
    nulls = [p is None for p in parts]
    return pa.ListArray.from_arrays(offsets, values, type=kind, mask=pa.array(nulls) if any(nulls) else None)


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
