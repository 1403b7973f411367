from django.urls import path

from apps.tracing import views

app_name = "tracing"
urlpatterns = [
    path("tracing/", views.TraceSearchView.as_view(), name="search"),
    path("tracing/export.csv", views.TraceExportView.as_view(), name="export"),
    path("tracing/messages/<str:message_id>/", views.MessageTraceView.as_view(), name="message"),
    path("tracing/index/", views.IndexRunsView.as_view(), name="index"),
    path("tracing/index/rebuild/", views.RebuildNowView.as_view(), name="rebuild"),
    path("tracing/index/schedule/", views.ScheduleView.as_view(), name="schedule"),
    path("tracing/index/runs/<int:pk>/", views.IndexRunView.as_view(), name="run"),
]
