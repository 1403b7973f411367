from rest_framework import viewsets

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
from apps.provisioning.api.views import LiveSyncMixin


class BindingViewSet(LiveSyncMixin, viewsets.ReadOnlyModelViewSet):
    """Approved bindings. They are created by approving a binding application."""

    queryset = Binding.objects.select_related("topic__cluster", "app")
    serializer_class = BindingSerializer
    filterset_class = BindingFilterSet
    ordering_fields = ["created_at", "group"]
    action_perms = {"sync": "bindings.view_binding"}
    sync_kind = "binding"


class ProducerGrantViewSet(LiveSyncMixin, viewsets.ReadOnlyModelViewSet):
    queryset = ProducerGrant.objects.select_related("topic", "app")
    serializer_class = ProducerGrantSerializer
    filterset_class = ProducerGrantFilterSet
    action_perms = {"sync": "bindings.view_producergrant"}
    sync_kind = "grant"


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
