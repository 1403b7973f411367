"""Trace writers: rolling trace files of one broker node (docs/trace-events.md).

`ParquetTraceWriter` (what brokers write) builds Arrow record batches column-wise from whole shipped
chunks (`add_chunk`, from `broker_core.trace_process`) or from `emit` calls, appends them to the
open file `trace-<node>-<UTC time>-<seq>.arrows.open` (an Arrow IPC stream: a torn last batch is cut
on recovery, like a torn JSON line), and when that file reaches `max_bytes` or `max_age_s` converts it
to `trace-...-<seq>.parquet` (written as `.parquet.tmp`, fsynced, renamed; then the open file is
removed). Readers take only `*.parquet` (and `*.jsonl`) files, so a file is never read half-written.

`JsonlTraceWriter` writes the older JSON-lines files (one line per event, `*.jsonl.open` → `*.jsonl`);
the index still reads them.

In both, `emit` only appends a tuple to a deque (thread-safe in CPython, no lock, no I/O, no
formatting); a background thread drains it every `flush_interval_s`.

Nothing here imports Django or asyncio.
"""

from __future__ import annotations

import collections
import logging
import os
import secrets
import threading
import time
from json.encoder import encode_basestring_ascii as _quote
from pathlib import Path

from broker_core.trace import BatchEmitMixin
from broker_core.trace_records import NAMED_VALUES, RECORD_VALUES, event_ids, event_schema, records_schema
from broker_core.trace_records import read_parquet_events as _read_parquet_events

arrow_schema = event_schema  # the columns of an event (format 1)

log = logging.getLogger("broker_core.trace")

OPEN_SUFFIX = ".jsonl.open"
CLOSED_SUFFIX = ".jsonl"


