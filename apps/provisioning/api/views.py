import hashlib
import json

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from apps.provisioning import actions, routing
from apps.provisioning.api.serializers import (
    LiveStatusSerializer,
    ReconcileRequestSerializer,
    ReconcileRunSerializer,
    RouteSerializer,
    ScheduleSerializer,
    SyncStateSerializer,
)
from apps.provisioning.filtersets import ReconcileRunFilterSet, SyncStateFilterSet
from apps.provisioning.models import ReconcileRun, SyncState
from apps.provisioning.reconcile import reconcile
from apps.provisioning.status import live_status_of
from apps.topics.models import Topic


# `GET <object>/sync/` on a viewset of objects provisioned into ZooKeeper (their `sync_kind`). A comment, not a
# docstring: the API schema would show a docstring as the description of every viewset using it.
class LiveSyncMixin:
    sync_kind = ""

    @extend_schema(responses=LiveStatusSerializer(many=True))
    @action(detail=True, methods=["get"], pagination_class=None, filter_backends=[])
    def sync(self, request, **kwargs):
        """The object's node on each cluster that should hold it, read from ZooKeeper now."""
        return Response(LiveStatusSerializer([s.as_dict() for s in live_status_of(self.sync_kind, self.get_object())],
                                             many=True).data)


class SyncStateViewSet(viewsets.ReadOnlyModelViewSet):
    """Every object's sync state per cluster, as last read back from ZooKeeper."""

    queryset = SyncState.objects.select_related("cluster")
    serializer_class = SyncStateSerializer
    filterset_class = SyncStateFilterSet
    ordering_fields = ["updated_at", "checked_at", "path"]


class ReconcileRunViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Reconcile runs with their drift items; POST runs one now (with `repair`, fixes what it finds)."""

    queryset = ReconcileRun.objects.select_related("cluster", "requested_by")
    serializer_class = ReconcileRunSerializer
    filterset_class = ReconcileRunFilterSet
    ordering_fields = ["started_at"]
    action_perms = {"schedule": "provisioning.view_reconcilerun"}

    @extend_schema(request=ReconcileRequestSerializer, responses=ReconcileRunSerializer)
    def create(self, request):
        body = ReconcileRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        run = reconcile(body.validated_data["cluster"], repair=body.validated_data["repair"], actor=request.user)
        return Response(ReconcileRunSerializer(run).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=ScheduleSerializer, responses=ScheduleSerializer)
    @action(detail=False, methods=["get", "put"])
    def schedule(self, request):
        """The periodic reconcile's schedule (django-celery-beat); PUT changes it live (SRE)."""
        if request.method == "PUT":
            body = ScheduleSerializer(data=request.data)
            body.is_valid(raise_exception=True)
            actions.set_reconcile_schedule(actor=request.user, **body.validated_data)
        task = actions.ensure_reconcile_schedule()
        kwargs = json.loads(task.kwargs or "{}")
        return Response({"every_seconds": task.interval.every if task.interval else None, "enabled": task.enabled,
                         "repair": bool(kwargs.get("repair")), "last_run_at": task.last_run_at})


class RouteViewSet(viewsets.GenericViewSet):
    """Which cluster serves a topic in an environment and how to reach its ZooKeeper (for the SDK)."""

    queryset = Topic.objects.all()
    serializer_class = RouteSerializer
    lookup_field = "name"
    lookup_value_regex = r"[^/]+"
    filter_backends: list = []
    pagination_class = None

    env_param = OpenApiParameter("environment", OpenApiTypes.STR, required=True, description="dev, test, staging "
                                 "or prod")

    @extend_schema(parameters=[env_param], responses={200: RouteSerializer, 304: None})
    def retrieve(self, request, name=None):
        """The route of one topic, with an ETag: `If-None-Match` of the current one answers 304."""
        doc = routing.route(name, request.query_params.get("environment"))
        etag = '"' + hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:32] + '"'
        if etag in [t.strip() for t in request.headers.get("If-None-Match", "").split(",")]:
            return Response(status=status.HTTP_304_NOT_MODIFIED, headers={"ETag": etag})
        return Response(doc, headers={"ETag": etag})

    @extend_schema(parameters=[env_param], responses=RouteSerializer(many=True))
    def list(self, request):
        """Every route of one environment (the SDK caches and hot-reloads them)."""
        return Response(routing.routes(request.query_params.get("environment")))
