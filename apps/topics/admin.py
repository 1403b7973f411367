from django.contrib import admin

from apps.governance.admin import ReadOnlyAdmin
from apps.topics.models import App, Topic, TopicApplication


@admin.register(App)
class AppAdmin(ReadOnlyAdmin):
    list_display = ("app_id", "team", "active", "revision", "secret_rotated_at")
    list_filter = ("active", "team")
    search_fields = ("app_id", "description")
    exclude = ("secret_hash",)


@admin.register(Topic)
class TopicAdmin(ReadOnlyAdmin):
    list_display = ("name", "environment", "cluster", "team", "revision", "status")
    list_filter = ("environment", "cluster", "status")
    search_fields = ("name", "description")


@admin.register(TopicApplication)
class TopicApplicationAdmin(ReadOnlyAdmin):
    list_display = ("id", "name", "environment", "team", "applicant", "state", "submitted_at")
    list_filter = ("state", "environment")
    search_fields = ("name", "reason")
