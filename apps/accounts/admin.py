from django.contrib import admin

from apps.accounts import actions
from apps.accounts.models import Team
from control_plane.web import ActionAdmin


@admin.register(Team)
class TeamAdmin(ActionAdmin):
    list_display = ("name", "display_name")
    fields = ("name", "display_name", "description", "members")
    filter_horizontal = ("members",)

    def create_via_action(self, request, obj, data):
        return actions.create_team(actor=request.user, **data)

    def update_via_action(self, request, obj, data):
        return actions.update_team(actor=request.user, team=obj, **data)
