from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from apps.clusters.rescale import read_rescale
from apps.clusters.zookeeper import ZooKeeperUnreachable
from apps.governance.api import ApplicationViewSet
from apps.provisioning.api.views import LiveSyncMixin
from apps.topics import actions
from apps.topics.api.serializers import (
    AppCheckHostsSerializer,
    AppCheckUrlSerializer,
    AppSerializer,
    AppWithSecretSerializer,
    RotateSecretSerializer,
    TopicApplicationSerializer,
    TopicMappingSerializer,
    TopicSerializer,
)
from apps.topics.filtersets import AppFilterSet, TopicApplicationFilterSet, TopicFilterSet
from apps.topics.models import App, Topic, TopicApplication


def _with_secret(app, secret):
    data = AppWithSecretSerializer(app).data
    data["secret"] = secret
    return data


class AppViewSet(LiveSyncMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Producer/consumer identities. The secret is in the answer to create and rotate-secret only."""

    queryset = App.objects.select_related("team", "created_by")
    serializer_class = AppSerializer
    filterset_class = AppFilterSet
    search_fields = ["app_id", "description"]
    lookup_field = "app_id"
    action_perms = {"rotate_secret": "topics.change_app", "sync": "topics.view_app",
                    "check_url": "topics.change_app", "check_hosts": "topics.approve_check_hosts"}
    sync_kind = "app"

    @extend_schema(responses=AppWithSecretSerializer)
    def create(self, request):
        body = AppSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        app, secret = actions.create_app(actor=request.user, app_id=body.validated_data["app_id"],
                                         team=body.validated_data["team"],
                                         description=body.validated_data.get("description", ""))
        return Response(_with_secret(app, secret), status=status.HTTP_201_CREATED)

    @extend_schema(request=RotateSecretSerializer, responses=AppWithSecretSerializer)
    @action(detail=True, methods=["post"], url_path="rotate-secret")
    def rotate_secret(self, request, app_id=None):
        """A new secret. The brokers accept the old one too for `old_secret_valid_for_s` seconds (default one
        hour; 0: only until the new hash is provisioned, see `sync`), then only the new one."""
        app = self.get_object()
        body = RotateSecretSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        app, secret = actions.rotate_app_secret(actor=request.user, app=app,
                                                old_secret_valid_for_s=body.validated_data["old_secret_valid_for_s"])
        return Response(_with_secret(app, secret))

    @extend_schema(request=AppCheckUrlSerializer, responses=AppSerializer)
    @action(detail=True, methods=["post"], url_path="check-url")
    def check_url(self, request, app_id=None):
        """Set the HTTP check URL back-checks use when no connection of the app can answer ("" removes it)."""
        body = AppCheckUrlSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        app = actions.set_app_check_url(actor=request.user, app=self.get_object(),
                                        check_url=body.validated_data["check_url"])
        return Response(AppSerializer(app).data)

    @extend_schema(request=AppCheckHostsSerializer, responses=AppSerializer)
    @action(detail=True, methods=["post"], url_path="check-hosts")
    def check_hosts(self, request, app_id=None):
        """An approver sets the hosts the app's check URL may name (the back-check calls no other)."""
        body = AppCheckHostsSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        app = actions.set_app_check_hosts(actor=request.user, app=self.get_object(),
                                          hosts=body.validated_data["check_hosts"])
        return Response(AppSerializer(app).data)


class TopicViewSet(LiveSyncMixin, viewsets.ReadOnlyModelViewSet):
    """Approved topics. They are created by approving a topic application."""

    queryset = Topic.objects.select_related("team", "cluster")
    serializer_class = TopicSerializer
    filterset_class = TopicFilterSet
    search_fields = ["name", "description"]
    ordering_fields = ["name", "environment", "created_at"]
    action_perms = {"sync": "topics.view_topic", "mapping": "topics.view_topic"}
    sync_kind = "topic"

    @extend_schema(responses=TopicMappingSerializer)
    @action(detail=True, methods=["get"], pagination_class=None, filter_backends=[])
    def mapping(self, request, **kwargs):
        """The topic's key mapping in its cluster's ZooKeeper now (version, partitions keys map to, placed, before)
        and, for an ordered topic, the drain progress of its last rescale: per bound group, which old partitions
        losing keys are drained and which are still owed (docs/ordered-topics.md)."""
        topic = self.get_object()
        body = {"topic": topic.name, "cluster": topic.cluster.name, "reachable": True, "error": "", "mapping": None}
        try:
            rescale = read_rescale(topic.cluster, topic.name, ordered=topic.ordered)
            body["mapping"] = rescale.as_dict() if rescale is not None else None
        except ZooKeeperUnreachable as exc:
            body.update(reachable=False, error=str(exc))
        return Response(TopicMappingSerializer(body).data)


class TopicApplicationViewSet(ApplicationViewSet):
    queryset = TopicApplication.objects.select_related("team", "cluster", "applicant", "topic").prefetch_related(
        "decisions__actor")
    serializer_class = TopicApplicationSerializer
    filterset_class = TopicApplicationFilterSet
    search_fields = ["name", "description", "reason"]
    ordering_fields = ["created_at", "submitted_at", "name"]
