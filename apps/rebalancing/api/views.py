from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from apps.rebalancing import actions
from apps.rebalancing.api.serializers import (
    PreviewSerializer,
    RebalanceRequestSerializer,
    RebalanceSerializer,
)
from apps.rebalancing.models import Rebalance


class RebalanceViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Rebalances of a cluster's partitions over its brokers (docs/rebalance.md); SREs only. `preview/` shows
    the plan without changing anything; POST starts it (202; a Celery worker applies it step by step);
    GET shows step i of n and what the worker read last; `resume/` runs a failed step again; `abandon/` stops."""

    queryset = Rebalance.objects.select_related("cluster")
    serializer_class = RebalanceSerializer
    lookup_value_regex = "[0-9]+"
    filterset_fields = ["state"]
    action_perms = {"preview": "rebalancing.add_rebalance", "resume": "rebalancing.change_rebalance",
                    "abandon": "rebalancing.change_rebalance"}

    @extend_schema(request=RebalanceRequestSerializer, responses={200: PreviewSerializer})
    @action(detail=False, methods=["post"])
    def preview(self, request):
        """The plan a rebalance would follow now: the replica moves, and replicas per broker before and after."""
        body = RebalanceRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        planned = actions.preview(actor=request.user, **body.validated_data)
        return Response(PreviewSerializer(planned).data)

    @extend_schema(request=RebalanceRequestSerializer, responses={202: RebalanceSerializer})
    def create(self, request, *args, **kwargs):
        body = RebalanceRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        rebalance = actions.start_rebalance(actor=request.user, **body.validated_data)
        return Response(self.get_serializer(rebalance).data, status=status.HTTP_202_ACCEPTED)

    @extend_schema(request=None, responses={202: RebalanceSerializer})
    @action(detail=True, methods=["post"])
    def resume(self, request, pk=None):
        """Run a failed rebalance's step again, from its start."""
        rebalance = actions.resume_rebalance(actor=request.user, rebalance=self.get_object())
        return Response(self.get_serializer(rebalance).data, status=status.HTTP_202_ACCEPTED)

    @extend_schema(request=None, responses={200: RebalanceSerializer})
    @action(detail=True, methods=["post"])
    def abandon(self, request, pk=None):
        """Stop the rebalance where it is (the placement stays valid)."""
        rebalance = actions.abandon_rebalance(actor=request.user, rebalance=self.get_object())
        return Response(self.get_serializer(rebalance).data)
