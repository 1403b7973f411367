"""Trace writers: rolling trace files of one broker node (docs/trace-events.md).

`ParquetTraceWriter` (what brokers write) builds Arrow record batches column-wise from whole shipped
batches (`add_shipped`, from `broker_core.trace_process`) or from `emit` calls, appends them to the
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
import functools
import itertools
import logging
import os
import secrets
import threading
import time
from json.encoder import encode_basestring_ascii as _quote
from pathlib import Path

from broker_core.trace import BatchEmitMixin

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
# the columns an event tuple / a shipped record carries, in the order of ParquetTraceWriter's tuples
EVENT_TUPLE = ("event", "ts_us", "message_id", "topic", "message_type", "key", "business_id", "app_id",
               "client_host", "group", "consumer", "attempt", "detail", "size")
# a shipped record: one event kind for many messages
RECORD = ("event", "topic", "ts_us", "app_id", "client_host", "group", "consumer", "detail",
          "ids", "types", "keys", "business_ids", "attempts", "sizes")
# CHUNK: a shipped chunk (what broker_core.trace_process ships): many records flattened, so the cost per
# record is one tuple, however small the frames were:
#   (scalars, counts, ids, types, keys, business_ids, attempts, sizes)
#   scalars  one tuple per record: RECORD[:8] (event, topic, ts_us, app_id, client_host, group, consumer, detail)
#   counts   how many messages each record has
#   ids ...  one value per message of all the records in turn (attempts, sizes: None where not applicable)
PER_MESSAGE = ("message_id", "message_type", "key", "business_id", "attempt", "size")


def chunk_from_records(records: list[tuple]) -> tuple:
    """RECORD tuples as one chunk."""
    scalars, counts = [], []
    columns: list[list] = [[] for _ in PER_MESSAGE]
    for record in records:
        scalars.append(record[:8])
        n = len(record[8])
        counts.append(n)
        for column, values in zip(columns, record[8:], strict=True):
            column.extend(values if values is not None else [None] * n)
    return (scalars, counts, *columns)


def arrow_schema():
    """The columns of a Parquet trace file: docs/trace-events.md, format version 1."""
    import pyarrow as pa

    s = pa.string()
    return pa.schema([("v", pa.int32()), ("event_id", s), ("ts_us", pa.int64()), ("event", s), ("message_id", s),
                      ("topic", s), ("message_type", s), ("key", s), ("business_id", s), ("cluster", s),
                      ("broker", s), ("app_id", s), ("client_host", s), ("group", s), ("consumer", s),
                      ("attempt", pa.int32()), ("detail", s), ("size", pa.int64())])


class ParquetTraceWriter(BatchEmitMixin):
    """Trace sink for one broker node writing Parquet files (see the module's docstring).

    directory        the trace folder, normally `<broker data dir>/trace` (created if missing)
    node_id          the broker's node id (in file names and in every event's `broker` field)
    cluster          the cluster name written in every event
    max_bytes        roll once the open (Arrow) file holds this many bytes (default 256 MiB, about
                     1.3 million events; the Parquet file is several times smaller)
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
        self.schema = arrow_schema()
        self._pending: collections.deque = collections.deque()  # event tuples (EVENT_TUPLE) from emit
        self._append = self._pending.append
        self._shipped: collections.deque = collections.deque()  # (chunk, count) from add_chunk / add_shipped
        self._shipped_count = 0
        self._count_lock = threading.Lock()
        self._id_prefix = secrets.token_hex(8)  # event ids: a random prefix per writer plus a counter
        self._id_seq = 0
        self._sink = self._stream = None
        self._file_path: Path | None = None
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

    def add_shipped(self, events: list[tuple], records: list[tuple]) -> None:
        """Take a shipped batch: `events` are EVENT_TUPLE tuples, `records` RECORD tuples."""
        for event in events:
            self.emit(event[0], **dict(zip(EVENT_TUPLE[1:], event[1:], strict=True)))
        if records:
            self.add_chunk(chunk_from_records(records))

    def add_chunk(self, chunk: tuple) -> None:
        """Take a shipped chunk (see CHUNK above) as it is."""
        count = len(chunk[2])
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
        """Write what is pending (emitted events, then shipped records); roll the open file if it is due
        (or if `roll`)."""
        with self._io_lock:
            pending, shipped = self._pending, self._shipped
            events = [pending.popleft() for _ in range(len(pending))]
            chunks = [shipped.popleft() for _ in range(len(shipped))]
            try:
                for batch in (self._event_batch(events) if events else None,
                              self._chunk_batch([c[0] for c in chunks]) if chunks else None):
                    if batch is not None and batch.num_rows:
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
        """A record batch from EVENT_TUPLE tuples (emit)."""
        cols = dict(zip(EVENT_TUPLE, zip(*events, strict=True), strict=True))
        return self._assemble(len(events), {name: _array(values, self.schema.field(name).type)
                                            for name, values in cols.items()})

    def _chunk_batch(self, chunks: list[tuple]):
        """A record batch from shipped chunks, column-wise: what is one value per record (kind, topic,
        time, app, host, group, consumer, detail) is converted once per record and spread over its
        rows with `take`; per-message values are converted from the shipped lists as they are."""
        import numpy as np
        import pyarrow as pa

        one = len(chunks) == 1
        scalars = chunks[0][0] if one else [s for c in chunks for s in c[0]]
        counts = np.fromiter(chunks[0][1] if one else (n for c in chunks for n in c[1]), dtype=np.int64)
        per_record = list(zip(*scalars, strict=True))
        take = pa.array(np.repeat(np.arange(len(scalars), dtype=np.int32), counts))
        schema = self.schema
        arrays = {name: _array(list(per_record[i]), schema.field(name).type).take(take)
                  for i, name in enumerate(RECORD[:8])}
        for i, name in enumerate(PER_MESSAGE, start=2):
            values = chunks[0][i] if one else list(itertools.chain.from_iterable(c[i] for c in chunks))
            arrays[name] = _array(values, schema.field(name).type)
        return self._assemble(int(counts.sum()), arrays)

    def _assemble(self, n: int, arrays: dict):
        import pyarrow as pa

        arrays["v"] = pa.repeat(pa.scalar(1, pa.int32()), n)
        arrays["event_id"] = self._event_ids(n)
        arrays["cluster"] = pa.repeat(pa.scalar(self.cluster, pa.string()), n)
        arrays["broker"] = pa.repeat(pa.scalar(self.node_id, pa.string()), n)
        return pa.RecordBatch.from_arrays([arrays[f.name] for f in self.schema], schema=self.schema)

    def _event_ids(self, n: int):
        """n event ids, 32 hex characters each: this writer's random prefix and a counter (numpy: four
        table lookups of 4 hex digits per id)."""
        import numpy as np
        import pyarrow as pa

        seqs = np.arange(self._id_seq + 1, self._id_seq + n + 1, dtype=np.uint64)
        self._id_seq += n
        data = np.empty((n, 8), dtype=np.uint32)  # 32 characters a row, as 8 groups of 4
        data[:, :4] = np.frombuffer(self._id_prefix.encode(), dtype=np.uint32)
        hex4 = _hex4()
        for i, shift in enumerate((48, 32, 16, 0)):
            data[:, 4 + i] = hex4[(seqs >> np.uint64(shift)).astype(np.uint16)]
        offsets = np.arange(0, 32 * (n + 1), 32, dtype=np.int32)
        return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(data))

    def _write(self, batch) -> None:
        if self._stream is None:
            self._open()
        self._stream.write_batch(batch)
        self._sink.flush()
        self.written += batch.num_rows

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
        self._stream = pa.ipc.new_stream(self._sink, self.schema)
        self._file_opened = time.monotonic()

    def _roll(self) -> None:
        """Close the open file and convert it: from now on the index job may read its Parquet file."""
        stream, sink, path = self._stream, self._sink, self._file_path
        self._stream = self._sink = self._file_path = None
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


@functools.cache
def _hex4():
    """The 4 lowercase hex digits of 0..65535, each as the uint32 of its 4 bytes."""
    import numpy as np

    return np.frombuffer(b"".join(b"%04x" % i for i in range(65536)), dtype=np.uint32)


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
    import pyarrow.parquet as pq

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
        table = pa.Table.from_batches(batches, schema=schema)
        # no dictionaries (hashing every value costs more than LZ4 on the plain values), statistics on
        # ts_us only: about 40% of the CPU of pyarrow's defaults, for a file about as small
        pq.write_table(table, str(tmp), compression=compression, row_group_size=1024 * 1024,
                       use_dictionary=False, write_statistics=["ts_us"])
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


def read_trace_events(directory: str | os.PathLike) -> list[dict]:
    """Every event of the closed trace files under `directory` (Parquet and JSON lines), in file order,
    as dicts of the fields present (None-valued fields left out): for tests and tools."""
    import json

    events = []
    for path in sorted(Path(directory).rglob("trace-*")):
        if path.name.endswith(PARQUET_SUFFIX):
            import pyarrow.parquet as pq

            events += [{k: v for k, v in row.items() if v is not None} for row in pq.read_table(path).to_pylist()]
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
