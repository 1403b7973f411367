from django.urls import path

from apps.provisioning import views

app_name = "provisioning"
urlpatterns = [
    path("sync/", views.DriftView.as_view(), name="drift"),
    path("sync/schedule/", views.ScheduleView.as_view(), name="schedule"),
    path("sync/runs/<int:pk>/", views.RunDetailView.as_view(), name="run"),
    path("sync/<slug:name>/reconcile/", views.ReconcileView.as_view(), name="reconcile"),
]
