"""Keyset (cursor) pages of traced messages, newest first, for the search page and the API.

The order is (first_at, message_id) descending: unique, so every message is on exactly one page however many
share a first_at, and a page costs the same at any depth (no OFFSET, no COUNT over the index). A cursor names
the message a page starts after (forward) or before (back), as opaque URL-safe text.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from datetime import datetime

from django.db.models import Q, QuerySet

NEWEST_FIRST = ("-first_at", "-message_id")
OLDEST_FIRST = ("first_at", "message_id")


class InvalidCursor(ValueError):
    """A cursor this module did not make (edited, cut short, from another list)."""

    message = "Not a cursor of this search: follow the next or previous link as given, or start again without it."


@dataclass(frozen=True)
class Page:
    results: list
    next_cursor: str | None
    previous_cursor: str | None


def encode(message, back: bool) -> str:
    raw = json.dumps([message.first_at.isoformat(), message.message_id, int(back)], separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode(cursor: str) -> tuple[datetime, str, bool]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        at, message_id, back = json.loads(raw)
        at = datetime.fromisoformat(at)
    except (binascii.Error, ValueError, TypeError, UnicodeDecodeError):
        raise InvalidCursor(InvalidCursor.message) from None
    if at.tzinfo is None or not isinstance(message_id, str) or back not in (0, 1):
        raise InvalidCursor(InvalidCursor.message)
    return at, message_id, bool(back)


def page_of(queryset: QuerySet, cursor: str | None, size: int) -> Page:
    """One page of `size` messages of `queryset` after (or before) `cursor`; raises InvalidCursor."""
    back = False
    if cursor:
        at, message_id, back = decode(cursor)
        # the bound on first_at alone is what an index on (…, first_at) can start its scan at; the OR settles ties
        if back:
            queryset = queryset.filter(Q(first_at__gte=at),
                                       Q(first_at__gt=at) | Q(first_at=at, message_id__gt=message_id))
        else:
            queryset = queryset.filter(Q(first_at__lte=at),
                                       Q(first_at__lt=at) | Q(first_at=at, message_id__lt=message_id))
    rows = list(queryset.order_by(*(OLDEST_FIRST if back else NEWEST_FIRST))[: size + 1])
    more = len(rows) > size
    rows = rows[:size]
    if back:
        rows.reverse()
    has_next = back or more
    has_previous = more if back else bool(cursor)
    return Page(rows, encode(rows[-1], back=False) if has_next and rows else None,
                encode(rows[0], back=True) if has_previous and rows else None)
