"""What the broker calls at each step of a message: a trace sink (docs/trace-events.md).

The sink must not block the event loop. Rare steps call `emit(...)`; the hot paths (a publish batch, a
delivery frame, an ack frame) call the batch methods, which take the broker's own lists as they are and
nothing computed only for the trace (the sink takes what it records from them):

    emit_messages(event, topic, messages, app_id=, client_host=, ts_us=, same_as=, arrays=)
                                                              messages: [StoredMessage]
                                                              arrays: their fields, when the caller holds them
    emit_group(event, topic, group, rows, consumer=, client_host=, ts_us=)
                                                              rows: [(seq, attempt, fields)]
    emit_attempts(event, topic, group, entries, consumer=, client_host=, ts_us=)
                                                              entries: [(StoredMessage, attempt, ...)]

A node holds one sink and hands it to its topics and groups, which call it whether tracing is on or not:
`NullTraceSink` (tracing off) records nothing, at the cost of a call per batch;
`broker_core.tracing.process.ProcessTraceSink` ships records to a child process that writes the files. No
pyarrow here: a broker without tracing never imports it.
"""

from __future__ import annotations

from typing import Protocol


class TraceSink(Protocol):
    def emit(self, event: str, *, message_id: str, topic: str, message_type: str, key: str | None = None,
             business_id: str | None = None, app_id: str | None = None, client_host: str | None = None,
             group: str | None = None, consumer: str | None = None, attempt: int | None = None,
             detail: str | None = None, size: int | None = None, ts_us: int | None = None) -> None: ...

    def emit_messages(self, event: str, topic: str, messages: list, *, app_id: str | None = None,
                      client_host: str | None = None, ts_us: int | None = None, same_as: object = None,
                      arrays: list | None = None) -> object:
        """One event per StoredMessage (`size` on `published` and `prepared`). Returns a handle: a later
        call for the same messages may pass it as `same_as` (a publish batch's `stored` after its
        `published`), so the record names them instead of repeating their values. `arrays`: the messages'
        field arrays in their order, when the caller holds that list (a publish: the values are taken from it
        without a pass over the StoredMessages)."""

    def emit_group(self, event: str, topic: str, group: str, rows: list, *, consumer: str | None = None,
                   client_host: str | None = None, ts_us: int | None = None) -> None:
        """One per-group event per (seq, attempt, fields) row."""

    def emit_attempts(self, event: str, topic: str, group: str, entries: list, *, consumer: str | None = None,
                      client_host: str | None = None, ts_us: int | None = None) -> None:
        """One per-group event per (StoredMessage, attempt, ...) entry."""

    def stats(self) -> dict | None:
        """{"dropped": events dropped, "waiting_bytes": shipped bytes the trace process has not read yet};
        None when tracing is off."""

    def close(self) -> None: ...


def _nothing(*args, **fields) -> None:
    return None


class NullTraceSink:
    """Tracing off: every method is one plain function that returns None (no bound method, no work)."""

    emit = emit_messages = emit_group = emit_attempts = stats = close = staticmethod(_nothing)
