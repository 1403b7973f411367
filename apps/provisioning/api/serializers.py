from rest_framework import serializers

from apps.clusters.models import Cluster
from apps.provisioning.models import ReconcileRun, SyncState


class SyncStateSerializer(serializers.ModelSerializer):
    """The sync state recorded when provisioning or reconcile last read the node back from ZooKeeper."""

    cluster = serializers.CharField(source="cluster.name")

    class Meta:
        model = SyncState
        fields = ["id", "cluster", "kind", "object_id", "path", "state", "desired_revision", "zk_revision",
                  "zk_version", "landed_revision", "error", "problem", "diff", "attempts", "last_attempt_at",
                  "checked_at", "synced_at"]


# `sync`: the recorded sync state, per cluster, of an object provisioned into ZooKeeper (its `sync_kind`). A comment,
# not a docstring: the API schema would show a docstring as the description of every serializer using it.
class RecordedSyncMixin(serializers.Serializer):
    sync = serializers.SerializerMethodField()
    sync_kind = ""

    def get_sync(self, obj) -> list[dict]:
        return SyncStateSerializer(SyncState.objects.filter(kind=self.sync_kind, object_id=obj.pk)
                                   .select_related("cluster"), many=True).data


class LiveStatusSerializer(serializers.Serializer):
    """The sync state as read from ZooKeeper during this request (`live` false: it could not be read)."""

    kind = serializers.CharField()
    object_id = serializers.IntegerField()
    cluster = serializers.CharField()
    path = serializers.CharField()
    state = serializers.CharField()
    desired_revision = serializers.IntegerField()
    zk_revision = serializers.IntegerField(allow_null=True)
    zk_version = serializers.IntegerField(allow_null=True)
    problem = serializers.CharField()
    diff = serializers.DictField()
    error = serializers.CharField()
    live = serializers.BooleanField()
    attempts = serializers.IntegerField()
    last_attempt_at = serializers.CharField(allow_null=True)
    checked_at = serializers.CharField(allow_null=True)


class ReconcileRunSerializer(serializers.ModelSerializer):
    cluster = serializers.SlugRelatedField(slug_field="name", read_only=True)
    requested_by = serializers.CharField(source="requested_by.username", read_only=True, default=None)

    class Meta:
        model = ReconcileRun
        fields = ["id", "cluster", "requested_by", "source", "repair", "started_at", "finished_at", "reachable",
                  "error", "checked", "missing", "unexpected", "different", "repaired", "duration_ms", "items"]


class ReconcileRequestSerializer(serializers.Serializer):
    cluster = serializers.SlugRelatedField(slug_field="name", queryset=Cluster.objects.all())
    repair = serializers.BooleanField(default=False)


class ScheduleSerializer(serializers.Serializer):
    every_seconds = serializers.IntegerField(min_value=10, max_value=86400)
    enabled = serializers.BooleanField()
    repair = serializers.BooleanField(default=False)
    last_run_at = serializers.DateTimeField(read_only=True, allow_null=True)


class RouteSerializer(serializers.Serializer):
    """docs/routing.md; `cluster`, `zk_connect`, `zk_chroot`, `zk_hosts` are those of `produce`."""

    topic = serializers.CharField()
    environment = serializers.CharField()
    version = serializers.IntegerField(help_text="grows by one on every change of the route")
    produce = serializers.CharField(help_text="the cluster producers send to")
    consume = serializers.ListField(child=serializers.CharField(), help_text="the clusters consumers subscribe on")
    clusters = serializers.DictField(child=serializers.CharField(),
                                     help_text="each cluster named → its ZooKeeper connect string with chroot")
    status = serializers.CharField(help_text="active, or retired (consumers still drain it; publishes refused)")
    cluster = serializers.CharField()
    zk_connect = serializers.CharField()
    zk_chroot = serializers.CharField()
    zk_hosts = serializers.CharField(help_text="connect string with the chroot, as kazoo takes it")
    layout_version = serializers.IntegerField()
    revision = serializers.IntegerField()
    ordered = serializers.BooleanField()
    transactional = serializers.BooleanField()
    message_types = serializers.ListField(child=serializers.CharField())
    sync_state = serializers.CharField(help_text="the topic's node as last read back: pending, synced, failed, "
                                                 "drifted")
