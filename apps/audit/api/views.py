from drf_spectacular.utils import extend_schema
from rest_framework import viewsets
from rest_framework.decorators import action

from apps.audit.api.serializers import AuditRecordSerializer
from apps.audit.export import export_audit
from apps.audit.filtersets import AuditRecordFilterSet
from apps.audit.models import AuditRecord


class AuditRecordViewSet(viewsets.ReadOnlyModelViewSet):
    """The governance audit log: search by actor, action, object and time; read-only on every path."""

    queryset = AuditRecord.objects.all().order_by("-id")
    serializer_class = AuditRecordSerializer
    filterset_class = AuditRecordFilterSet
    filter_backends = viewsets.ReadOnlyModelViewSet.filter_backends[:1]

    @extend_schema(responses={(200, "text/csv"): str})
    @action(detail=False, methods=["get"], url_path="export")
    def export(self, request):
        """The search's results as CSV (same filters as the list)."""
        return export_audit(self.filter_queryset(self.get_queryset()))
