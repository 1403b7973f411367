from django.contrib import admin

from apps.governance.admin import ReadOnlyAdmin
from apps.provisioning.models import ReconcileRun, SyncState


@admin.register(SyncState)
class SyncStateAdmin(ReadOnlyAdmin):
    list_display = ("cluster", "kind", "path", "state", "desired_revision", "zk_revision", "attempts", "checked_at")
    list_filter = ("cluster", "kind", "state")
    search_fields = ("path", "error")


@admin.register(ReconcileRun)
class ReconcileRunAdmin(ReadOnlyAdmin):
    list_display = ("cluster", "started_at", "source", "repair", "reachable", "missing", "unexpected", "different",
                    "repaired", "duration_ms")
    list_filter = ("cluster", "repair", "reachable")
