from django.urls import path, re_path

from apps.governance import views

app_name = "governance"
urlpatterns = [
    path("applications/", views.MyApplicationsView.as_view(), name="mine"),
    path("approvals/", views.ApprovalQueueView.as_view(), name="queue"),
    re_path(r"^applications/(?P<ref>[A-Za-z]-[0-9]{1,18}|[0-9]{1,18})/$", views.ApplicationLookupView.as_view(),
            name="lookup"),
]
