"""A trace sink that writes from a child process, so trace formatting never holds the broker's GIL.

The broker side only appends each event as a tuple; once per `ship_interval_s` the batch is pickled
and written to the child's stdin through a non-blocking asyncio pipe. The child
(`python -m broker_core.trace_process DIR NODE_ID CLUSTER`) feeds the events to
`JsonlTraceWriter`, which writes the rolling files of docs/trace-events.md. Tracing never blocks the
broker: when the child falls behind by more than `max_buffer_bytes`, batches are dropped and counted.
The child stops (closing and renaming its open file) when its stdin closes, also after a kill -9 of
the broker.
"""

from __future__ import annotations

import asyncio
import logging
import pickle
import struct
import subprocess
import sys
from pathlib import Path
from time import time_ns

log = logging.getLogger("broker_core.trace")

FIELDS = ("message_id", "topic", "message_type", "key", "business_id", "app_id", "client_host", "group",
          "consumer", "attempt", "detail", "size", "ts_us")
LENGTH = struct.Struct(">I")


class ProcessTraceSink:
    def __init__(self, directory: Path, *, node_id: str, cluster: str, ship_interval_s: float = 0.02,
                 max_buffer_bytes: int = 64 * 1024 * 1024):
        self.ship_interval_s = ship_interval_s
        self.max_buffer_bytes = max_buffer_bytes
        self.dropped = 0
        self._batch: list[tuple] = []
        self._scheduled = False
        self._transport: asyncio.WriteTransport | None = None
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "broker_core.trace_process", str(directory), node_id, cluster],
            stdin=subprocess.PIPE, start_new_session=False)
        self.loop = asyncio.get_running_loop()

    async def start(self) -> ProcessTraceSink:
        self._transport, _ = await self.loop.connect_write_pipe(asyncio.BaseProtocol, self._proc.stdin)
        return self

    def emit(self, event: str, *, message_id, topic, message_type, key=None, business_id=None, app_id=None,
             client_host=None, group=None, consumer=None, attempt=None, detail=None, size=None,
             ts_us=None) -> None:
        self._batch.append((event, message_id, topic, message_type, key, business_id, app_id, client_host, group,
                            consumer, attempt, detail, size, ts_us or time_ns() // 1000))
        if not self._scheduled:
            self._scheduled = True
            self.loop.call_later(self.ship_interval_s, self._ship)

    def _ship(self) -> None:
        self._scheduled = False
        batch, self._batch = self._batch, []
        transport = self._transport
        if not batch or transport is None or transport.is_closing():
            self.dropped += len(batch)
            return
        if transport.get_write_buffer_size() > self.max_buffer_bytes:
            self.dropped += len(batch)
            return
        data = pickle.dumps(batch, protocol=pickle.HIGHEST_PROTOCOL)
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


def _child(directory: str, node_id: str, cluster: str) -> None:
    from broker_core.trace_writer import JsonlTraceWriter

    writer = JsonlTraceWriter(directory, node_id=node_id, cluster=cluster)
    stream = sys.stdin.buffer
    try:
        while True:
            head = stream.read(LENGTH.size)
            if len(head) < LENGTH.size:
                break
            data = stream.read(LENGTH.unpack(head)[0])
            for event, *values in pickle.loads(data):
                writer.emit(event, **dict(zip(FIELDS, values, strict=True)))
    finally:
        writer.close()


if __name__ == "__main__":
    _child(*sys.argv[1:4])
