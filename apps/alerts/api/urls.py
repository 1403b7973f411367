from django.urls import path

from apps.alerts.api.views import AlertEventViewSet, AlertRuleViewSet, FiringAlertsView, SilenceViewSet


def register(router) -> None:
    router.register("monitoring/alert-rules", AlertRuleViewSet, basename="alert-rule")
    router.register("monitoring/alerts", AlertEventViewSet, basename="alert-event")
    router.register("monitoring/silences", SilenceViewSet, basename="alert-silence")


urlpatterns = [path("monitoring/firing/", FiringAlertsView.as_view(), name="api-alerts-firing")]
