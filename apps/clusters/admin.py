from django.contrib import admin

from apps.clusters import actions
from apps.clusters.models import Cluster
from control_plane.web import ActionAdmin


@admin.register(Cluster)
class ClusterAdmin(ActionAdmin):
    list_display = ("name", "environment", "region", "zk_connect", "zk_chroot", "storage_level", "status")
    list_filter = ("environment", "storage_level", "status")
    search_fields = ("name", "description")
    fields = actions.EDITABLE_FIELDS

    def create_via_action(self, request, obj, data):
        return actions.create_cluster(actor=request.user, **data)

    def update_via_action(self, request, obj, data):
        return actions.update_cluster(actor=request.user, cluster=obj, **data)
