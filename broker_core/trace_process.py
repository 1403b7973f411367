"""A trace sink that writes from a child process, so writing trace files never holds the broker's GIL.

The broker side does as little per event as it can: `emit` appends one tuple, and the batch methods
(`emit_messages` for a publish batch, `emit_group` for a delivery or ack frame) append one record
holding the broker's own list. Once per `ship_interval_s` the lists are turned into columns (message
ids, types, keys, business ids, attempts, sizes: a list each, computed once per list even when two
records share it, as `published` and `stored` do), pickled and written to the child's stdin through a
non-blocking asyncio pipe. The child (`python -m broker_core.trace_process DIR NODE_ID CLUSTER
[parquet|jsonl] [NICE]`, at a lower priority: `nice`, default 10) hands the batch as it is to `ParquetTraceWriter.add_shipped` (the default), which
builds Arrow columns from whole batches, or expands it into `JsonlTraceWriter.emit` calls (the older
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
        data = pickle.dumps(([], columns(records)), protocol=pickle.HIGHEST_PROTOCOL)
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


def columns(records: list[tuple]) -> list[tuple]:
    """The sink's records as trace_writer.RECORD tuples, in order: one list per column, each list of
    messages (or rows) read once however many records hold it; pickle then writes a shared list once.
    An event of `emit` becomes a record of one."""
    done: dict[int, tuple] = {}
    out = []
    for record in records:
        if len(record) != 9:  # one event from emit()
            (event, ts_us, message_id, topic, message_type, key, business_id, app_id, client_host, group, consumer,
             attempt, detail, size) = record
            out.append((event, topic, ts_us, app_id, client_host, group, consumer, detail, [message_id],
                        [message_type], [key], [business_id], [attempt], [size]))
            continue
        event, topic, ts_us, app_id, client_host, group, consumer, items, rows = record
        cols = done.get(id(items))
        if cols is None:
            fields = list(map(_row_fields if rows else _fields, items))
            cols = done[id(items)] = (fields, list(map(_id, fields)), list(map(_type, fields)),
                                      list(map(_key, fields)), list(map(_bid, fields)),
                                      list(map(_row_attempt, items)) if rows else None)
        fields, ids, types, keys, bids, attempts = cols
        sizes = [len(f[M_BODY]) for f in fields] if event in SIZED else None
        out.append((event, topic, ts_us, app_id, client_host, group, consumer, None, ids, types, keys, bids,
                    attempts, sizes))
    return out


def _child(directory: str, node_id: str, cluster: str, file_format: str = "parquet", nice: str = "0") -> None:
    if int(nice):
        os.nice(int(nice))  # the broker and its clients come first; the writer catches up when they idle
    from broker_core.trace_writer import EVENT_TUPLE, JsonlTraceWriter, ParquetTraceWriter

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
            events, records = pickle.loads(data)
            if file_format != "jsonl":
                writer.add_shipped(events, records)
                continue
            for event, *values in events:
                writer.emit(event, **dict(zip(EVENT_TUPLE[1:], values, strict=True)))
            for event, topic, ts_us, app_id, client_host, group, consumer, detail, ids, types, keys, bids, \
                    attempts, sizes in records:
                for i, message_id in enumerate(ids):
                    writer.emit(event, message_id=message_id, topic=topic, message_type=types[i], key=keys[i],
                                business_id=bids[i], app_id=app_id, client_host=client_host, group=group,
                                consumer=consumer, attempt=attempts[i] if attempts else None, detail=detail,
                                size=sizes[i] if sizes else None, ts_us=ts_us)
    finally:
        writer.close()


if __name__ == "__main__":
    _child(*sys.argv[1:6])
