from django.urls import path

from apps.alerts.api.views import AlertEventViewSet, AlertRuleViewSet, FiringAlertsView, SilenceViewSet


def register(router) -> None:
    router.register("alert-rules", AlertRuleViewSet, basename="alert-rule")
    router.register("alert-events", AlertEventViewSet, basename="alert-event")
    router.register("alert-silences", SilenceViewSet, basename="alert-silence")


urlpatterns = [path("alerts/firing/", FiringAlertsView.as_view(), name="api-alerts-firing")]
