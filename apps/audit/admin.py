from django.contrib import admin

from apps.audit.models import AuditRecord


@admin.register(AuditRecord)
class AuditRecordAdmin(admin.ModelAdmin):
    """Read-only: the audit log is append-only on every path, admin included."""

    list_display = ("id", "timestamp", "actor_name", "action", "object_type", "object_id", "source", "request_id")
    list_filter = ("action", "object_type", "source")
    search_fields = ("actor_name", "object_id", "object_repr", "request_id")

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
