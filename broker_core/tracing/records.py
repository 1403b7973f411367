"""The broker's side of tracing without I/O: the sink methods (TraceSink) add records to a `RecordBuffer`;
`take_records()` hands over the records since the last take as plain lists (`Records`), which `pack` turns
into msgpack for the trace process in one call (a `Run` and a `Joined` are made as the maps they ship as,
values.run and values.joined), and a `Decoder` (in the trace process, after `unpack` read them back as Run
and Joined) into one Arrow record batch of schema.wire_schema(); `take()` does both at once (for a writer in
the same process).

The broker does as little per message as it can, and ships no message's bytes; the trace process does the
rest:
- a publish batch ships its first seq and its messages' ids, types, keys and business ids, each column
  taken from the messages when the record is emitted, in one compiled loop (columns.py): one text joined by
  NUL (`Joined`) when they are strings, a `Run` when they are all the same, else a plain list; and the body
  sizes (a `Run` when all are equal). (Shipping the store's encoded record instead, for the trace process to
  decode, costs the broker more: its kilobyte per message through the pipe cost more CPU than taking the
  values, bench/broker_trace_ratio.py);
- a publish batch's `stored` record names its `published` record (the handle `emit_messages` returned);
- a delivery or ack frame whose seqs lie within published records still nameable ships its seqs (its first
  seq and count when they are one run in order, else int64 bytes) and attempts only; the Decoder turns the seqs into runs of (record, offset, count) of those
  published records. Any other frame ships its messages' values.
Records are numbered across batches; a record may name records of its own batch and of the 15 taken
before it (NAMEABLE_TAKES; the writer resolves those), never of one dropped. The Decoder keeps the published
seq runs of as many batches, the window the buffer names from.
"""

from __future__ import annotations

import contextlib
import struct
from bisect import bisect_left, bisect_right
from collections import deque
from itertools import chain, repeat
from operator import itemgetter
from time import time_ns
from typing import NamedTuple

import msgpack
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from broker_core.tracing.columns import message_parts, strings_of
from broker_core.tracing.schema import MESSAGE_VALUES, RECORD_VALUES, RUN_TYPE, SIZED, wire_schema
from broker_core.tracing.values import Joined, Run, read_part, run

NAMEABLE_TAKES = 16  # a record may name records of its own batch and of the 15 taken before it
_NO_VALUES = (None,) * len(MESSAGE_VALUES)  # a record naming the messages of another
_FRAMED = (None, None, None, None)  # a frame naming its messages: their attempts only
_FIRST, _SECOND, _THIRD = itemgetter(0), itemgetter(1), itemgetter(2)
NEVER = 1 << 62  # a notify threshold no buffer reaches


