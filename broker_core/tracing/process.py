"""A trace sink that writes from a child process, so writing trace files never holds the broker's GIL.

The broker side (`ProcessTraceSink`) adds records to a RecordBuffer and writes them to the child's stdin
through a non-blocking pipe (made 1 MiB where the system allows; `PipeWriter`), as a frame: its length (4
bytes big-endian), then the records as msgpack (records.pack: plain lists, an explicit layout, no pickle).
It ships `ship_interval_s` after a first record, and at once (on the next loop turn) when `ship_records`
records or `ship_messages` messages' events are waiting: each shipment is a short step of the event loop,
not one long one. The broker builds no Arrow array: that is the child's work. Tracing never blocks the
broker: when the child is more than `max_buffer_bytes` behind, the records are dropped and their events
counted in `dropped`.

The child (`python -m broker_core.tracing.process DIR NODE_ID CLUSTER [NICE] [ROLL_BYTES] [ROLL_SECONDS]`,
at the lowest priority: SCHED_IDLE where Linux allows it, else `nice`, default 10) makes the frames read
within HOLD_S (half a second) of the first one it holds, up to BATCH_BYTES of them, one Arrow record batch (`joined`, records.Decoder), hands it to a
TraceFileWriter and rolls its file when due, also while no frame comes. It stops (writing what it holds and
closing its file) when its stdin closes, also after a kill -9 of the broker.
"""

from __future__ import annotations

import asyncio
import fcntl
import gc
import importlib.abc
import logging
import os
import select
import struct
import subprocess
import sys
import time
from collections import deque
from itertools import chain, islice
from pathlib import Path

from broker_core.tracing.records import NEVER, Decoder, RecordBuffer, Records, pack, unpack
from broker_core.tracing.writer import TraceFileWriter

log = logging.getLogger("broker_core.trace")

HEAD = struct.Struct(">I")  # the length of a frame's msgpack
PIPE_BYTES = 1024 * 1024
F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)  # Linux
# events that make the sink ship at once (a shipment of this many is about 0.5 MiB of msgpack at most)
SHIP_MESSAGES = 32768
# records that make the sink ship at once: a shipment is a step of the broker's loop, at about 2.5 µs a record
# there. At 2,000 messages a second (four records each: published, stored, delivered, acked) 128 records ship in
# 0.36 ms (p50), 46 times a second; 256 took 0.64 ms, and the messages that came meanwhile waited for it.
SHIP_RECORDS = 128
IOV_MAX = 1024  # parts per writev (Linux's limit)
# Arrow allocates through glibc's malloc in the child. Its default, mimalloc, gave freed pages back between
# batches and faulted them in again: half the child's CPU went to the kernel zeroing them (perf: clear_page_erms
# under mi_page_free_list_extend). glibc's malloc keeps them: 0.35 instead of 0.70 µs per published message
# (bench/broker_trace_ratio.py). Set in the environment: Arrow reads it once, for every allocation it makes.
CHILD_ENV = {"ARROW_DEFAULT_MEMORY_POOL": "system"}
BATCH_BYTES = 8 * PIPE_BYTES  # the child decodes the frames it holds, up to this many bytes of them, as one batch
HOLD_S = 0.5  # and holds frames this long after the first for more to come


def frame_parts(records: Records) -> list[bytes]:
    """Records as the child reads them, in parts to be written one after the other."""
    packed = pack(records)
    return [HEAD.pack(len(packed)), packed]


def frame(records: Records) -> bytes:
    """frame_parts() joined."""
    return b"".join(frame_parts(records))


