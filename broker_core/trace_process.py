"""A trace sink that writes from a child process, so writing trace files never holds the broker's GIL.

The broker side does as little per event as it can: `emit` appends one tuple, and the batch methods
(`emit_messages` for a publish batch, `emit_group` for a delivery or ack frame) append one record
holding the broker's own list. Once per `ship_interval_s` the records are flattened into one chunk
(a tuple of scalars per record, and one list per per-message column for all of them: message ids,
types, keys, business ids, attempts, sizes), pickled and written to the child's stdin through a
non-blocking asyncio pipe. The child (`python -m broker_core.trace_process DIR NODE_ID CLUSTER
[parquet|jsonl] [NICE]`, at a lower priority: `nice`, default 10) hands the chunk as it is to
`ParquetTraceWriter.add_chunk` (the default), which builds Arrow columns from whole chunks, or expands it into `JsonlTraceWriter.emit` calls (the older
format). Tracing never blocks the broker: when the child falls behind by more than
`max_buffer_bytes`, batches are dropped and counted. The child stops (closing its open file) when its
stdin closes, also after a kill -9 of the broker.
"""

from __future__ import annotations

import asyncio
import logging
import os
import pickle
import struct
import subprocess
import sys
from operator import attrgetter, itemgetter
from pathlib import Path
from time import time_ns

from broker_core.protocol import M_BODY, M_BUSINESS_ID, M_ID, M_KEY, M_TYPE
from broker_core.trace import SIZED

log = logging.getLogger("broker_core.trace")

# the child's event tuple: trace_writer.EVENT_TUPLE
EVENT_FIELDS = ("ts_us", "message_id", "topic", "message_type", "key", "business_id", "app_id", "client_host",
                "group", "consumer", "attempt", "detail", "size")
LENGTH = struct.Struct(">I")
FORMATS = ("parquet", "jsonl")

_fields = attrgetter("fields")
_row_fields = itemgetter(2)
_row_attempt = itemgetter(1)
_id, _type, _key, _bid = itemgetter(M_ID), itemgetter(M_TYPE), itemgetter(M_KEY), itemgetter(M_BUSINESS_ID)


class ProcessTraceSink:
    def __init__(self, directory: Path, *, node_id: str, cluster: str, ship_interval_s: float = 0.02,
                 max_buffer_bytes: int = 64 * 1024 * 1024, file_format: str = "parquet", nice: int = 10):
        if file_format not in FORMATS:
            raise ValueError(f"trace file format must be one of {FORMATS}")
        self.ship_interval_s = ship_interval_s
        self.max_buffer_bytes = max_buffer_bytes
        self.dropped = 0
        self._records: list[tuple] = []  # in the order of the steps: event tuples and batch records
        self._scheduled = False
        self._transport: asyncio.WriteTransport | None = None
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "broker_core.trace_process", str(directory), node_id, cluster, file_format,
             str(nice)],
            stdin=subprocess.PIPE, start_new_session=False)
        self.loop = asyncio.get_running_loop()

    async def start(self) -> ProcessTraceSink:
        self._transport, _ = await self.loop.connect_write_pipe(asyncio.BaseProtocol, self._proc.stdin)
        return self

    def emit(self, event: str, *, message_id, topic, message_type, key=None, business_id=None, app_id=None,
             client_host=None, group=None, consumer=None, attempt=None, detail=None, size=None,
             ts_us=None) -> None:
        self._records.append((event, ts_us or time_ns() // 1000, message_id, topic, message_type, key, business_id,
                              app_id, client_host, group, consumer, attempt, detail, size))
        if not self._scheduled:
            self._scheduled = True
            self.loop.call_later(self.ship_interval_s, self._ship)

    def emit_messages(self, event: str, topic: str, messages: list, *, app_id=None, client_host=None,
                      ts_us=None) -> None:
        self._records.append((event, topic, ts_us or time_ns() // 1000, app_id, client_host, None, None,
                              messages, False))
        if not self._scheduled:
            self._scheduled = True
            self.loop.call_later(self.ship_interval_s, self._ship)

    def emit_group(self, event: str, topic: str, group: str, rows: list, *, consumer=None, client_host=None,
                   ts_us=None) -> None:
        self._records.append((event, topic, ts_us or time_ns() // 1000, None, client_host, group, consumer,
                              rows, True))
        if not self._scheduled:
            self._scheduled = True
            self.loop.call_later(self.ship_interval_s, self._ship)

    def _ship(self) -> None:
        self._scheduled = False
        records, self._records = self._records, []
        if not records:
            return
        transport = self._transport
        if transport is None or transport.is_closing() or transport.get_write_buffer_size() > self.max_buffer_bytes:
            self.dropped += sum(len(r[7]) if len(r) == 9 else 1 for r in records)
            return
        data = pickle.dumps(columns(records), protocol=pickle.HIGHEST_PROTOCOL)
        transport.write(LENGTH.pack(len(data)) + data)

    def close(self) -> None:
        self._ship()
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