class JsonlTraceWriter(BatchEmitMixin):
    """Trace sink for one broker node.

    directory        the trace folder, normally `<broker data dir>/trace` (created if missing)
    node_id          the broker's node id (in file names and in every event's `broker` field)
    cluster          the cluster name written in every event
    max_bytes        roll the open file once it holds this many bytes (default 64 MiB)
    max_age_s        roll the open file once it is this old, even if small (default 60 s)
    flush_interval_s how often the background thread drains the in-memory batch (default 0.2 s)
    max_pending      events held in memory before new ones are dropped and counted in `dropped`
                     (tracing never blocks or exhausts the broker when the disk stalls)
    """

    def __init__(
        self,
        directory: str | os.PathLike,
        *,
        node_id: str,
        cluster: str,
        max_bytes: int = 64 * 1024 * 1024,
        max_age_s: float = 60.0,
        flush_interval_s: float = 0.2,
        max_pending: int = 2_000_000,
    ) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.node_id = node_id
        self.cluster = cluster
        self.max_bytes = max_bytes
        self.max_age_s = max_age_s
        self.flush_interval_s = flush_interval_s
        self.max_pending = max_pending
        self.dropped = 0
        self.written = 0
        self.files_closed = 0
        self._pending: collections.deque = collections.deque()
        self._append = self._pending.append
        # event ids: a random prefix per writer plus a counter: unique across restarts, 32 hex chars
        self._id_prefix = secrets.token_hex(8)
        self._id_seq = 0
        self._tail = f',"cluster":{_quote(cluster)},"broker":{_quote(node_id)}}}\n'
        self._file = None
        self._file_path: Path | None = None
        self._file_bytes = 0
        self._file_opened = 0.0
        self._file_seq = 0
        self._io_lock = threading.Lock()
        self._stop = threading.Event()
        self._closed = False
        self.recover()
        self._file_seq = self._last_seq()
        self._thread = threading.Thread(target=self._run, name=f"trace-writer-{node_id}", daemon=True)
        self._thread.start()

    @classmethod
    def for_data_dir(cls, data_dir: str | os.PathLike, *, node_id: str, cluster: str, **options) -> JsonlTraceWriter:
        return cls(Path(data_dir) / "trace", node_id=node_id, cluster=cluster, **options)

    # --- the hot path -------------------------------------------------------------------

    def emit(
        self,
        event: str,
        *,
        message_id: str,
        topic: str,
        message_type: str,
        key: str | None = None,
        business_id: str | None = None,
        app_id: str | None = None,
        client_host: str | None = None,
        group: str | None = None,
        consumer: str | None = None,
        attempt: int | None = None,
        detail: str | None = None,
        size: int | None = None,
        ts_us: int | None = None,
    ) -> None:
        if len(self._pending) >= self.max_pending:
            self.dropped += 1
            return
        self._append((event, ts_us or time.time_ns() // 1000, message_id, topic, message_type, key,
                      business_id, app_id, client_host, group, consumer, attempt, detail, size))

    # --- background thread ----------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.wait(self.flush_interval_s):
            try:
                self.flush()
            except Exception:  # a full disk must not kill the thread; the next round retries
                log.exception("trace flush failed", extra={"trace_dir": str(self.directory)})

    def flush(self, roll: bool = False) -> None:
        """Write what is pending; roll the open file if it is due (or if `roll`)."""
        with self._io_lock:
            pending = self._pending
            count = len(pending)
            if count:
                self._write([pending.popleft() for _ in range(count)])
            if self._file is not None and (
                roll or self._file_bytes >= self.max_bytes or time.monotonic() - self._file_opened >= self.max_age_s
            ):
                self._roll()

    def _write(self, batch: list[tuple]) -> None:
        lines = []
        add = lines.append
        prefix = self._id_prefix
        seq = self._id_seq
        tail = self._tail
        for (event, ts_us, message_id, topic, message_type, key, business_id, app_id, client_host, group,
             consumer, attempt, detail, size) in batch:
            seq += 1
            line = (f'{{"v":1,"event_id":"{prefix}{seq:016x}","ts_us":{int(ts_us)},"event":{_quote(event)},'
                    f'"message_id":{_quote(str(message_id))},"topic":{_quote(topic)},'
                    f'"message_type":{_quote(message_type)}')
            if key is not None:
                line += ',"key":' + _quote(str(key))
            if business_id is not None:
                line += ',"business_id":' + _quote(str(business_id))
            if app_id is not None:
                line += ',"app_id":' + _quote(str(app_id))
            if client_host is not None:
                line += ',"client_host":' + _quote(str(client_host))
            if group is not None:
                line += ',"group":' + _quote(group)
            if consumer is not None:
                line += ',"consumer":' + _quote(str(consumer))
            if attempt is not None:
                line += f',"attempt":{int(attempt)}'
            if detail is not None:
                line += ',"detail":' + _quote(str(detail))
            if size is not None:
                line += f',"size":{int(size)}'
            add(line + tail)
        self._id_seq = seq
        data = "".join(lines).encode()
        if self._file is None:
            self._open()
        self._file.write(data)
        self._file.flush()
        self._file_bytes += len(data)
        self.written += len(batch)

    def _open(self) -> None:
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
        while True:  # a restarted node continues its sequence; never reuse a name
            self._file_seq += 1
            base = f"trace-{self.node_id}-{stamp}-{self._file_seq:06d}"
            if not any((self.directory / (base + s)).exists() for s in (OPEN_SUFFIX, CLOSED_SUFFIX)):
                break
        self._file_path = self.directory / (base + OPEN_SUFFIX)
        self._file = open(self._file_path, "ab")
        self._file_bytes = 0
        self._file_opened = time.monotonic()

    def _roll(self) -> None:
        """fsync, close and rename the open file to *.jsonl: from now on the index job may read it."""
        f, path = self._file, self._file_path
        self._file = self._file_path = None
        f.flush()
        os.fsync(f.fileno())
        f.close()
        os.rename(path, path.with_name(path.name[: -len(OPEN_SUFFIX)] + CLOSED_SUFFIX))
        _fsync_dir(self.directory)
        self.files_closed += 1

    def recover(self) -> list[Path]:
        """Close files a previous process of this node left open (killed): cut a torn last line, rename."""
        return recover_jsonl(self.directory, self.node_id, skip=self._file_path)

    def _last_seq(self) -> int:
        return last_seq(self.directory, self.node_id)

    def close(self) -> None:
        """Stop the thread, write what is pending and roll the last file. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        self._thread.join()
        self.flush(roll=True)


# --- Parquet --------------------------------------------------------------------------------

ARROWS_OPEN_SUFFIX = ".arrows.open"
PARQUET_SUFFIX = ".parquet"
PARQUET_TMP_SUFFIX = ".parquet.tmp"
# the columns of an event tuple (what `emit` queues)
EVENT_TUPLE = ("event", "ts_us", "message_id", "topic", "message_type", "key", "business_id", "app_id",
               "client_host", "group", "consumer", "attempt", "detail", "size")
# what a record of a chunk says once for all its messages, and what it has per message
RECORD = ("event", "topic", "ts_us", "app_id", "client_host", "group", "consumer", "detail")
PER_MESSAGE = ("message_id", "message_type", "key", "business_id", "attempt", "size")
HAS_ATTEMPT, HAS_SIZE = 1, 2
# CHUNK: what broker_core.trace_process ships (pickled), the records of one interval:
#   (first, scalars, counts, refs, ids, types, keys, business_ids, attempts, sizes)
#   first     the number of the chunk's first record (records are numbered across chunks)
#   scalars   one tuple per record: RECORD, then flags (HAS_ATTEMPT, HAS_SIZE: `attempts` / `sizes` hold
#             values for its messages)
#   counts    how many messages each record has
#   refs      (index in this chunk, [(number of an earlier record, offset, count), ...]): a record whose
#             messages are those runs of earlier records' (a publish batch's `stored` record: its whole
#             `published` record; a delivery or ack frame: runs of published records), which ships no
#             ids, types, keys or business ids of its own; the earlier records are in this chunk or in the
#             one before, and ship their own
#   ids, types, keys, business_ids   the other records' messages' values in turn, each column as bytes
#             (the values in UTF-8 joined by NUL: no Python object per value on either side), as (bytes,
#             [row, ...]) when those rows are null (empty in the bytes), None (all null), or a list (a
#             value that is not a string or holds a NUL)
#   attempts, sizes   the values of the flagged records' messages in turn: a list (None: null), or one int
#             when all are the same
# The open file holds a row per record, its messages' values as lists (broker_core.trace_records, format
# 2): the conversion at roll writes it to Parquet as it is.
OPEN_FORMAT = b"records-2"  # the open file's rows are the Parquet file's (broker_core.trace_records)
COMPACT_FORMAT = b"compact-1"  # the open files of earlier brokers: converted to Parquet files of format 1
ROW_GROUP = 1024 * 1024
RECORD_ROW_GROUP = 64 * 1024  # records (of format 2) per row group


def open_schema(metadata: dict | None = None):
    """The columns of an open (Arrow stream) trace file: those of a Parquet file of format 2."""
    return records_schema().with_metadata(metadata)


class ChunkDecoder:
    """Shipped chunks (CHUNK), in the order they were shipped, as Arrow columns. A reference is resolved
    against this chunk and the one before; one that cannot be (its record was dropped) drops its rows,
    counted in `unresolved`."""

    def __init__(self) -> None:
        self.unresolved = 0
        self._prev = None  # (first, is_ref, counts, own_start, own columns) of the last chunk

    def decode(self, chunk: tuple, names_from: int | None = None) -> tuple[list, object, list, object, dict]:
        """(scalars, counts, columns, numbers, named): the records' scalar tuples, their message counts
        (numpy), an Arrow array per PER_MESSAGE column with a value for each message of the records in
        turn, the records' numbers (numpy), and `named`: with `names_from`, the records (by index here)
        that name only messages of records numbered from `names_from` on keep those names, as
        [(number, offset, count), ...], and have no values in the first four columns (NAMED_VALUES); the
        other naming records get their values."""
        import numpy as np
        import pyarrow as pa

        prev, self._prev = self._prev, None  # (kept only if this chunk decodes)
        first, scalars, counts, refs, *strings, attempts, sizes = chunk
        k = len(scalars)
        counts = np.array(counts, dtype=np.int64).reshape(k)
        named = dict(refs)
        is_ref = np.zeros(k, dtype=bool)
        is_ref[list(named)] = True
        own_counts = np.where(is_ref, 0, counts)
        own_start = np.cumsum(own_counts) - own_counts
        own = [_strings(values, int(own_counts.sum())) for values in strings]
        columns, kept = own, counts
        numbers = np.arange(first, first + k, dtype=np.int64)
        kept_names = np.zeros(k, dtype=bool)
        if refs:
            runs, keep = [], np.ones(k, dtype=bool)  # (from the chunk before, start, count) in row order
            expanded = False
            for i in range(k):
                if not is_ref[i]:
                    runs.append((False, own_start[i], counts[i]))
                    continue
                found = self._resolve(named[i], first, i, is_ref, counts, own_start, prev)
                if found is None or sum(r[2] for r in found) != counts[i]:
                    keep[i] = False
                elif names_from is not None and all(number >= names_from for number, _, _ in named[i]):
                    kept_names[i] = True
                else:
                    runs += found
                    expanded = True
            if not keep.all():
                self.unresolved += int(counts[~keep].sum())
                flags = np.fromiter((s[8] for s in scalars), dtype=np.int8, count=k)
                attempts = _drop(attempts, flags & HAS_ATTEMPT, counts, keep)
                sizes = _drop(sizes, flags & HAS_SIZE, counts, keep)
                scalars = [s for s, k_ in zip(scalars, keep.tolist(), strict=True) if k_]
                kept = counts[keep]
                numbers = numbers[keep]
            if expanded:  # else the own values are the values, in turn
                earlier = prev[4] if prev is not None else [None] * len(own)
                runs = np.array(runs, dtype=np.int64).reshape(-1, 3)
                rows = int(counts[keep & ~kept_names].sum())
                columns = [_gather(o, p, runs, rows) for o, p in zip(own, earlier, strict=True)]
        self._prev = (first, is_ref, counts, own_start, own)
        flags = np.fromiter((s[8] for s in scalars), dtype=np.int8, count=len(scalars))
        n = int(kept.sum())
        columns = [*columns, _spread(attempts, flags & HAS_ATTEMPT, kept, n, pa.int32()),
                   _spread(sizes, flags & HAS_SIZE, kept, n, pa.int64())]
        index = {int(number): i for i, number in enumerate(numbers.tolist())}
        named = {index[first + i]: named[i] for i in np.flatnonzero(kept_names).tolist()}
        return scalars, kept, columns, numbers, named

    @staticmethod
    def _resolve(runs, first, i, is_ref, counts, own_start, prev):
        """(from the chunk before, start in its own values, count) of each named (record, offset, count), or
        None if one is not a record of this chunk before `i` or of the chunk before with its own values."""
        found = []
        for number, offset, count in runs:
            j = number - first
            if 0 <= j < i and not is_ref[j] and offset + count <= counts[j]:
                found.append((False, own_start[j] + offset, count))
            elif prev is not None and 0 <= (j := number - prev[0]) < len(prev[2]) and not prev[1][j] \
                    and offset + count <= prev[2][j]:
                found.append((True, prev[3][j] + offset, count))
            else:
                return None
        return found


def _strings(values, n: int):
    """A shipped string column (None, bytes, (bytes, null rows) or a list) as an Arrow string array of n
    values."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    if values is None:
        return pa.nulls(n, pa.string())
    nulls = None
    if isinstance(values, tuple):
        values, nulls = values
    array = _split(values, n) if isinstance(values, bytes) else _array(values, pa.string())
    if len(array) != n:
        raise ValueError(f"a shipped column has {len(array)} values for {n} messages")
    if nulls:
        null = np.zeros(n, dtype=bool)
        null[nulls] = True
        array = pc.if_else(pa.array(null), pa.scalar(None, pa.string()), array)
    return array


