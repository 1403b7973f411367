"""Reads of the tracing index shared by the web pages and the API."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime

from apps.tracing.models import TracedMessage

SEARCH_LIMIT = 200


@dataclass(frozen=True)
class TraceEvent:
    """One step of a message (docs/trace-events.md)."""

    event_id: str
    ts_us: int
    rank: int
    event: str
    group_name: str | None = None
    attempt: int | None = None
    consumer: str | None = None
    client_host: str | None = None
    broker: str | None = None
    app_id: str | None = None
    detail: str | None = None
    size: int | None = None

    @property
    def at(self) -> datetime:
        return datetime.fromtimestamp(self.ts_us // 1_000_000, UTC).replace(microsecond=self.ts_us % 1_000_000)


def timeline_order(e: TraceEvent) -> tuple:
    """By time; within one microsecond by attempt (a step of no attempt, like published or redriven, as 0),
    so attempt n's outcome comes before attempt n+1's delivery; then by the kind's rank, then event id."""
    return e.ts_us, e.attempt or 0, e.rank, e.event_id


def timeline_of(message: TracedMessage) -> list[TraceEvent]:
    events = [TraceEvent(group_name=e.pop("group", None), **e) for e in json.loads(message.timeline or "[]")]
    return sorted(events, key=timeline_order)


def group_states(message: TracedMessage) -> dict[str, str]:
    return {g["group"]: g["state"] for g in message.groups or []}
