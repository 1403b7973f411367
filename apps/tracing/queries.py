"""Reads of the tracing index shared by the web pages and the API."""

from __future__ import annotations

from apps.tracing.models import TIMELINE_ORDER, TracedMessage, TraceEvent

SEARCH_LIMIT = 200


def timeline_of(message_id: str) -> list[TraceEvent]:
    return list(TraceEvent.objects.filter(message_id=message_id).order_by(*TIMELINE_ORDER))


def group_states(message: TracedMessage) -> dict[str, str]:
    return {g["group"]: g["state"] for g in message.groups or []}