class PipeWriter:
    """The write end of a pipe, non-blocking, on the event loop: the parts it is given are written as they are
    (os.writev), and what the pipe does not take yet waits as those parts. (asyncio's pipe transport joins the
    parts and copies what waits into a bytearray, again and again as it drains: about 1 µs of the loop's CPU
    per 1 KiB message shipped, against 0.15 µs here.) The reader gone (EPIPE), what waits is dropped and the
    writer is closing."""

    def __init__(self, loop: asyncio.AbstractEventLoop, fd: int) -> None:
        os.set_blocking(fd, False)
        self.loop, self.fd = loop, fd
        self._parts: deque = deque()
        self._size = 0
        self._watching = self._closing = self._closed = False

    def get_write_buffer_size(self) -> int:
        return self._size

    def is_closing(self) -> bool:
        return self._closing

    def writelines(self, parts: list) -> None:
        if self._closing:
            return
        for part in parts:
            if part:
                self._parts.append(part)
                self._size += len(part)
        if not self._watching:
            self._write()

    def close(self) -> None:
        """Close once what waits is written."""
        if not self._closing:
            self._closing = True
            if not self._parts:
                self._finish()

    def _write(self) -> None:
        parts = self._parts
        while parts:
            try:
                n = os.writev(self.fd, list(islice(parts, IOV_MAX)))
            except (BlockingIOError, InterruptedError):
                break
            except OSError:  # the reader is gone
                parts.clear()
                self._size, self._closing = 0, True
                break
            self._size -= n
            while n:
                head = parts[0]
                if len(head) <= n:
                    n -= len(head)
                    parts.popleft()
                else:
                    parts[0], n = memoryview(head)[n:], 0
        if parts and not self._watching:
            self.loop.add_writer(self.fd, self._write)
            self._watching = True
        elif not parts and self._closing:
            self._finish()
        elif not parts:
            self._unwatch()

    def _unwatch(self) -> None:
        if self._watching:
            self.loop.remove_writer(self.fd)
            self._watching = False

    def _finish(self) -> None:
        if not self._closed:
            self._closed = True
            self._unwatch()
            os.close(self.fd)


class ProcessTraceSink:
    def __init__(self, directory: Path, *, node_id: str, cluster: str, ship_interval_s: float = 0.2,
                 ship_records: int = SHIP_RECORDS, ship_messages: int = SHIP_MESSAGES,
                 max_buffer_bytes: int = 64 * 1024 * 1024,
                 nice: int = 10, roll_bytes: int | None = None, roll_s: float | None = None):
        self.ship_interval_s = ship_interval_s
        self.ship_records, self.ship_messages = ship_records, ship_messages
        self.max_buffer_bytes = max_buffer_bytes
        self.dropped = 0
        self._timer: asyncio.TimerHandle | None = None
        self._buffer = RecordBuffer(self._notified)
        self._await_first()
        # the sink methods are the buffer's own (no call in between on the hot paths)
        self.emit, self.emit_messages = self._buffer.emit, self._buffer.emit_messages
        self.emit_group, self.emit_attempts = self._buffer.emit_group, self._buffer.emit_attempts
        self._transport: PipeWriter | None = None
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "broker_core.tracing.process", str(directory), node_id, cluster, str(nice),
             str(roll_bytes or ""), str(roll_s or "")],
            stdin=subprocess.PIPE, start_new_session=False, env={**os.environ, **CHILD_ENV})
        try:  # fewer, larger writes; the default pipe holds 64 KiB
            fcntl.fcntl(self._proc.stdin.fileno(), F_SETPIPE_SZ, PIPE_BYTES)
        except OSError:
            pass
        self.loop = asyncio.get_running_loop()

    async def start(self) -> ProcessTraceSink:
        self._transport = PipeWriter(self.loop, os.dup(self._proc.stdin.fileno()))
        self._proc.stdin.close()  # (the writer holds its own descriptor of the pipe)
        return self

    def _await_first(self) -> None:
        """The buffer's next first record notifies (and arms the timer)."""
        self._buffer.notify_records, self._buffer.notify_events = 1, NEVER

    def _notified(self) -> None:
        """The buffer's first record since a shipment (ship `ship_interval_s` later), or enough records to
        ship at once (on the next loop turn: each shipment is a short step of the loop)."""
        buffer = self._buffer
        if buffer.records >= self.ship_records or buffer.events >= self.ship_messages:
            buffer.notify_records = buffer.notify_events = NEVER  # (until shipped)
            self.loop.call_soon(self.ship)
        else:
            buffer.notify_records, buffer.notify_events = self.ship_records, self.ship_messages
            self._timer = self.loop.call_later(self.ship_interval_s, self.ship)

    def ship(self) -> None:
        """Send what was recorded to the child now (the timer does, `ship_interval_s` after a first record)."""
        buffer = self._buffer
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._await_first()
        if not buffer.records:
            return
        transport = self._transport
        if transport is None or transport.is_closing() or transport.get_write_buffer_size() > self.max_buffer_bytes:
            self.dropped += buffer.drop()
            return
        transport.writelines(frame_parts(buffer.take_records()))

    def stats(self) -> dict:
        transport = self._transport
        return {"dropped": self.dropped, "waiting_bytes": transport.get_write_buffer_size() if transport else 0}

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


def _read_exactly(fd: int, n: int) -> bytes | None:
    """n bytes from a pipe; None at its end (a torn frame counts as the end)."""
    parts, left = [], n
    while left:
        part = os.read(fd, left)
        if not part:
            return None
        parts.append(part)
        left -= len(part)
    return b"".join(parts)


