from django.contrib import admin

from apps.moves.models import MoveStep, TopicMove


class MoveStepInline(admin.TabularInline):
    model = MoveStep
    extra = 0
    can_delete = False
    fields = ["position", "name", "state", "attempts", "summary", "error", "started_at", "finished_at"]
    readonly_fields = fields


@admin.register(TopicMove)
class TopicMoveAdmin(admin.ModelAdmin):
    """Read-only: moves start, roll back and resume through the move pages, the API or `move_topic`."""

    list_display = ["id", "topic", "source", "target", "state", "step", "created_at", "finished_at"]
    list_filter = ["state"]
    inlines = [MoveStepInline]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
