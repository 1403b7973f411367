from django.urls import path

from apps.governance import views

app_name = "governance"
urlpatterns = [
    path("applications/", views.MyApplicationsView.as_view(), name="mine"),
    path("approvals/", views.ApprovalQueueView.as_view(), name="queue"),
]
