"""The API's pages of traced messages: keyset cursors on (first_at, message_id) (apps.tracing.paging)."""

from __future__ import annotations

from rest_framework.exceptions import ValidationError
from rest_framework.pagination import BasePagination
from rest_framework.response import Response
from rest_framework.utils.urls import replace_query_param

from apps.tracing.paging import InvalidCursor, page_of


class TraceCursorPagination(BasePagination):
    """`?cursor=` from the `next` / `previous` links; `?page_size=` 1–500 (50 if not given)."""

    cursor_query_param = "cursor"
    page_size_query_param = "page_size"
    page_size = 50
    max_page_size = 500

    def page_size_of(self, request) -> int:
        raw = request.query_params.get(self.page_size_query_param)
        if raw in (None, ""):
            return self.page_size
        try:
            size = int(raw)
        except ValueError:
            size = 0
        if not 1 <= size <= self.max_page_size:
            raise ValidationError({self.page_size_query_param: [
                f"Give a whole number from 1 to {self.max_page_size}."]})
        return size

    def paginate_queryset(self, queryset, request, view=None):
        size = self.page_size_of(request)
        try:
            self.page = page_of(queryset, request.query_params.get(self.cursor_query_param), size)
        except InvalidCursor as exc:
            raise ValidationError({self.cursor_query_param: [str(exc)]}) from None
        self.base_url = request.build_absolute_uri()
        return self.page.results

    def _link(self, cursor: str | None) -> str | None:
        if cursor is None:
            return None
        return replace_query_param(self.base_url, self.cursor_query_param, cursor)

    def get_paginated_response(self, data):
        return Response({"next": self._link(self.page.next_cursor),
                         "previous": self._link(self.page.previous_cursor), "results": data})

    def get_paginated_response_schema(self, schema):
        link = {"type": "string", "nullable": True, "format": "uri"}
        return {"type": "object", "required": ["results"],
                "properties": {"next": link, "previous": link, "results": schema}}

    def get_schema_operation_parameters(self, view):
        return [
            {"name": self.cursor_query_param, "required": False, "in": "query",
             "description": "Where the page starts: the cursor of a `next` or `previous` link.",
             "schema": {"type": "string"}},
            {"name": self.page_size_query_param, "required": False, "in": "query",
             "description": f"Messages per page, 1 to {self.max_page_size} (default {self.page_size}).",
             "schema": {"type": "integer", "minimum": 1, "maximum": self.max_page_size}},
        ]