def _drop(values, flagged, counts, keep):
    """A chunk's attempts or sizes without those of the records not kept."""
    import numpy as np

    if not isinstance(values, list):
        return values  # one value for all
    rows = np.repeat(keep[flagged.astype(bool)], counts[flagged.astype(bool)])
    return [v for v, k in zip(values, rows.tolist(), strict=True) if k]


def _split(data: bytes, n: int):
    """n values joined by NUL as a string array: without a search when all have the same length (message
    ids mostly do), else split by Arrow."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    if n <= 1:
        return pa.array([data.decode()] if n else [], pa.string())
    width = data.find(b"\0")
    if width >= 0 and len(data) == n * (width + 1) - 1:
        raw = np.frombuffer(data, dtype=np.uint8)
        if not raw[width::width + 1].any():  # every separator where equal widths put it
            values = np.lib.stride_tricks.as_strided(raw, shape=(n, width), strides=(width + 1, 1))
            offsets = np.arange(n + 1, dtype=np.int32) * width
            return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(np.ascontiguousarray(values)))
    whole = pa.StringArray.from_buffers(1, pa.py_buffer(np.array([0, len(data)], dtype=np.int32)), pa.py_buffer(data))
    return pc.split_pattern(whole, "\x00").flatten()


def _gather(own, earlier, runs, n: int):
    """A column of n values taken in runs (from the chunk before, start, count) from this chunk's own
    values or the chunk before's: slices when the runs are long, else one `take`."""
    import numpy as np
    import pyarrow as pa

    from_prev, start, count = runs[:, 0].astype(bool), runs[:, 1], runs[:, 2]
    uses_prev = bool(from_prev.any())
    if own.null_count == len(own) and (not uses_prev or earlier.null_count == len(earlier)):
        return pa.nulls(n, own.type)
    end = start + count
    continued = np.zeros(len(start), dtype=bool)  # a run that goes on where the one before ended
    continued[1:] = (start[1:] == end[:-1]) & (from_prev[1:] == from_prev[:-1])
    heads = np.flatnonzero(~continued)
    if len(heads) * 32 <= n:
        lasts = np.append(heads[1:], len(start)) - 1
        return pa.concat_arrays([(earlier if from_prev[a] else own).slice(int(start[a]), int(end[b] - start[a]))
                                 for a, b in zip(heads.tolist(), lasts.tolist(), strict=True)])
    pool = pa.concat_arrays([earlier, own]) if uses_prev else own
    start = np.where(from_prev, start, start + len(earlier)) if uses_prev else start
    return pool.take(pa.array(np.repeat(start - (np.cumsum(count) - count), count) + np.arange(n)))