def _read_frame(fd: int) -> tuple[Records, int] | None:
    """The next frame's records and its size in bytes; None at the pipe's end (or a torn frame)."""
    head = _read_exactly(fd, HEAD.size)
    if head is None:
        return None
    size = HEAD.unpack(head)[0]
    packed = _read_exactly(fd, size)
    if packed is None:
        return None
    return unpack(packed), HEAD.size + size


def _waiting(fd: int) -> bool:
    return bool(select.select([fd], [], [], 0)[0])


def joined(shipments: list[Records]) -> list[Records]:
    """Records taken one after the other as one Records per run of them numbered on without a gap (records
    dropped between two takes start a new run): the child decodes each run as one batch."""
    runs: list[list[Records]] = []
    for records in shipments:
        if runs and runs[-1][-1].first + len(runs[-1][-1].counts) == records.first:
            runs[-1].append(records)
        else:
            runs.append([records])
    return [run[0] if len(run) == 1 else
            Records(run[0].first, *(_chained(run, field) for field in ("scalars", "counts", "refs")),
                    [list(chain.from_iterable(r.parts[c] for r in run)) for c in range(len(run[0].parts))],
                    _chained(run, "seqs"))
            for run in runs]


def _chained(run: list[Records], field: str) -> list:
    return list(chain.from_iterable(getattr(records, field) for records in run))


def serve(fd: int, writer: TraceFileWriter, batch_bytes: int = BATCH_BYTES, hold_s: float = HOLD_S) -> None:
    """Write the frames read from `fd` until it ends, rolling the file when due in between. The frames read
    within `hold_s` of the first one not written yet (up to `batch_bytes` of them) are decoded and written as
    one batch (`joined`): a batch's fixed costs (the Arrow arrays, the write) are paid a few times a second,
    not once per shipment. The pipe's end writes what is held."""
    decoder = Decoder()
    held: list[Records] = []
    size, since = 0, 0.0
    while True:
        waits = [] if (roll := writer.roll_due_in()) is None else [roll]
        if held:
            waits.append(max(0.0, since + hold_s - time.monotonic()))
        ready, _, _ = select.select([fd], [], [], min(waits, default=None))
        ended = False
        if ready:
            while (frame := _read_frame(fd)) is not None:
                if not held:
                    since = time.monotonic()
                held.append(frame[0])
                size += frame[1]
                if size >= batch_bytes or not _waiting(fd):
                    break
            ended = frame is None
        if held and (ended or size >= batch_bytes or time.monotonic() - since >= hold_s):
            for records in joined(held):
                writer.write(decoder.batch(records))
            held, size = [], 0
        if ended:
            return
        writer.roll_if_due()


def lower_priority(nice: int) -> None:
    """Run only when a core would otherwise idle (SCHED_IDLE, Linux): the broker and its clients come first,
    and a waking broker takes the core at once. Elsewhere, or if refused: `nice`."""
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):
        if nice:
            os.nice(nice)


class _WithoutPandas(importlib.abc.MetaPathFinder):
    """Refuses to import pandas. pyarrow imports pandas, when it is installed, on the first `pa.array` (to
    recognise pandas objects), and works without it (pandas is optional to it). Here that import cost about
    0.3 s of CPU, 350 modules and 60 MB, and it came with the first batch, while the broker was busy (a batch of
    80,000 events costs about 10 ms). The trace process never makes or reads pandas objects."""

    def find_spec(self, name: str, path=None, target=None):
        if name.partition(".")[0] == "pandas":
            raise ModuleNotFoundError("the trace process runs without pandas", name=name)
        return None


def without_pandas() -> None:
    """Make `import pandas` fail in this process (_WithoutPandas); already imported, it stays."""
    if not any(isinstance(finder, _WithoutPandas) for finder in sys.meta_path):
        sys.meta_path.insert(0, _WithoutPandas())


def main(directory: str, node_id: str, cluster: str, nice: str = "0", roll_bytes: str = "", roll_s: str = "") -> None:
    without_pandas()
    if int(nice):
        lower_priority(int(nice))
    gc.freeze()  # what a batch decodes dies with it: no full collections over the modules' objects
    gc.set_threshold(100_000, 50, 1000)
    roll = {**({"max_bytes": int(roll_bytes)} if roll_bytes else {}), **({"max_age_s": float(roll_s)} if roll_s else {})}
    writer = TraceFileWriter(directory, node_id=node_id, cluster=cluster, **roll)
    try:
        serve(sys.stdin.fileno(), writer)
    finally:
        writer.close()


if __name__ == "__main__":
    main(*sys.argv[1:7])
