"""CSV exports of search results, streamed so a large result never sits in memory."""

from __future__ import annotations

import csv
from collections.abc import Callable, Iterable

from django.http import StreamingHttpResponse

_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


class _Echo:
    def write(self, value):
        return value


def _cell(value) -> str:
    text = "" if value is None else str(value)
    # a spreadsheet would run a cell starting like a formula: keep it text
    return "'" + text if text.startswith(_FORMULA_START) else text


def csv_response(filename: str, header: list[str], rows: Iterable, row: Callable[[object], list]) -> StreamingHttpResponse:
    writer = csv.writer(_Echo())

    def stream():
        yield writer.writerow(header)
        for item in rows:
            yield writer.writerow([_cell(v) for v in row(item)])

    response = StreamingHttpResponse(stream(), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


MESSAGE_HEADER = ["message_id", "topic", "message_type", "key", "business_id", "app_id", "producer_host", "broker",
                  "cluster", "first_at", "last_at", "transaction_state", "final_state", "group_states", "attempts",
                  "event_count"]


def message_row(m) -> list:
    groups = ";".join(f"{g['group']}={g['state']}" for g in m.groups or [])
    return [m.message_id, m.topic, m.message_type, m.key, m.business_id, m.app_id, m.producer_host, m.broker,
            m.cluster, m.first_at.isoformat(), m.last_at.isoformat(), m.transaction_state, m.final_state, groups,
            m.attempts, m.event_count]


def export_messages(queryset) -> StreamingHttpResponse:
    return csv_response("traced-messages.csv", MESSAGE_HEADER, queryset.iterator(chunk_size=2000), message_row)