def columns(records: list[tuple]) -> tuple:
    """The sink's records as one trace_writer chunk: a tuple of scalars and a count per record, and one
    flat list per per-message column (message ids, types, keys, business ids, attempts, sizes) for all
    the records in turn. An event of `emit` becomes a record of one. Per record this costs a tuple and a
    few list extensions, so small frames (one message each) cost little more than large ones."""
    scalars, counts = [], []
    ids, types, keys, bids, attempts, sizes = [], [], [], [], [], []
    for record in records:
        if len(record) != 9:  # one event from emit()
            (event, ts_us, message_id, topic, message_type, key, business_id, app_id, client_host, group, consumer,
             attempt, detail, size) = record
            scalars.append((event, topic, ts_us, app_id, client_host, group, consumer, detail))
            counts.append(1)
            ids.append(message_id)
            types.append(message_type)
            keys.append(key)
            bids.append(business_id)
            attempts.append(attempt)
            sizes.append(size)
            continue
        event, topic, ts_us, app_id, client_host, group, consumer, items, rows = record
        fields = list(map(_row_fields, items)) if rows else list(map(_fields, items))
        n = len(fields)
        scalars.append((event, topic, ts_us, app_id, client_host, group, consumer, None))
        counts.append(n)
        ids += map(_id, fields)
        types += map(_type, fields)
        keys += map(_key, fields)
        bids += map(_bid, fields)
        attempts += map(_row_attempt, items) if rows else [None] * n
        sizes += [len(f[M_BODY]) for f in fields] if event in SIZED else [None] * n
    return scalars, counts, ids, types, keys, bids, attempts, sizes


def _child(directory: str, node_id: str, cluster: str, file_format: str = "parquet", nice: str = "0") -> None:
    if int(nice):
        os.nice(int(nice))  # the broker and its clients come first; the writer catches up when they idle
    from broker_core.trace_writer import JsonlTraceWriter, ParquetTraceWriter

    if file_format == "jsonl":
        writer = JsonlTraceWriter(directory, node_id=node_id, cluster=cluster)
    else:
        writer = ParquetTraceWriter(directory, node_id=node_id, cluster=cluster)
    stream = sys.stdin.buffer
    try:
        while True:
            head = stream.read(LENGTH.size)
            if len(head) < LENGTH.size:
                break
            data = stream.read(LENGTH.unpack(head)[0])
            chunk = pickle.loads(data)
            if file_format != "jsonl":
                writer.add_chunk(chunk)
                continue
            scalars, counts, ids, types, keys, bids, attempts, sizes = chunk
            i = 0
            for (event, topic, ts_us, app_id, client_host, group, consumer, detail), n in zip(scalars, counts,
                                                                                                strict=True):
                for j in range(i, i + n):
                    writer.emit(event, message_id=ids[j], topic=topic, message_type=types[j], key=keys[j],
                                business_id=bids[j], app_id=app_id, client_host=client_host, group=group,
                                consumer=consumer, attempt=attempts[j], detail=detail, size=sizes[j], ts_us=ts_us)
                i += n
    finally:
        writer.close()


if __name__ == "__main__":
    _child(*sys.argv[1:6])
