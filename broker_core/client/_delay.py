"""Delayed messages in the SDK (issue 21): `delay=` seconds or `deliver_at=` (a datetime or Unix seconds) to the
Unix ms the message becomes deliverable (`protocol.M_DELIVER_AT_MS`), checked before anything is sent."""

from __future__ import annotations

import math
from datetime import datetime

from broker_core.protocol import MAX_DELAY_MS


class InvalidDelay(ValueError):
    """A delay the broker would refuse: negative, more than 30 days ahead, not a number, or both forms given."""


def due_ms(delay: float | None, deliver_at: datetime | float | None, now_ms: int) -> int:
    """The due time in Unix ms, or 0 for "at once" (no delay, a zero delay, or a time already past)."""
    if delay is not None and deliver_at is not None:
        raise InvalidDelay("give either delay= (seconds from now) or deliver_at= (a time), not both")
    if delay is None and deliver_at is None:
        return 0
    if delay is not None:
        seconds = _number(delay, "delay")
        if seconds < 0:
            raise InvalidDelay(f"delay must be 0 or more seconds, not {delay!r}")
        due = now_ms + round(seconds * 1000)
    else:
        if isinstance(deliver_at, datetime):
            if deliver_at.tzinfo is None:
                raise InvalidDelay("deliver_at must be a timezone-aware datetime (e.g. datetime.now(timezone.utc) "
                                   "+ timedelta(...)), or Unix seconds")
            at = deliver_at.timestamp()
        else:
            at = _number(deliver_at, "deliver_at")
        due = round(at * 1000)
    if due - now_ms > MAX_DELAY_MS:
        raise InvalidDelay(f"a message may be delayed by at most 30 days; this one would be due in "
                           f"{(due - now_ms) / 86_400_000:.2f} days")
    return due if due > now_ms else 0


def _number(value, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidDelay(f"{name} must be a finite number of seconds, not {value!r}")
    return float(value)
