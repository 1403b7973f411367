"""Rolling trace files of one broker node (docs/trace-events.md).

`TraceFileWriter.write` appends a batch of records (schema.wire_schema(), what the broker ships, with the
writer's own columns added: cluster, broker, event ids) to the open file
`trace-<node>-<UTC time>-<seq>.arrows.open`, an Arrow IPC stream (its buffers zstd-compressed). When that
file reaches `max_bytes` or `max_age_s` its stream is ended, the file fsynced and renamed
`trace-...-<seq>.arrows`: the one format of trace files, which the index job reads as it is (no
conversion). Readers take only `*.arrows` files, so a file is never read half-written. A file a killed
writer left open is closed on start: renamed if whole, else its complete batches written anew (via
`.arrows.tmp`), its torn last batch cut.

The writer is also a trace sink in its own process (`emit*` add records to its RecordBuffer, `flush()`
writes them): what tests and benches use; the broker's trace process (tracing.process) only calls
`write`, `roll_if_due` and `close`.
"""

from __future__ import annotations

import fcntl
import logging
import os
import secrets
import time
from collections import deque
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from broker_core.storage.fsync import fsync_dir
from broker_core.tracing.records import NAMEABLE_TAKES, RecordBuffer
from broker_core.tracing.schema import FORMAT_VERSION, NAMED_VALUES, records_schema, wire_schema

log = logging.getLogger("broker_core.trace")

OPEN_SUFFIX = ".arrows.open"
CLOSED_SUFFIX = ".arrows"
CLOSED_TMP_SUFFIX = ".arrows.tmp"
FILE_FORMAT = b"records-2"  # the files' schema metadata `switchyard.trace`
# zstd at level 1: as much CPU as LZ4 here, files of 25 instead of 45 bytes per published message (files from
# before, LZ4, are read as they are: the codec is the stream's)
WRITE_OPTIONS = pa.ipc.IpcWriteOptions(compression=pa.Codec("zstd", compression_level=1))


