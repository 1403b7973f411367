from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from apps.transactions import actions, queries
from apps.transactions.api.serializers import (
    PreparedMessageDetailSerializer,
    PreparedMessageSerializer,
    RedriveSerializer,
    ResolveSerializer,
    TxSummaryRowSerializer,
)
from apps.transactions.filtersets import PreparedMessageFilterSet, RedriveFilterSet
from apps.transactions.models import PreparedMessage, Redrive


class PreparedMessageViewSet(viewsets.ReadOnlyModelViewSet):
    """Prepared (transaction) messages the back-check sweep has seen, with their checks; `summary/` per topic
    and producing app. Developers and approvers see their teams' topics and apps."""

    queryset = PreparedMessage.objects.select_related("cluster")
    serializer_class = PreparedMessageSerializer
    filterset_class = PreparedMessageFilterSet
    filter_backends = viewsets.ReadOnlyModelViewSet.filter_backends[:1]
    lookup_value_regex = "[0-9]+"  # ids are numbers: /tx/messages/abc/ is a 404, not a 500
    action_perms = {"summary": "transactions.view_preparedmessage",
                    "resolve": "transactions.resolve_preparedmessage"}

    def get_queryset(self):
        return queries.visible_messages(self.request.user).select_related("cluster").order_by("prepared_at", "id")

    @extend_schema(responses=PreparedMessageDetailSerializer)
    def retrieve(self, request, pk=None):
        message = get_object_or_404(self.get_queryset().prefetch_related("checks"), pk=pk)
        return Response(PreparedMessageDetailSerializer(message).data)

    @extend_schema(responses=TxSummaryRowSerializer(many=True),
                   parameters=[OpenApiParameter("cluster", str), OpenApiParameter("topic", str),
                               OpenApiParameter("app_id", str)])
    @action(detail=False, methods=["get"], pagination_class=None)
    def summary(self, request):
        """Per cluster, topic and producing app: backlog, oldest age, checks done, outcomes, unresolved."""
        qs = self.filter_queryset(self.get_queryset())
        return Response(TxSummaryRowSerializer(queries.summary(qs), many=True).data)

    @extend_schema(request=ResolveSerializer, responses=PreparedMessageSerializer)
    @action(detail=True, methods=["post"])
    def resolve(self, request, pk=None):
        """Commit or roll back a prepared message by hand (SRE)."""
        body = ResolveSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        message = actions.resolve_manually(actor=request.user, message=self.get_object(),
                                           decision=body.validated_data["decision"])
        return Response(PreparedMessageSerializer(message).data)


class RedriveViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.CreateModelMixin,
                     viewsets.GenericViewSet):
    """Dead-letter re-drives: POST selects a group's dead letters by time range (since/until) or by ids and
    queues the re-drive (SRE); GET shows its progress."""

    queryset = Redrive.objects.select_related("cluster", "requested_by")
    serializer_class = RedriveSerializer
    filterset_class = RedriveFilterSet

    @extend_schema(responses={202: RedriveSerializer})
    def create(self, request, *args, **kwargs):
        body = self.get_serializer(data=request.data)
        body.is_valid(raise_exception=True)
        run = actions.request_redrive(actor=request.user, **body.validated_data)
        return Response(self.get_serializer(run).data, status=status.HTTP_202_ACCEPTED)
