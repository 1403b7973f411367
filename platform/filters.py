"""Filters shared by the sections' filtersets."""

from __future__ import annotations

from datetime import UTC, timedelta

import django_filters
from django import forms
from django_filters.fields import IsoDateTimeField

MAX_OFFSET = timedelta(hours=14)  # the widest UTC offset in use; PostgreSQL refuses some Python allows (±23:59)


class BoundedIsoDateTimeField(IsoDateTimeField):
    """An ISO 8601 date/time the database can compare with: a UTC offset within ±14:00, and a moment within
    years 1-9999 once in UTC. Anything else is a field error (400), not a database error (500)."""

    def to_python(self, value):
        value = super().to_python(value)
        if value is None:
            return value
        offset = value.utcoffset()
        if offset is not None and abs(offset) > MAX_OFFSET:
            raise forms.ValidationError("Give a UTC offset between -14:00 and +14:00.", code="offset")
        try:
            value.astimezone(UTC)
        except OverflowError:
            raise forms.ValidationError("Give a moment between the years 1 and 9999 in UTC.", code="overflow") from None
        return value


class IsoDateTimeFilter(django_filters.IsoDateTimeFilter):
    field_class = BoundedIsoDateTimeField
