from django.urls import path

from apps.alerts import views

app_name = "alerts"
urlpatterns = [
    path("alerts/", views.AlertsView.as_view(), name="list"),
    path("alerts/rules/new/", views.RuleFormView.as_view(), name="rule-create"),
    path("alerts/rules/<int:pk>/", views.RuleFormView.as_view(), name="rule-edit"),
    path("alerts/rules/<int:pk>/delete/", views.RuleDeleteView.as_view(), name="rule-delete"),
    path("alerts/silences/", views.SilenceCreateView.as_view(), name="silence-create"),
    path("alerts/silences/<str:silence_id>/expire/", views.SilenceExpireView.as_view(), name="silence-expire"),
    path("alerts/notify", views.NotifyView.as_view(), name="notify"),
]
