from django.contrib import admin

from apps.rebalancing.models import Rebalance


@admin.register(Rebalance)
class RebalanceAdmin(admin.ModelAdmin):
    """Read-only: rebalances start, resume and are abandoned on the cluster page or through the API."""

    list_display = ["id", "cluster", "state", "position", "phase", "created_at", "finished_at"]
    list_filter = ["state"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
