"""Trace events: the broker's record of every step of every message (docs/trace-events.md).

The broker calls `sink.emit(...)` at each step; the sink must not block the event loop.
`NullTraceSink` records nothing; `broker_core.trace_writer.JsonlTraceWriter` writes rolling files.
"""

from __future__ import annotations

from typing import Protocol

EVENT_KINDS = (
    "published", "stored", "prepared", "committed", "rolled_back",
    "delivered", "acked", "nacked", "timed_out", "dead_lettered", "expired", "redriven",
)


class TraceSink(Protocol):
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
    ) -> None: ...

    def close(self) -> None: ...


class NullTraceSink:
    def emit(self, event: str, **fields) -> None:
        return None

    def close(self) -> None:
        return None