def _spread(values, flagged, counts, n: int, kind):
    """The values of the flagged records' messages (a list, or one int for all) as a column of all n
    messages (null elsewhere)."""
    import numpy as np
    import pyarrow as pa

    rows = np.repeat(flagged.astype(bool), counts)
    m = int(rows.sum())
    if isinstance(values, int):
        if m == n:
            return pa.array(np.full(n, values, dtype=kind.to_pandas_dtype()), kind)
        data = np.zeros(n, dtype=kind.to_pandas_dtype())
        data[rows] = values
        return pa.array(data, kind, mask=~rows)
    if len(values) != m:
        raise ValueError("a shipped chunk's attempts or sizes do not match its records")
    if not values:
        return pa.nulls(n, kind)
    array = _array(values, kind)
    if m == n:
        return array
    return array.take(pa.array(np.cumsum(rows) - 1, mask=~rows))


class ParquetTraceWriter(BatchEmitMixin):
    """Trace sink for one broker node writing Parquet files (see the module's docstring).

    directory        the trace folder, normally `<broker data dir>/trace` (created if missing)
    node_id          the broker's node id (in file names and in every event's `broker` field)
    cluster          the cluster name written in every event
    max_bytes        roll once the open (Arrow) file holds this many bytes (default 256 MiB, about 3.5
                     million events of 36-character message ids; the Parquet file is several times smaller)
    max_age_s        roll the open file once it is this old, even if small (default 60 s)
    flush_interval_s how often the background thread writes what is pending (default 0.2 s)
    max_pending      events held in memory before new ones are dropped and counted in `dropped`
    """

    def __init__(self, directory: str | os.PathLike, *, node_id: str, cluster: str,
                 max_bytes: int = 256 * 1024 * 1024, max_age_s: float = 60.0, flush_interval_s: float = 0.2,
                 max_pending: int = 2_000_000, compression: str = "lz4") -> None:
        # imported here, once: not in the thread's first flush (and missing ones fail here)
        import numpy  # noqa: F401
        import pyarrow.compute  # noqa: F401
        import pyarrow.parquet  # noqa: F401

        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.node_id = node_id
        self.cluster = cluster
        self.max_bytes = max_bytes
        self.max_age_s = max_age_s
        self.flush_interval_s = flush_interval_s
        self.max_pending = max_pending
        self.compression = compression
        self.dropped = 0
        self.written = 0
        self.files_closed = 0
        self.schema = open_schema()
        events = event_schema()
        self._message_types = {name: events.field(name).type for name in PER_MESSAGE}
        self._pending: collections.deque = collections.deque()  # event tuples (EVENT_TUPLE) from emit
        self._append = self._pending.append
        self._shipped: collections.deque = collections.deque()  # (chunk, count) from add_chunk
        self._shipped_count = 0
        self._count_lock = threading.Lock()
        self._decoder = ChunkDecoder()
        self._id_prefix = secrets.token_hex(8)  # event ids: a random prefix per writer plus a counter
        self._id_seq = 0
        self._sink = self._stream = None
        self._file_path: Path | None = None
        self._file_first_record: int | None = None  # the number of the open file's first shipped record
        self._file_opened = 0.0
        self._file_seq = 0
        self._io_lock = threading.Lock()
        self._stop = threading.Event()
        self._closed = False
        self._lock = _lock_node(self.directory, node_id)
        self.recover()
        self._file_seq = last_seq(self.directory, node_id)
        self._thread = threading.Thread(target=self._run, name=f"trace-writer-{node_id}", daemon=True)
        self._thread.start()

    @classmethod
    def for_data_dir(cls, data_dir: str | os.PathLike, *, node_id: str, cluster: str,
                     **options) -> ParquetTraceWriter:
        return cls(Path(data_dir) / "trace", node_id=node_id, cluster=cluster, **options)

    # --- what the broker (or its trace process) hands over ----------------------------------

    def emit(self, event: str, *, message_id: str, topic: str, message_type: str, key: str | None = None,
             business_id: str | None = None, app_id: str | None = None, client_host: str | None = None,
             group: str | None = None, consumer: str | None = None, attempt: int | None = None,
             detail: str | None = None, size: int | None = None, ts_us: int | None = None) -> None:
        if len(self._pending) + self._shipped_count >= self.max_pending:
            self.dropped += 1
            return
        self._append((event, ts_us or time.time_ns() // 1000, message_id, topic, message_type, key,
                      business_id, app_id, client_host, group, consumer, attempt, detail, size))

    def add_chunk(self, chunk: tuple) -> None:
        """Take a shipped chunk (see CHUNK above) as it is; chunks must come in the order they were shipped."""
        count = sum(chunk[2])
        with self._count_lock:
            if len(self._pending) + self._shipped_count + count > self.max_pending:
                self.dropped += count
                return
            self._shipped_count += count
        self._shipped.append((chunk, count))

    # --- background thread ----------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.wait(self.flush_interval_s):
            try:
                self.flush()
            except Exception:  # a full disk must not kill the thread; the next round retries
                log.exception("trace flush failed", extra={"trace_dir": str(self.directory)})

    def flush(self, roll: bool = False) -> None:
        """Write what is pending (emitted events, then shipped chunks); roll the open file if it is due
        (or if `roll`)."""
        with self._io_lock:
            pending, shipped = self._pending, self._shipped
            events = [pending.popleft() for _ in range(len(pending))]
            chunks = [shipped.popleft() for _ in range(len(shipped))]
            try:
                if events:
                    self._write(self._event_batch(events))
                decoder = self._decoder
                unresolved = decoder.unresolved
                if chunks and self._file_first_record is None:  # these chunks start the file (no roll before
                    self._file_first_record = chunks[0][0][0]  # the end of this flush): names from here on stay
                parts = [decoder.decode(chunk, self._file_first_record) for chunk, _ in chunks]
                self.dropped += decoder.unresolved - unresolved
                for part in parts:  # a batch each: nothing is copied to join them
                    batch = self._open_batch(part)
                    if batch is not None:
                        self._write(batch)
            finally:
                if chunks:
                    with self._count_lock:
                        self._shipped_count -= sum(c[1] for c in chunks)
            if self._stream is not None and (
                roll or self._sink.tell() >= self.max_bytes or time.monotonic() - self._file_opened >= self.max_age_s
            ):
                self._roll()

    def _event_batch(self, events: list[tuple]):
        """A record batch of the open file from EVENT_TUPLE tuples (`emit`): a record of one message each."""
        import numpy as np

        columns = dict(zip(EVENT_TUPLE, zip(*events, strict=True), strict=True))
        return self._records(list(zip(*(columns[name] for name in RECORD), strict=True)),
                             np.ones(len(events), dtype=np.int64),
                             [_array(list(columns[name]), self._message_types[name]) for name in PER_MESSAGE])

    def _open_batch(self, part: tuple):
        """A record batch of the open file from a decoded chunk."""
        scalars, counts, columns, numbers, named = part
        if not counts.all():  # a record of no message has no row (and is never named: it has no messages)
            keep = counts > 0
            index = (keep.cumsum() - 1).tolist()
            named = {index[i]: runs for i, runs in named.items()}
            scalars = [s for s, k in zip(scalars, keep.tolist(), strict=True) if k]
            counts, numbers = counts[keep], numbers[keep]
        if not len(counts):
            return None
        return self._records(scalars, counts, columns, numbers, named)

    def _records(self, scalars: list, counts, columns: list, numbers=None, named=None):
        """A record batch of format 2 (broker_core.trace_records) from records in turn: their `scalars`
        (RECORD values first), message `counts`, the values of all their messages per PER_MESSAGE column,
        their `numbers` and, by index, the runs of earlier records' messages that some of them name. Such a
        record keeps its names if they are of this file, else it gets the values (the names' records went
        to the file before); a list of nulls only is written as a null list."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        k = len(counts)
        starts = np.cumsum(counts) - counts
        is_named = np.zeros(k, dtype=bool)
        runs = [None] * k
        for i, named_runs in (named or {}).items():
            is_named[i] = True
            runs[i] = [{"record": number, "offset": offset, "count": count} for number, offset, count in named_runs]
        per_record = dict(zip(RECORD, zip(*scalars, strict=False), strict=False))
        same = {"cluster": self.cluster, "broker": self.node_id, "event_id_prefix": self._id_prefix}
        schema = self.schema
        arrays = [pa.array(np.full(k, 2, dtype=np.int32)),
                  pa.nulls(k, pa.int64()) if numbers is None else pa.array(numbers, pa.int64()),
                  pa.array(counts.astype(np.int32))]
        for name in RECORD_VALUES:
            kind = schema.field(name).type
            if name in same:
                arrays.append(pa.array([same[name]] * k, kind))
            elif name == "event_id_first":  # each record's first event id
                arrays.append(pa.array(self._id_seq + 1 + starts, kind))
            else:
                arrays.append(_array(list(per_record[name]), kind))
        arrays.append(pa.array(runs, schema.field("refs").type))
        for name, column in zip(PER_MESSAGE, columns, strict=True):
            empty = is_named.copy() if name in NAMED_VALUES else np.zeros(k, dtype=bool)  # records with no list
            if column.null_count:  # a record whose values are all null gets a null list
                held = np.where(empty, 0, counts)  # the values the column holds per record
                has = held > 0
                if column.null_count == len(column):
                    all_null = has
                else:
                    nulls = np.add.reduceat(np.asarray(pc.is_null(column), dtype=np.int64), (np.cumsum(held) - held)[has])
                    all_null = np.zeros(k, dtype=bool)
                    all_null[has] = nulls == held[has]
                if all_null.any():
                    column = column.filter(pa.array(~np.repeat(all_null, held)))
                    empty |= all_null
            lengths = np.where(empty, 0, counts)
            offsets = pa.array(np.concatenate(([0], np.cumsum(lengths))).astype(np.int32))
            arrays.append(pa.ListArray.from_arrays(offsets, column, mask=pa.array(empty) if empty.any() else None))
        return pa.RecordBatch.from_arrays(arrays, schema=schema)

    def _write(self, batch) -> None:
        import pyarrow.compute as pc

        if self._stream is None:
            self._open()
        self._stream.write_batch(batch)
        self._sink.flush()
        events = int(pc.sum(batch.column("count")).as_py() or 0)
        self._id_seq += events
        self.written += events

    def _open(self) -> None:
        import pyarrow as pa

        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
        while True:  # a restarted node continues its sequence; never reuse a name
            self._file_seq += 1
            base = f"trace-{self.node_id}-{stamp}-{self._file_seq:06d}"
            if not any((self.directory / (base + s)).exists()
                       for s in (ARROWS_OPEN_SUFFIX, PARQUET_SUFFIX, PARQUET_TMP_SUFFIX, OPEN_SUFFIX, CLOSED_SUFFIX)):
                break
        self._file_path = self.directory / (base + ARROWS_OPEN_SUFFIX)
        self._sink = pa.OSFile(str(self._file_path), "wb")
        self._stream = pa.ipc.new_stream(self._sink, self.schema.with_metadata({"switchyard.trace": OPEN_FORMAT}))
        self._file_opened = time.monotonic()

    def _roll(self) -> None:
        """Close the open file and convert it: from now on the index job may read its Parquet file."""
        stream, sink, path = self._stream, self._sink, self._file_path
        self._stream = self._sink = self._file_path = self._file_first_record = None
        stream.close()
        sink.close()
        _arrows_to_parquet(path, self.compression)
        self.files_closed += 1

    def recover(self) -> list[Path]:
        """Finish files a previous process of this node left (killed): open Arrow files (a torn last
        batch cut) become Parquet files, half-written Parquet files are removed; old JSON-lines files
        left open are closed as JsonlTraceWriter would."""
        closed = recover_jsonl(self.directory, self.node_id)
        for tmp in self.directory.glob(f"trace-{self.node_id}-*{PARQUET_TMP_SUFFIX}"):
            tmp.unlink()
        for path in sorted(self.directory.glob(f"trace-{self.node_id}-*{ARROWS_OPEN_SUFFIX}")):
            if path == self._file_path:
                continue
            target = _arrows_to_parquet(path, self.compression)
            if target is not None:
                closed.append(target)
        if closed:
            log.info("closed trace files left open by a previous run",
                     extra={"trace_dir": str(self.directory), "files": [p.name for p in closed]})
        return closed

    def close(self) -> None:
        """Stop the thread, write what is pending and roll the last file. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        self._thread.join()
        try:
            self.flush(roll=True)
        finally:
            self._lock.close()  # (released anyway when the process ends, also killed)


