from drf_spectacular.utils import extend_schema
from rest_framework import viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from apps.bindings.api.serializers import (
    BindingApplicationSerializer,
    BindingSerializer,
    GrantApplicationSerializer,
    ProducerGrantSerializer,
)
from apps.bindings.filtersets import (
    BindingApplicationFilterSet,
    BindingFilterSet,
    GrantApplicationFilterSet,
    ProducerGrantFilterSet,
)
from apps.bindings.models import Binding, BindingApplication, GrantApplication, ProducerGrant
from apps.governance.api import ApplicationViewSet
from apps.provisioning.api.serializers import LiveStatusSerializer
from apps.provisioning.status import live_status_of


class BindingViewSet(viewsets.ReadOnlyModelViewSet):
    """Approved bindings. They are created by approving a binding application."""

    queryset = Binding.objects.select_related("topic__cluster", "app")
    serializer_class = BindingSerializer
    filterset_class = BindingFilterSet
    ordering_fields = ["created_at", "group"]
    action_perms = {"sync": "bindings.view_binding"}

    @extend_schema(responses=LiveStatusSerializer(many=True))
    @action(detail=True, methods=["get"], pagination_class=None, filter_backends=[])
    def sync(self, request, pk=None):
        """The binding's node read from its cluster's ZooKeeper now."""
        return Response(LiveStatusSerializer([s.as_dict() for s in live_status_of("binding", self.get_object())],
                                             many=True).data)


class ProducerGrantViewSet(viewsets.ReadOnlyModelViewSet):
    queryset = ProducerGrant.objects.select_related("topic", "app")
    serializer_class = ProducerGrantSerializer
    filterset_class = ProducerGrantFilterSet
    action_perms = {"sync": "bindings.view_producergrant"}

    @extend_schema(responses=LiveStatusSerializer(many=True))
    @action(detail=True, methods=["get"], pagination_class=None, filter_backends=[])
    def sync(self, request, pk=None):
        return Response(LiveStatusSerializer([s.as_dict() for s in live_status_of("grant", self.get_object())],
                                             many=True).data)


class BindingApplicationViewSet(ApplicationViewSet):
    queryset = BindingApplication.objects.select_related("topic__team", "topic__cluster", "app", "applicant") \
        .prefetch_related("decisions__actor")
    serializer_class = BindingApplicationSerializer
    filterset_class = BindingApplicationFilterSet
    search_fields = ["group", "description", "reason"]
    ordering_fields = ["created_at", "submitted_at"]


class GrantApplicationViewSet(ApplicationViewSet):
    queryset = GrantApplication.objects.select_related("topic__team", "topic__cluster", "app", "applicant") \
        .prefetch_related("decisions__actor")
    serializer_class = GrantApplicationSerializer
    filterset_class = GrantApplicationFilterSet
    search_fields = ["description", "reason"]
    ordering_fields = ["created_at", "submitted_at"]
