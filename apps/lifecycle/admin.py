from django.contrib import admin

from apps.governance.admin import ReadOnlyAdmin
from apps.lifecycle.models import LifecycleApplication


@admin.register(LifecycleApplication)
class LifecycleApplicationAdmin(ReadOnlyAdmin):
    list_display = ("number", "operation", "target_kind", "topic", "app", "applicant", "state", "submitted_at")
    list_filter = ("state", "operation", "target_kind")