def _lock_node(directory: Path, node_id: str, wait_s: float = 30.0):
    """Hold `<dir>/.trace-<node>.lock` while writing: a writer started while the previous one (a killed
    broker's trace process) still finishes its file waits for it instead of recovering that file too."""
    import fcntl

    lock = open(directory / f".trace-{node_id}.lock", "w")
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return lock
        except BlockingIOError:
            if time.monotonic() > deadline:
                log.warning("another trace writer of this node still runs; going on without waiting",
                            extra={"trace_dir": str(directory)})
                return lock
            time.sleep(0.05)


def _array(values: list, kind):
    """An Arrow array of `kind`; values of another type (a UUID, a numeric string) are converted as the
    JSON-lines writer did (str() / int())."""
    import pyarrow as pa

    try:
        return pa.array(values, kind)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        convert = str if pa.types.is_string(kind) else int
        return pa.array([None if v is None else convert(v) for v in values], kind)


def _arrows_to_parquet(path: Path, compression: str = "lz4") -> Path | None:
    """Write the complete record batches of an Arrow stream file as `<base>.parquet` (via a fsynced
    `.parquet.tmp` and a rename), then remove the stream file. Idempotent: a crash at any point leaves
    either the stream file (done again next time) or the finished Parquet file."""
    import pyarrow as pa

    base = path.name[: -len(ARROWS_OPEN_SUFFIX)]
    target = path.with_name(base + PARQUET_SUFFIX)
    if target.exists():  # converted before a crash; only the removal was missing
        path.unlink()
        _fsync_dir(path.parent)
        return None
    batches = []
    schema = None
    try:
        with pa.memory_map(str(path)) as source:
            reader = pa.ipc.open_stream(source)
            schema = reader.schema
            while True:
                try:
                    batches.append(reader.read_next_batch())
                except StopIteration:
                    break
    except (pa.ArrowInvalid, OSError, EOFError) as exc:  # a torn last batch (or a torn header)
        if schema is None or not batches:
            log.info("trace file without a complete batch removed", extra={"path": str(path), "error": str(exc)})
    rows = sum(b.num_rows for b in batches)
    if rows:
        tmp = path.with_name(base + PARQUET_TMP_SUFFIX)
        layout = (schema.metadata or {}).get(b"switchyard.trace")
        if layout == OPEN_FORMAT:
            _write_records(batches, schema, tmp, compression)
        elif layout == COMPACT_FORMAT:  # an earlier broker's open file
            _write_open_batches(batches, schema.metadata, tmp, compression)
        else:  # a file of the earlier layout: every column as it is
            _write_full_batches(batches, schema, tmp, compression)
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(tmp, target)
        _fsync_dir(path.parent)
    path.unlink()
    _fsync_dir(path.parent)
    return target if rows else None


