from django.urls import path

from apps.alerts import views

app_name = "alerts"
urlpatterns = [
    path("alerts/", views.AlertsView.as_view(), name="list"),
    path("alerts/silences/", views.SilenceCreateView.as_view(), name="silence-create"),
    path("alerts/silences/<str:silence_id>/expire/", views.SilenceExpireView.as_view(), name="silence-expire"),
    path("alerts/notify", views.NotifyView.as_view(), name="notify"),
]
