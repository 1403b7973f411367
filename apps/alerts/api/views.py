from django.core.exceptions import PermissionDenied
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.alerts import actions, alertmanager
from apps.alerts.api.serializers import (
    AlertEventSerializer,
    AlertRuleSerializer,
    FiringAlertSerializer,
    SilenceSerializer,
)
from apps.alerts.models import AlertEvent, AlertRule
from control_plane.api import ActionViewSet


class AlertRuleViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, ActionViewSet):
    """Alarm rules (docs/alerts.md). SREs hold every rule; a team's developers and approvers the rules on their
    own topics. Each change is audited and published to Prometheus and Alertmanager."""

    queryset = AlertRule.objects.select_related("cluster", "topic", "created_by")
    serializer_class = AlertRuleSerializer
    filterset_fields = ["cluster__name", "kind", "enabled"]
    lookup_value_regex = "[0-9]+"

    def create_via_action(self, data):
        return actions.create_rule(actor=self.request.user, **data)

    def update_via_action(self, instance, data):
        return actions.update_rule(actor=self.request.user, rule=instance, **data)

    def destroy(self, request, *args, **kwargs):
        actions.delete_rule(actor=request.user, rule=self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)


class AlertEventViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Past and present alerts as Alertmanager notified them (firing, then resolved)."""

    queryset = AlertEvent.objects.select_related("rule")
    serializer_class = AlertEventSerializer
    filterset_fields = ["status", "cluster", "alertname"]
    lookup_value_regex = "[0-9]+"


def _require(request, perm: str) -> None:
    if not request.user.has_perm(perm):
        raise PermissionDenied(f"{request.user.username} may not do this (needs {perm})")


class FiringAlertsView(APIView):
    """The alerts firing now, read from Alertmanager (neither silenced nor inhibited)."""

    @extend_schema(responses={200: FiringAlertSerializer(many=True)})
    def get(self, request):
        _require(request, "alerts.view_alertevent")
        found = alertmanager.alerts()
        return Response(FiringAlertSerializer(found, many=True).data)


def _silence_out(s: dict) -> dict:
    return {"id": s.get("id"), "matchers": {m["name"]: m["value"] for m in s.get("matchers", [])},
            "comment": s.get("comment", ""), "state": s.get("status", {}).get("state", ""),
            "ends_at": s.get("endsAt", ""), "created_by": s.get("createdBy", "")}


class SilenceViewSet(viewsets.ViewSet):
    """Silences in Alertmanager: list (alerts readers), create and expire (SREs; audited)."""

    serializer_class = SilenceSerializer
    lookup_value_regex = "[0-9a-fA-F-]+"

    @extend_schema(responses={200: SilenceSerializer(many=True)})
    def list(self, request):
        _require(request, "alerts.view_alertevent")
        return Response([_silence_out(s) for s in alertmanager.silences()])

    @extend_schema(request=SilenceSerializer, responses={201: SilenceSerializer})
    def create(self, request):
        _require(request, "alerts.silence_alertevent")
        body = SilenceSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        silence_id = actions.create_silence(actor=request.user, **body.validated_data)
        return Response(_silence_out(alertmanager.get_silence(silence_id)), status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses={204: None})
    @action(detail=True, methods=["post"])
    def expire(self, request, pk=None):
        _require(request, "alerts.silence_alertevent")
        actions.expire_silence(actor=request.user, silence_id=pk)
        return Response(status=status.HTTP_204_NO_CONTENT)