# the columns of a Parquet trace file written dictionary-encoded: a record's value, or the file's
DICTIONARY_COLUMNS = ("event", "topic", "app_id", "client_host", "group", "consumer", "detail", "cluster", "broker")


def _write_records(batches: list, schema, tmp: Path, compression: str) -> None:
    """The batches of an open file (OPEN_FORMAT) as a Parquet trace file of format 2, as they are: the
    record columns dictionary-encoded, message types too (a few types, many messages), statistics on
    `ts_us` only."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_batches(batches, schema=schema.remove_metadata())
    pq.write_table(table, str(tmp), compression=compression, row_group_size=RECORD_ROW_GROUP, store_schema=False,
                   use_dictionary=[*DICTIONARY_COLUMNS, "event_id_prefix", "message_type"],
                   write_statistics=["ts_us"])


def _write_open_batches(batches: list, metadata: dict, tmp: Path, compression: str) -> None:
    """The batches of an open file (OPEN_FORMAT) as a Parquet trace file of every column. A record's
    values become one dictionary per column for the whole file (each record's value hashed once, each row
    given its record's index): Parquet writes such a column dictionary-encoded without looking at its
    rows, and the file stores plain string columns (no Arrow schema kept)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    record_of_row, records = [], 0
    for b in batches:
        ends = b.column(0).run_ends.to_numpy()
        for i in range(1, len(RECORD)):
            if not np.array_equal(b.column(i).run_ends.to_numpy(), ends):
                raise ValueError("an open trace file's record columns have different runs")
        record_of_row.append(np.repeat(np.arange(records, records + len(ends), dtype=np.int32),
                                       np.diff(ends, prepend=0)))
        records += len(ends)
    record_of_row = np.concatenate(record_of_row)
    per_record = {}
    for i, name in enumerate(RECORD):
        values = pa.concat_arrays([b.column(i).values for b in batches])
        per_record[name] = values if name == "ts_us" else values.dictionary_encode()
    per_message = {name: pa.chunked_array([b.column(name) for b in batches]) for name in PER_MESSAGE}
    same = {name: pa.array([metadata[name.encode()].decode()]) for name in ("cluster", "broker")}
    prefix, first_id = metadata[b"event_id_prefix"].decode(), int(metadata[b"event_id_first"])
    schema = arrow_schema()
    writer = None
    try:
        for start in range(0, len(record_of_row), ROW_GROUP):
            n = min(ROW_GROUP, len(record_of_row) - start)
            take = pa.array(record_of_row[start:start + n])
            zeros = pa.array(np.zeros(n, dtype=np.int32))
            columns = {"v": pa.array(np.ones(n, dtype=np.int32)), "event_id": event_ids(prefix, first_id + start, n),
                       **{name: pa.DictionaryArray.from_arrays(zeros, value) for name, value in same.items()},
                       **{name: per_message[name].slice(start, n) for name in PER_MESSAGE}}
            for name, values in per_record.items():
                columns[name] = (values.take(take) if name == "ts_us" else
                                 pa.DictionaryArray.from_arrays(values.indices.take(take), values.dictionary))
            table = pa.Table.from_arrays([columns[f.name] for f in schema], names=schema.names)
            if writer is None:
                writer = pq.ParquetWriter(str(tmp), table.schema, compression=compression, store_schema=False,
                                          use_dictionary=list(DICTIONARY_COLUMNS), write_statistics=["ts_us"])
            writer.write_table(table, row_group_size=ROW_GROUP)
    finally:
        if writer is not None:
            writer.close()


def _write_full_batches(batches: list, schema, tmp: Path, compression: str) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_batches(batches, schema=schema)
    # no dictionaries (hashing every value costs more than LZ4 on the plain values), statistics on
    # ts_us only: about 40% of the CPU of pyarrow's defaults, for a file about as small
    pq.write_table(table, str(tmp), compression=compression, row_group_size=ROW_GROUP, use_dictionary=False,
                   write_statistics=["ts_us"])


def read_trace_events(directory: str | os.PathLike) -> list[dict]:
    """Every event of the closed trace files under `directory` (Parquet and JSON lines), in file order,
    as dicts of the fields present (None-valued fields left out): for tests and tools."""
    import json

    events = []
    for path in sorted(Path(directory).rglob("trace-*")):
        if path.name.endswith(PARQUET_SUFFIX):
            events += [{k: v for k, v in row.items() if v is not None}
                       for row in _read_parquet_events(str(path)).to_pylist()]
        elif path.name.endswith(CLOSED_SUFFIX):
            events += [json.loads(line) for line in path.read_text().splitlines() if line]
    return events


def recover_jsonl(directory: Path, node_id: str, skip: Path | None = None) -> list[Path]:
    """Close JSON-lines files a previous process of this node left open: cut a torn last line, rename."""
    closed = []
    for path in sorted(directory.glob(f"trace-{node_id}-*{OPEN_SUFFIX}")):
        if path == skip:
            continue
        with open(path, "r+b") as f:
            data = f.read()
            keep = data.rfind(b"\n") + 1
            if keep != len(data):
                f.truncate(keep)
            f.flush()
            os.fsync(f.fileno())
        target = path.with_name(path.name[: -len(OPEN_SUFFIX)] + CLOSED_SUFFIX)
        if keep:
            os.rename(path, target)
            closed.append(target)
        else:
            path.unlink()
    if closed:
        _fsync_dir(directory)
        log.info("closed trace files left open by a previous run",
                 extra={"trace_dir": str(directory), "files": [p.name for p in closed]})
    return closed


def last_seq(directory: Path, node_id: str) -> int:
    """The highest file sequence number of this node's trace files, of any format (0 if none)."""
    seqs = [0]
    for path in directory.glob(f"trace-{node_id}-*"):
        tail = path.name.split(".", 1)[0].rsplit("-", 1)[-1]
        if tail.isdigit():
            seqs.append(int(tail))
    return max(seqs)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