class TraceFileWriter:
    """directory   the trace folder, normally `<broker data dir>/trace` (created if missing)
    node_id     the broker's node id (in file names and in every record's `broker`)
    cluster     the cluster name written in every record
    max_bytes   roll once the open file holds this many bytes (default 256 MiB)
    max_age_s   roll the open file once it is this old, even if small (default 60 s)"""

    def __init__(self, directory: str | os.PathLike, *, node_id: str, cluster: str,
                 max_bytes: int = 256 * 1024 * 1024, max_age_s: float = 60.0) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.node_id, self.cluster = node_id, cluster
        self.max_bytes, self.max_age_s = max_bytes, max_age_s
        self.dropped = 0  # events of records naming records this writer never got
        self.written = 0
        self.files_closed = 0
        self.schema = records_schema().with_metadata({"switchyard.trace": FILE_FORMAT})
        self.buffer = RecordBuffer()
        self.emit, self.emit_messages = self.buffer.emit, self.buffer.emit_messages
        self.emit_group, self.emit_attempts = self.buffer.emit_group, self.buffer.emit_attempts
        self._id_prefix = secrets.token_hex(8)  # event ids: a random prefix per writer plus a counter
        self._id_seq = 0
        self._sink = self._stream = self._path = None
        self._file_first = 0  # the number of the open file's first record
        self._opened = 0.0
        # the batches written last (names in the next ones may need them)
        self._recent: deque[pa.RecordBatch] = deque(maxlen=NAMEABLE_TAKES - 1)
        self._closed = False
        self._lock = _lock_node(self.directory, node_id)
        self.recover()
        self._file_seq = last_seq(self.directory, node_id)

    @classmethod
    def for_data_dir(cls, data_dir: str | os.PathLike, *, node_id: str, cluster: str, **options) -> TraceFileWriter:
        return cls(Path(data_dir) / "trace", node_id=node_id, cluster=cluster, **options)

    def write(self, batch: pa.RecordBatch) -> None:
        """Append a shipped batch of records (batches in the order they were taken)."""
        if batch.num_rows == 0:
            return
        if self._stream is None:
            self._open(batch.column("record")[0].as_py())
        batch = self._resolved(batch)
        counts = batch.column("count").to_numpy().astype(np.int64)
        k, events = batch.num_rows, int(counts.sum())
        own = {"v": pa.array(np.full(k, FORMAT_VERSION, dtype=np.int32)),
               "cluster": pa.array([self.cluster] * k, pa.string()),
               "broker": pa.array([self.node_id] * k, pa.string()),
               "event_id_prefix": pa.array([self._id_prefix] * k, pa.string()),
               "event_id_first": pa.array(self._id_seq + 1 + np.cumsum(counts) - counts)}
        columns = [own[f.name] if f.name in own else batch.column(f.name) for f in self.schema]
        self._stream.write_batch(pa.RecordBatch.from_arrays(columns, schema=self.schema))
        self._sink.flush()
        self._recent.append(batch)
        self._id_seq += events
        self.written += events

    def flush(self, roll: bool = False) -> None:
        """Write what was emitted here; roll the open file if it is due (or if `roll`)."""
        batch = self.buffer.take()
        if batch is not None:
            self.write(batch)
        if roll and self._stream is not None:
            self._roll()
        else:
            self.roll_if_due()

    def roll_due_in(self) -> float | None:
        """Seconds until the open file is due by age (None: no file open)."""
        return None if self._stream is None else max(0.0, self._opened + self.max_age_s - time.monotonic())

    def roll_if_due(self) -> None:
        if self._stream is not None and (self._sink.tell() >= self.max_bytes or self.roll_due_in() == 0):
            self._roll()

    def close(self) -> None:
        """Write what is pending and roll the last file. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        try:
            self.flush(roll=True)
        finally:
            self._lock.close()  # (released anyway when the process ends, also killed)

    def _resolved(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """`batch` with the names of records of an earlier file (the batches before went there) replaced by
        their values; a record naming one this writer never got is dropped (counted). Only the rows naming
        such records, and the records they name, become Python values."""
        refs = batch.column("refs")
        runs = pc.list_flatten(refs)
        if not len(runs) or pc.min(runs.field("record")).as_py() >= self._file_first:
            return batch
        lengths = pc.list_value_length(refs).fill_null(0).to_numpy(zero_copy_only=False)
        owner = np.repeat(np.arange(batch.num_rows), lengths)
        named = runs.field("record").to_numpy(zero_copy_only=False)
        changing = np.unique(owner[named < self._file_first])  # the rows to resolve
        needed = np.unique(named[np.isin(owner, changing)])
        known = {}
        for held in [*self._recent, batch]:
            wanted = np.isin(held.column("record").to_numpy(zero_copy_only=False), needed)
            if wanted.any():
                known.update((r["record"], r) for r in held.filter(pa.array(wanted)).to_pylist() if r["refs"] is None)
        kept = []
        for row in batch.take(pa.array(changing)).to_pylist():
            refs = row["refs"]
            if not all(run["record"] in known and run["offset"] + run["count"] <= known[run["record"]]["count"]
                       for run in refs):
                self.dropped += row["count"]
                continue
            for name in NAMED_VALUES:
                values = []
                for run in refs:
                    held = known[run["record"]][name]
                    values += [None] * run["count"] if held is None else held[run["offset"]:run["offset"] + run["count"]]
                row[name] = None if all(v is None for v in values) else values
            row["refs"] = None
            kept.append(row)
        unchanged = np.ones(batch.num_rows, dtype=bool)
        unchanged[changing] = False
        table = pa.Table.from_batches([batch.filter(pa.array(unchanged)),
                                       pa.RecordBatch.from_pylist(kept, schema=wire_schema())])
        return table.sort_by("record").combine_chunks().to_batches(max_chunksize=None)[0] if table.num_rows else \
            pa.RecordBatch.from_pylist([], schema=wire_schema())

    def _open(self, first_record: int) -> None:
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
        while True:  # a restarted node continues its sequence; never reuse a name
            self._file_seq += 1
            base = f"trace-{self.node_id}-{stamp}-{self._file_seq:06d}"
            if not any((self.directory / (base + s)).exists() for s in (OPEN_SUFFIX, CLOSED_SUFFIX, CLOSED_TMP_SUFFIX)):
                break
        self._path = self.directory / (base + OPEN_SUFFIX)
        self._sink = pa.OSFile(str(self._path), "wb")
        self._stream = pa.ipc.new_stream(self._sink, self.schema, options=WRITE_OPTIONS)
        self._file_first = first_record
        self._opened = time.monotonic()

    def _roll(self) -> None:
        """End the open file's stream and close the file: from now on the index job may read it."""
        stream, sink, path = self._stream, self._sink, self._path
        self._stream = self._sink = self._path = None
        stream.close()
        sink.close()
        _publish(path, path.with_name(path.name[: -len(OPEN_SUFFIX)] + CLOSED_SUFFIX))
        self.files_closed += 1

    def recover(self) -> list[Path]:
        """Finish files a previous process of this node left (killed): open files become closed ones (a torn
        last batch cut), half-written copies are removed."""
        for tmp in self.directory.glob(f"trace-{self.node_id}-*{CLOSED_TMP_SUFFIX}"):
            tmp.unlink()
        closed = [target for path in sorted(self.directory.glob(f"trace-{self.node_id}-*{OPEN_SUFFIX}"))
                  if (target := close_left_open(path)) is not None]
        if closed:
            log.info("closed trace files left open by a previous run",
                     extra={"trace_dir": str(self.directory), "files": [p.name for p in closed]})
        return closed


