"""Trace events: the broker's record of every step of every message (docs/trace-events.md).

The broker calls `sink.emit(...)` at each step; the sink must not block the event loop. On the hot
paths (a publish batch, a delivery frame, an ack frame) it calls the batch methods instead, which
take the broker's own lists as they are:

    emit_messages(event, topic, messages, app_id=, client_host=, ts_us=, same_as=, arrays=, sizes=)
                                                              messages: [StoredMessage]
    emit_group(event, topic, group, rows, consumer=, client_host=, ts_us=, attempt=)
                                                              rows: [(seq, attempt, fields)]
    emit_attempts(event, topic, group, entries, consumer=, client_host=, ts_us=, seqs=)
                                                              entries: [(StoredMessage, attempt, ...)]

A caller that already holds the messages' arrays (`arrays`), body sizes (`sizes`) or seqs (`seqs`)
passes them, and one that knows every row is a first delivery says so (`attempt=1`), so the sink need
not take them from each message again.

`NullTraceSink` records nothing; `broker_core.trace_process.ProcessTraceSink` ships them to a child
process that writes the rolling files (`broker_core.trace_writer`). A sink that only has `emit` gets
the batch methods from `BatchEmitMixin` (one `emit` per event).
"""

from __future__ import annotations

import time
from typing import Protocol

from broker_core.protocol import M_BODY, M_BUSINESS_ID, M_ID, M_KEY, M_TYPE

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

    def emit_messages(self, event: str, topic: str, messages: list, *, app_id: str | None = None,
                      client_host: str | None = None, ts_us: int | None = None, same_as: object = None,
                      arrays: list | None = None, sizes: list | None = None, ids: list | None = None,
                      shared: tuple | None = None) -> object:
        """One event per StoredMessage (`size` is recorded on `published` and `prepared`; `arrays`: their
        message arrays, in order; `sizes`: their body sizes, in order; `ids`: their ids, in order; `shared`:
        the (type, key, business id) all of them have, when the caller knows). Returns a handle (or None): a
        later call for the same list may pass it as `same_as`, so the sink may reuse what it took from
        the messages (a publish batch's `stored` after its `published`)."""

    def emit_group(self, event: str, topic: str, group: str, rows: list, *, consumer: str | None = None,
                   client_host: str | None = None, ts_us: int | None = None, attempt: int | None = None) -> None:
        """One per-group event per (seq, attempt, fields) row (fields: the message array; `attempt`: the
        attempt of every row, when the caller knows they all share it)."""

    def emit_attempts(self, event: str, topic: str, group: str, entries: list, *, consumer: str | None = None,
                      client_host: str | None = None, ts_us: int | None = None, seqs: list | None = None) -> None:
        """One per-group event per (StoredMessage, attempt, ...) entry (a subscription's in-flight entries
        as they are; `seqs`: their messages' seqs, in order)."""

    def close(self) -> None: ...


SIZED = frozenset({"published", "prepared"})


class BatchEmitMixin:
    """The batch methods of TraceSink through `self.emit`, one call per event."""

    def emit_messages(self, event, topic, messages, *, app_id=None, client_host=None, ts_us=None,
                      same_as=None, arrays=None, sizes=None, ids=None, shared=None) -> None:
        ts_us = ts_us or time.time_ns() // 1000
        sized = event in SIZED
        for m in messages:
            f = m.fields
            self.emit(event, message_id=f[M_ID], topic=topic, message_type=f[M_TYPE], key=f[M_KEY],
                      business_id=f[M_BUSINESS_ID], app_id=app_id, client_host=client_host,
                      size=len(f[M_BODY]) if sized else None, ts_us=ts_us)

    def emit_group(self, event, topic, group, rows, *, consumer=None, client_host=None, ts_us=None,
                   attempt=None) -> None:
        ts_us = ts_us or time.time_ns() // 1000
        for _seq, attempt, f in rows:
            self.emit(event, message_id=f[M_ID], topic=topic, message_type=f[M_TYPE], key=f[M_KEY],
                      business_id=f[M_BUSINESS_ID], group=group, consumer=consumer, client_host=client_host,
                      attempt=attempt, ts_us=ts_us)

    def emit_attempts(self, event, topic, group, entries, *, consumer=None, client_host=None, ts_us=None,
                      seqs=None) -> None:
        self.emit_group(event, topic, group, [(m.seq, e[1], m.fields) for e in entries for m in (e[0],)],
                        consumer=consumer, client_host=client_host, ts_us=ts_us)


class NullTraceSink:
    def emit(self, event: str, **fields) -> None:
        return None

    def emit_messages(self, event: str, topic: str, messages: list, **fields) -> None:
        return None

    def emit_group(self, event: str, topic: str, group: str, rows: list, **fields) -> None:
        return None

    def emit_attempts(self, event: str, topic: str, group: str, entries: list, **fields) -> None:
        return None

    def close(self) -> None:
        return None
