from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, permissions, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import PermissionDenied
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.tracing import actions, schedule
from apps.tracing.api.pagination import TraceCursorPagination
from apps.tracing.api.permissions import CachedRolePermission
from apps.tracing.api.serializers import (
    IndexRunSerializer,
    IndexScheduleSerializer,
    IndexScheduleStateSerializer,
    TracedMessageDetailSerializer,
    TracedMessageSerializer,
)
from apps.tracing.export import export_messages
from apps.tracing.filtersets import IndexRunFilterSet, TracedMessageFilterSet
from apps.tracing.models import IndexRun, TracedMessage
from apps.tracing.paging import NEWEST_FIRST
from apps.tracing.queries import may_trace, timeline_of, visible_messages

REFUSED = "This message is on a topic none of your teams owns: ask its team, an auditor or an SRE to trace it."


class TracedMessageViewSet(viewsets.ReadOnlyModelViewSet):
    """Traced messages: search by message_id, business_id, key, or topic + since/until + state, on one cluster or
    all; newest first in cursor pages. Developers and approvers see the messages of their teams' topics (another
    team's message by id: 403); auditors, SREs and admins see all. Read-only."""

    queryset = TracedMessage.objects.defer("timeline")  # a search lists summaries; retrieve reads the timeline
    serializer_class = TracedMessageSerializer
    permission_classes = [CachedRolePermission]
    filterset_class = TracedMessageFilterSet
    filter_backends = viewsets.ReadOnlyModelViewSet.filter_backends[:1]
    pagination_class = TraceCursorPagination
    lookup_field = "message_id"
    lookup_value_regex = "[^/]+"

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):  # the schema's generation has no user
            return super().get_queryset()
        return visible_messages(self.request.user, super().get_queryset())

    def retrieve(self, request, message_id=None):
        message = get_object_or_404(TracedMessage, message_id=message_id)
        if not may_trace(request.user, message):
            raise PermissionDenied(REFUSED)
        serializer = TracedMessageDetailSerializer(message, context={"request": request,
                                                                      "timeline": timeline_of(message)})
        return Response(serializer.data)

    @extend_schema(responses={(200, "text/csv"): str})
    @action(detail=False, methods=["get"], url_path="export")
    def export(self, request):
        """The search's results as CSV (same filters as the list)."""
        return export_messages(self.filter_queryset(self.get_queryset()).order_by(*NEWEST_FIRST))


class IndexRunViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.CreateModelMixin,
                      viewsets.GenericViewSet):
    """Builds of the trace index. POST (no body) starts one now ("rebuild now"); GET shows its progress."""

    queryset = IndexRun.objects.select_related("requested_by")
    serializer_class = IndexRunSerializer
    filterset_class = IndexRunFilterSet
    action_perms = {"create": "tracing.start_indexrun"}

    @extend_schema(request=None, responses={202: IndexRunSerializer})
    def create(self, request, *args, **kwargs):
        run = actions.request_index_build(actor=request.user)
        return Response(self.get_serializer(run).data, status=status.HTTP_202_ACCEPTED)


class SchedulePermission(permissions.BasePermission):
    def has_permission(self, request, view):
        perm = "tracing.view_indexrun" if request.method in permissions.SAFE_METHODS else "tracing.change_index_schedule"
        return bool(request.user and request.user.is_authenticated and request.user.has_perm(perm))


class IndexScheduleView(APIView):
    """How often Celery beat builds the trace index; SREs change it live (beat reads it from the database)."""

    permission_classes = [SchedulePermission]
    serializer_class = IndexScheduleSerializer

    @extend_schema(responses=IndexScheduleStateSerializer)
    def get(self, request):
        return Response(IndexScheduleStateSerializer(schedule.read_schedule().as_dict()).data)

    @extend_schema(request=IndexScheduleSerializer, responses=IndexScheduleStateSerializer)
    def put(self, request):
        serializer = IndexScheduleSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        result = actions.update_index_schedule(actor=request.user, **serializer.validated_data)
        return Response(IndexScheduleStateSerializer(result.as_dict()).data)
