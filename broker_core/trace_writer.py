"""JsonlTraceWriter: the broker's trace sink that writes rolling JSON-lines files (docs/trace-events.md).

`emit` only appends a tuple to a deque (thread-safe in CPython, no lock, no I/O, no formatting),
so the event loop pays one call per step. A background thread drains the deque every
`flush_interval_s`, formats the lines and appends them to the open file
`trace-<node>-<UTC time>-<seq>.jsonl.open`; when that file reaches `max_bytes` or `max_age_s`
it is fsynced and renamed to `*.jsonl`, the only files the index job reads.

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

log = logging.getLogger("broker_core.trace")

OPEN_SUFFIX = ".jsonl.open"
CLOSED_SUFFIX = ".jsonl"


class JsonlTraceWriter:
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
        closed = []
        for path in sorted(self.directory.glob(f"trace-{self.node_id}-*{OPEN_SUFFIX}")):
            if path == self._file_path:
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
            _fsync_dir(self.directory)
            log.info("closed trace files left open by a previous run",
                     extra={"trace_dir": str(self.directory), "files": [p.name for p in closed]})
        return closed

    def _last_seq(self) -> int:
        seqs = [0]
        for path in self.directory.glob(f"trace-{self.node_id}-*.jsonl*"):
            tail = path.name.split(".", 1)[0].rsplit("-", 1)[-1]
            if tail.isdigit():
                seqs.append(int(tail))
        return max(seqs)

    def close(self) -> None:
        """Stop the thread, write what is pending and roll the last file. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        self._thread.join()
        self.flush(roll=True)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
