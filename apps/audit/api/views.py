from drf_spectacular.utils import extend_schema
from rest_framework import viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response

from apps.audit import routine
from apps.audit.api.serializers import AuditRecordSerializer, RoutineGroupSerializer
from apps.audit.export import export_audit
from apps.audit.filtersets import AuditRecordFilterSet
from apps.audit.models import AuditRecord


class AuditRecordViewSet(viewsets.ReadOnlyModelViewSet):
    """The governance audit log: search by actor, action, object and time; read-only on every path. Each record
    carries its changes (before → after, changed fields only). Routine events of the platform's sweeps are left
    out unless `show_routine=true`; `routine/` counts them."""

    queryset = AuditRecord.objects.all().order_by("-id")
    serializer_class = AuditRecordSerializer
    filterset_class = AuditRecordFilterSet
    filter_backends = viewsets.ReadOnlyModelViewSet.filter_backends[:1]

    @extend_schema(responses={(200, "text/csv"): str})
    @action(detail=False, methods=["get"], url_path="export")
    def export(self, request):
        """The search's results as CSV (same filters as the list)."""
        return export_audit(self.filter_queryset(self.get_queryset()))

    @extend_schema(responses=RoutineGroupSerializer(many=True))
    @action(detail=False, methods=["get"], url_path="routine", pagination_class=None)
    def routine(self, request):
        """The routine events the search matches, by actor and action: how many, the first and the last."""
        filterset = AuditRecordFilterSet(request.query_params, queryset=self.get_queryset(), request=request)
        if not filterset.is_valid():
            raise ValidationError(filterset.errors)
        found = routine.groups(filterset.matching.filter(routine.routine_q()), [], None, None)
        return Response(RoutineGroupSerializer(found, many=True).data)
