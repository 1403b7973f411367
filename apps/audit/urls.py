from django.urls import path

from apps.audit import views

app_name = "audit"
urlpatterns = [
    path("audit/", views.AuditLogView.as_view(), name="list"),
    path("audit/export.csv", views.AuditExportView.as_view(), name="export"),
    path("audit/<int:pk>/", views.AuditRecordView.as_view(), name="detail"),
]
