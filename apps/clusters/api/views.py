from drf_spectacular.utils import extend_schema
from rest_framework import mixins
from rest_framework.decorators import action
from rest_framework.response import Response

from apps.clusters import actions
from apps.clusters.api.serializers import ClusterHealthSerializer, ClusterSerializer, ClusterStatsSerializer
from apps.clusters.broker_stats import read_cluster_stats
from apps.clusters.filtersets import ClusterFilterSet
from apps.clusters.models import Cluster
from apps.clusters.zookeeper import read_health
from control_plane.api import ActionViewSet


class ClusterViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, ActionViewSet):
    queryset = Cluster.objects.all()
    serializer_class = ClusterSerializer
    filterset_class = ClusterFilterSet
    search_fields = ["name", "description"]
    ordering_fields = ["name", "environment", "created_at"]
    lookup_field = "name"
    action_perms = {"health": "clusters.view_cluster", "stats": "clusters.view_cluster"}

    def create_via_action(self, data):
        return actions.create_cluster(actor=self.request.user, **data)

    def update_via_action(self, instance, data):
        return actions.update_cluster(actor=self.request.user, cluster=instance, **data)

    @extend_schema(responses=ClusterHealthSerializer)
    @action(detail=True, methods=["get"])
    def health(self, request, name=None):
        """ZooKeeper as read now: reachable or not, and the broker nodes registered."""
        return Response(ClusterHealthSerializer(read_health(self.get_object())).data)

    @extend_schema(responses=ClusterStatsSerializer)
    @action(detail=True, methods=["get"])
    def stats(self, request, name=None):
        """Each live broker's /stats, read now, and the figures summed per topic and group."""
        health = read_health(self.get_object())
        live = read_cluster_stats(health)
        return Response(ClusterStatsSerializer({"reachable": health.reachable, "error": health.error,
                                                "answered": live.answered, "nodes": live.nodes,
                                                "topics": live.topics, "groups": live.groups}).data)
