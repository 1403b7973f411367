from django.urls import path

from apps.tracing.api.views import IndexRunViewSet, IndexScheduleView, TracedMessageViewSet


def register(router) -> None:
    router.register("traces/messages", TracedMessageViewSet, basename="trace-message")
    router.register("traces/index-runs", IndexRunViewSet, basename="trace-index-run")


# Not a viewset: the schedule is one object (included by platform/urls.py).
urlpatterns = [path("traces/schedule/", IndexScheduleView.as_view(), name="api-trace-schedule")]