def close_left_open(path: Path) -> Path | None:
    """The closed file of an open file a killed writer left: the file renamed when its stream is whole, else
    its complete batches written anew (via a fsynced `.arrows.tmp` and a rename) and the open file removed.
    Idempotent: a crash at any point leaves either the open file (done again next time) or the closed one."""
    base = path.name[: -len(OPEN_SUFFIX)]
    target = path.with_name(base + CLOSED_SUFFIX)
    if target.exists():  # closed before a crash; only the removal was missing
        path.unlink()
        fsync_dir(path.parent)
        return None
    batches, schema, whole = [], None, False
    try:
        with pa.memory_map(str(path)) as source:
            reader = pa.ipc.open_stream(source)
            schema = reader.schema
            for batch in reader:
                batches.append(batch)
        whole = True
    except (pa.ArrowInvalid, OSError, EOFError) as exc:  # a torn last batch (or a torn header)
        if not batches:
            log.info("trace file without a complete batch removed", extra={"path": str(path), "error": str(exc)})
    if batches and schema.remove_metadata() != records_schema():
        log.warning("open trace file of an unknown layout kept aside", extra={"path": str(path)})
        path.rename(path.with_name(base + ".unknown"))
        return None
    if not batches:
        path.unlink()
        fsync_dir(path.parent)
        return None
    if whole:  # (ended or not, every batch in it is complete)
        _publish(path, target)
        return target
    tmp = path.with_name(base + CLOSED_TMP_SUFFIX)
    with pa.OSFile(str(tmp), "wb") as sink, pa.ipc.new_stream(sink, schema, options=WRITE_OPTIONS) as stream:
        for batch in batches:
            stream.write_batch(batch)
    _publish(tmp, target)
    path.unlink()
    fsync_dir(path.parent)
    return target


def _publish(path: Path, target: Path) -> None:
    """`path` made durable under the name `target`."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    os.rename(path, target)
    fsync_dir(path.parent)


def last_seq(directory: Path, node_id: str) -> int:
    """The highest file sequence number of this node's trace files (0 if none)."""
    seqs = [0]
    for path in directory.glob(f"trace-{node_id}-*"):
        tail = path.name.split(".", 1)[0].rsplit("-", 1)[-1]
        if tail.isdigit():
            seqs.append(int(tail))
    return max(seqs)


def _lock_node(directory: Path, node_id: str, wait_s: float = 30.0):
    """Hold `<dir>/.trace-<node>.lock` while writing: a writer started while the previous one (a killed
    broker's trace process) still finishes its file waits for it instead of recovering that file too."""
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