class RecordBuffer:
    """Records added by the sink methods until taken. `notify()` (when given) is called from the adding of a
    record once the buffer holds `notify_records` records or `notify_events` events; its owner sets those
    (and may change them in the call), so a sink learns of its first record and of a full buffer by two
    comparisons per record, not a call."""

    def __init__(self, notify=None) -> None:
        self.notify = notify
        self.notify_records = self.notify_events = NEVER  # (until the owner sets them)
        self._first = 0  # the number of the first record since the last take
        self._floor = 0  # the first record a new record may name
        self._taken: deque[int] = deque(maxlen=NAMEABLE_TAKES - 1)  # the first records of the last takes
        self._start()
        # per topic, the seq runs of nameable published records: (first seqs, counts, record numbers)
        self._runs: dict[str, tuple[list, list, list]] = {}
        self._decoder: Decoder | None = None  # take()'s, for a writer in the same process

    def _start(self) -> None:
        self._scalars: list[tuple] = []
        self._counts: list[int] = []
        self._refs: list = []  # per record: None or its runs as (record, offset, count) tuples
        self._parts: list = []  # per record: one part per MESSAGE_VALUES column (turned into columns at take)
        self._seqs: list = []  # per record: None, a published batch's first seq, or a frame's seqs (int64 bytes)
        self.events = 0  # the events of the records since the last take

    @property
    def records(self) -> int:
        """Records since the last take() or drop()."""
        return len(self._counts)

    # --- the sink methods ---------------------------------------------------------------------

    def emit(self, event: str, *, message_id, topic, message_type, key=None, business_id=None, app_id=None,
             client_host=None, group=None, consumer=None, attempt=None, detail=None, size=None,
             ts_us=None) -> None:
        self._add((ts_us or time_ns() // 1000, event, topic, app_id, client_host, group, consumer, detail), 1,
                  [[message_id], run(message_type, 1), _one(key), _one(business_id), _one(attempt), _one(size)])

    def emit_messages(self, event: str, topic: str, messages: list, *, app_id=None, client_host=None, ts_us=None,
                      same_as=None, arrays: list | None = None) -> int | None:
        n = len(messages)
        if not n:
            return None
        number = self._first + len(self._counts)
        sized = event in SIZED
        scalars = (ts_us or time_ns() // 1000, event, topic, app_id, client_host, None, None, None)
        if same_as is not None and same_as >= self._floor and not sized:
            self._add(scalars, n, _NO_VALUES, [(same_as, 0, n)])
            return None
        if arrays is None:
            arrays = [m.fields for m in messages]
        if event != "published":
            self._add(scalars, n, message_parts(arrays, sized))
            return number
        first_seq = messages[0].seq  # a batch's seqs follow each other (the store appends it whole)
        self._add(scalars, n, message_parts(arrays, sized), None, first_seq)
        _add_run(self._runs, topic, first_seq, n, number)
        return number

    def emit_group(self, event: str, topic: str, group: str, rows: list, *, consumer=None, client_host=None,
                   ts_us=None) -> None:
        if not rows:
            return
        scalars = (ts_us or time_ns() // 1000, event, topic, None, client_host, group, consumer, None)
        self._framed(scalars, topic, list(map(_FIRST, rows)), list(map(_SECOND, rows)),
                     lambda: list(map(_THIRD, rows)))

    def emit_attempts(self, event: str, topic: str, group: str, entries: list, *, consumer=None, client_host=None,
                      ts_us=None) -> None:
        if not entries:
            return
        scalars = (ts_us or time_ns() // 1000, event, topic, None, client_host, group, consumer, None)
        self._framed(scalars, topic, [entry[0].seq for entry in entries], list(map(_SECOND, entries)),
                     lambda: [entry[0].fields for entry in entries])

    def close(self) -> None:
        return None

    # --- records ------------------------------------------------------------------------------

    def _framed(self, scalars: tuple, topic: str, seqs: list, attempts: list, arrays) -> None:
        """A delivery or ack frame: its seqs when the trace process can name their messages (one run as its
        first seq and count, else packed), else its messages' values (`arrays()`)."""
        n = len(seqs)
        ordered = sorted(seqs)  # (n - 1 comparisons when in order, cheaper than min() and max())
        low, high = ordered[0], ordered[-1]
        if not self._nameable(topic, low, high):
            self._add(scalars, n, [*strings_of(arrays(), n), _attempts(attempts), None])
        elif high - low == n - 1 and ordered == seqs:  # (the same int objects: compared by identity)
            self._add(scalars, n, [*_FRAMED, _attempts(attempts), None], None, [low, n])
        else:
            self._add(scalars, n, [*_FRAMED, _attempts(attempts), None], None, struct.pack(f"<{n}q", *seqs))

    def _add(self, scalars: tuple, n: int, parts, runs: list | None = None, seqs=None) -> None:
        self._scalars.append(scalars)
        counts = self._counts
        counts.append(n)
        self.events += n
        self._refs.append(runs)
        self._parts.append(parts)
        self._seqs.append(seqs)
        if len(counts) >= self.notify_records or self.events >= self.notify_events:
            self.notify()

    def _nameable(self, topic: str, low: int, high: int) -> bool:
        """Whether every seq from `low` to `high` is a message of a nameable published record (the runs
        spanning them, not each seq, are checked)."""
        runs = self._runs.get(topic)
        if runs is None:
            return False
        starts, counts, _ = runs
        j = bisect_right(starts, low) - 1
        if j < 0:
            return False
        end = starts[j] + counts[j]
        if low >= end:
            return False
        last = len(starts) - 1
        while end <= high:  # the runs after it must follow it without a gap up to `high`
            j += 1
            if j > last or starts[j] != end:
                return False
            end += counts[j]
        return True

    # --- shipping -----------------------------------------------------------------------------

    def take_records(self) -> Records | None:
        """The records since the last take (or drop), None if there are none; they stay nameable until the
        next take."""
        k = len(self._counts)
        if not k:
            return None
        parts = [list(column) for column in zip(*self._parts, strict=True)]
        records = Records(self._first, self._scalars, self._counts, self._refs, parts, self._seqs)
        self._taken.append(self._first)
        self._restart(self._taken[0], self._first + k)
        return records

    def take(self) -> pa.RecordBatch | None:
        """take_records() as one Arrow record batch (decoded here, as the trace process would)."""
        records = self.take_records()
        if records is None:
            return None
        if self._decoder is None:
            self._decoder = Decoder()
        return self._decoder.batch(read_parts(records))

    def drop(self) -> int:
        """Forget the records since the last take (they will never be written); returns their events."""
        events = sum(self._counts)
        end = self._first + len(self._counts)
        self._taken.clear()
        self._restart(end, end)
        return events

    def _restart(self, floor: int, first: int) -> None:
        self._floor, self._first = floor, first
        self._start()
        _prune(self._runs, floor)


def _add_run(runs: dict, topic: str, first_seq: int, n: int, number: int) -> None:
    """A published record's seqs: `n` from `first_seq` on, in record `number`."""
    starts, counts, numbers = runs.setdefault(topic, ([], [], []))
    if starts and first_seq < starts[-1] + counts[-1]:  # seqs started again (a new store)
        del starts[:], counts[:], numbers[:]
    starts.append(first_seq)
    counts.append(n)
    numbers.append(number)


def _prune(runs: dict, floor: int) -> None:
    """Forget the published runs of records before `floor`."""
    for topic, (starts, counts, numbers) in list(runs.items()):
        keep = bisect_left(numbers, floor)
        if keep == len(numbers):
            del runs[topic]
        elif keep:
            runs[topic] = (starts[keep:], counts[keep:], numbers[keep:])


class Records(NamedTuple):
    """Records as the buffer holds them: the first one's number, then per record its RECORD_VALUES (a tuple),
    its message count and its refs (None, or (record, offset, count) runs); per MESSAGE_VALUES column one
    part per record: None (all null, or values the Decoder fills in), a list of its messages' values, a Run,
    or Joined; and per record its seqs (None; a published record's first seq; a frame's seqs for the Decoder
    to name: [first, count] when they are one run in order, else little-endian int64 bytes)."""

    first: int
    scalars: list
    counts: list
    refs: list
    parts: list
    seqs: list


def pack(records: Records) -> bytes:
    """Records as msgpack, as they are: an array of the six fields, a Run as the map {"v": value, "n": count},
    Joined as {"j": text, "n": count} (values.run and values.joined made them so); a value msgpack cannot hold
    (a UUID) as its str()."""
    return msgpack.packb(records, use_bin_type=True, default=str)


def unpack(packed: bytes) -> Records:
    """pack's msgpack as Records whose parts the Decoder takes (read_parts)."""
    return read_parts(Records(*msgpack.unpackb(packed, raw=False)))


def read_parts(records: Records) -> Records:
    """Records as shipped, with their Run and Joined parts as those classes (values.read_part)."""
    return records._replace(parts=[[p if p is None or type(p) is list else read_part(p) for p in column]
                                   for column in records.parts])


class Decoder:
    """The trace process's side: shipped records as Arrow record batches, in the order they were taken. It
    names the messages of frames shipped as seqs, from the published seq runs of the batches a record may
    name (NAMEABLE_TAKES)."""

    def __init__(self) -> None:
        self._runs: dict[str, tuple[list, list, list]] = {}
        self._firsts: deque[int] = deque(maxlen=NAMEABLE_TAKES - 1)  # the first records of the last batches

    def batch(self, records: Records) -> pa.RecordBatch:
        refs = list(records.refs)
        for i, seqs in enumerate(records.seqs):
            if type(seqs) is int:
                _add_run(self._runs, records.scalars[i][2], seqs, records.counts[i], records.first + i)
            elif type(seqs) is list:  # a frame of one run of seqs: its first and its count
                refs[i] = self._name_run(records.scalars[i][2], seqs[0], seqs[1])
            elif seqs is not None:
                refs[i] = self._name(records.scalars[i][2], np.frombuffer(seqs, dtype="<i8").astype(np.int64))
        self._firsts.append(records.first)
        _prune(self._runs, self._firsts[0])
        return _arrow(records._replace(refs=refs))

    def _name_run(self, topic: str, seq: int, left: int) -> list:
        """_name() of the seqs `seq` .. `seq + left - 1`, run by run (no array)."""
        starts, counts, numbers = self._runs.get(topic, ([], [], []))
        j, named, total = bisect_right(starts, seq) - 1, [], left
        while left:
            if j < 0 or j >= len(starts) or not starts[j] <= seq < starts[j] + counts[j]:
                return [(-1, 0, total)]
            take = min(starts[j] + counts[j] - seq, left)
            named.append((numbers[j], seq - starts[j], take))
            seq, left, j = seq + take, left - take, j + 1
        return named

    def _name(self, topic: str, seqs: np.ndarray) -> list:
        """The (record, offset, count) runs of published records holding `seqs`, in their order; a run of
        record -1 (which the writer drops and counts) if one is not among the runs known."""
        starts, counts, numbers = self._runs.get(topic, ([], [], []))
        low, high = int(seqs.min()), int(seqs.max())
        j, last = bisect_right(starts, low) - 1, bisect_right(starts, high)
        if j < 0:
            return [(-1, 0, len(seqs))]
        first_seqs = np.array(starts[j:last], dtype=np.int64)
        at = np.searchsorted(first_seqs, seqs, side="right") - 1
        offsets = seqs - first_seqs[at]
        if np.any(offsets >= np.array(counts[j:last])[at]):
            return [(-1, 0, len(seqs))]
        record = np.array(numbers[j:last], dtype=np.int64)[at]
        cuts = np.flatnonzero((np.diff(record) != 0) | (np.diff(offsets) != 1)) + 1
        bounds = np.concatenate(([0], cuts, [len(seqs)]))
        return list(zip(record[bounds[:-1]].tolist(), offsets[bounds[:-1]].tolist(), np.diff(bounds).tolist(),
                        strict=True))


def to_batch(records: Records) -> pa.RecordBatch:
    """One batch of records on its own as an Arrow record batch (schema.wire_schema()): its frames may name
    published records of the same batch only."""
    return Decoder().batch(read_parts(records))


def _arrow(records: Records) -> pa.RecordBatch:
    """Records whose values and refs are all there as one Arrow record batch."""
    schema = wire_schema()
    k = len(records.counts)
    columns = list(zip(*records.scalars, strict=True))
    arrays = [pa.array(np.arange(records.first, records.first + k, dtype=np.int64)),
              pa.array(records.counts, pa.int32()),
              *[_array(list(values), schema.field(name).type) for name, values in zip(RECORD_VALUES, columns,
                                                                                     strict=True)],
              _refs_array(records.refs),
              *[_list_array(parts, schema.field(name).type)
                for name, parts in zip(MESSAGE_VALUES, records.parts, strict=True)]]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _refs_array(refs: list) -> pa.ListArray:
    """Per record None or its (record, offset, count) runs, as the `refs` column."""
    lengths = np.fromiter((0 if r is None else len(r) for r in refs), dtype=np.int32, count=len(refs))
    offsets = pa.array(np.concatenate(([0], np.cumsum(lengths, dtype=np.int32))))
    flat = np.array([run for r in refs if r is not None for run in r], dtype=np.int64).reshape(-1, 3)
    runs = pa.StructArray.from_arrays([pa.array(flat[:, 0]), pa.array(flat[:, 1].astype(np.int32)),
                                       pa.array(flat[:, 2].astype(np.int32))], fields=list(RUN_TYPE))
    nulls = [r is None for r in refs]
    return pa.ListArray.from_arrays(offsets, runs, type=pa.list_(RUN_TYPE),
                                    mask=pa.array(nulls) if any(nulls) else None)


def _one(value) -> list | None:
    return None if value is None else [value]


def _attempts(attempts: tuple):
    """The attempts of a frame's messages: a Run when all are first attempts."""
    n = len(attempts)
    return run(1, n) if attempts.count(1) == n else list(attempts)


def _list_array(parts: list, kind: pa.DataType) -> pa.ListArray:
    """One list per record (None: a null list; a list of values; a Run) as a list array of `kind`."""
    lengths = np.fromiter((0 if p is None else len(p) for p in parts), dtype=np.int32, count=len(parts))
    offsets = pa.array(np.concatenate(([0], np.cumsum(lengths, dtype=np.int32))))
    held = [p for p in parts if p is not None]
    runs = [p for p in held if type(p) is Run]
    if len(runs) == len(held):  # the values of runs only: each run's value repeated, no object per value
        values = _repeated(runs, kind.value_type)
    else:
        values = _split_strings(held, int(lengths.sum())) if kind.value_type == pa.string() else None
        if values is None:
            values = _array(list(chain.from_iterable(repeat(p.value, p.n) if type(p) is Run else
                                                     p.text.split("\0") if type(p) is Joined else p
                                                     for p in held)), kind.value_type)
    nulls = [p is None for p in parts]
    return pa.ListArray.from_arrays(offsets, values, type=kind, mask=pa.array(nulls) if any(nulls) else None)


def _repeated(runs: list, kind: pa.DataType) -> pa.Array:
    """Each run's value `n` times, as one array of `kind` made from buffers: a string's UTF-8 bytes repeated
    and their offsets by a numpy cumsum, an integer by `np.repeat` (taking an index per value, pyarrow `take`,
    was a quarter of the trace process's time). Values of another type go through `_array` and `take`."""
    counts = [r.n for r in runs]
    values = [r.value for r in runs]
    if kind == pa.string() and all(type(v) is str for v in values):
        encoded = [v.encode() for v in values]
        offsets = np.zeros(sum(counts) + 1, dtype=np.int64)
        np.cumsum(np.repeat(np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded)), counts),
                  out=offsets[1:])
        if offsets[-1] < 2**31:
            data = b"".join(text * n for text, n in zip(encoded, counts, strict=True))
            return pa.StringArray.from_buffers(len(offsets) - 1, pa.py_buffer(offsets.astype(np.int32)),
                                               pa.py_buffer(data))
    elif pa.types.is_integer(kind) and all(type(v) is int for v in values):
        with contextlib.suppress(OverflowError):  # (a value out of the column's range: refused by `_array`)
            return pa.array(np.repeat(np.array(values, dtype=kind.to_pandas_dtype()), counts), kind)
    return _array(values, kind).take(pa.array(np.repeat(np.arange(len(runs), dtype=np.int32), counts)))


def _split_strings(held: list, count: int) -> pa.Array | None:
    """The string values of `held` parts as one Arrow array, without a Python object per value: every part
    joined by NUL into one text that Arrow splits (pyarrow.compute.split_pattern, a third of the cost of
    finding the NULs with numpy and masking them out). None when a value is not a string or holds a NUL (the
    caller takes the values one by one): the text then splits into more than `count` values."""
    try:
        text = "\0".join(p.text if type(p) is Joined else "\0".join(repeat(p.value, p.n) if type(p) is Run else p)
                         for p in held)
    except TypeError:  # a null or a value of another type
        return None
    if len(text) >= 2**29:  # (its UTF-8, up to 4 bytes a character, must fit a string array's offsets)
        return None
    values = pc.split_pattern(pa.array([text], pa.string()), pattern="\0").flatten()
    return values if len(values) == count else None


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
