from rest_framework import serializers

from apps.accounts.models import Team
from apps.clusters.models import Cluster
from apps.governance.api import ApplicationSerializer
from apps.provisioning.api.serializers import RecordedSyncMixin
from apps.topics.actions import APPLICATION_FIELDS
from apps.topics.models import App, Topic, TopicApplication


class AppSerializer(serializers.ModelSerializer):
    team = serializers.SlugRelatedField(slug_field="name", queryset=Team.objects.all())
    created_by = serializers.CharField(source="created_by.username", read_only=True, default=None)
    check_url = serializers.CharField(read_only=True, help_text="the HTTP check URL (\"\": none); set with check-url/")

    class Meta:
        model = App
        fields = ["id", "app_id", "team", "description", "active", "check_url", "check_hosts", "revision",
                  "secret_rotated_at", "created_by", "created_at", "updated_at"]
        read_only_fields = ["active", "check_url", "check_hosts", "revision", "secret_rotated_at"]


class AppCheckUrlSerializer(serializers.Serializer):
    check_url = serializers.URLField(max_length=500, allow_blank=True,
                                     help_text="asked about the app's prepared messages when none of its connections "
                                               "has a check listener; \"\" removes it")


class RotateSecretSerializer(serializers.Serializer):
    old_secret_valid_for_s = serializers.IntegerField(
        min_value=0, max_value=7 * 24 * 3600, default=3600, required=False,
        help_text="seconds the brokers keep accepting the old secret (0: it stops as soon as the new hash lands; "
                  "default one hour, at most 7 days)")


class AppCheckHostsSerializer(serializers.Serializer):
    check_hosts = serializers.ListField(
        child=serializers.CharField(max_length=260), max_length=20, allow_empty=True,
        help_text="hosts the app's check URL may name: \"host\" (any port) or \"host:port\"; [] allows none")


class AppWithSecretSerializer(AppSerializer):
    """Returned once, at creation or rotation: the secret is not stored and cannot be shown again."""

    secret = serializers.CharField(read_only=True)

    class Meta(AppSerializer.Meta):
        fields = [*AppSerializer.Meta.fields, "secret", "previous_secret_valid_until"]
        read_only_fields = [*AppSerializer.Meta.read_only_fields, "previous_secret_valid_until"]


class TopicSerializer(RecordedSyncMixin, serializers.ModelSerializer):
    team = serializers.CharField(source="team.name")
    cluster = serializers.CharField(source="cluster.name")
    partitions = serializers.IntegerField(source="partition_count", read_only=True,
                                          help_text="The partitions keys map to (its own, else its cluster's default).")
    sync_kind = "topic"

    class Meta:
        model = Topic
        fields = ["id", "name", "environment", "cluster", "team", "message_types", "expected_peak_mps",
                  "max_message_bytes", "retention_hours", "storage_level", "transactional", "ordered",
                  "tx_check_delay_s", "tx_check_interval_s", "tx_check_max", "partitions", "description", "revision",
                  "status", "sync", "created_at", "updated_at"]


class GroupDrainSerializer(serializers.Serializer):
    group = serializers.CharField()
    drained = serializers.ListField(child=serializers.IntegerField(), help_text="Old partitions it finished.")
    owed = serializers.ListField(child=serializers.IntegerField(), help_text="Old partitions still awaited.")


class KeyMappingSerializer(serializers.Serializer):
    version = serializers.IntegerField(help_text="0: never rescaled (keys map to every placed partition).")
    partitions = serializers.IntegerField(help_text="The partitions keys map to now.")
    previous = serializers.IntegerField(help_text="Those they mapped to before this version.")
    placed = serializers.IntegerField(help_text="The physical partitions placed (a merged-away one stays until "
                                                "its groups finished it).")
    ordered = serializers.BooleanField()
    losing = serializers.ListField(child=serializers.IntegerField(),
                                   help_text="Old partitions some of whose keys map elsewhere now (ordered topics).")
    drained = serializers.BooleanField(help_text="Every bound group finished them: a further change may be written.")
    groups = GroupDrainSerializer(many=True)


class TopicMappingSerializer(serializers.Serializer):
    topic = serializers.CharField()
    cluster = serializers.CharField()
    reachable = serializers.BooleanField(help_text="Whether the cluster's ZooKeeper answered just now.")
    error = serializers.CharField(allow_blank=True)
    mapping = KeyMappingSerializer(allow_null=True, help_text="None: no placement (one partition, every broker).")

class TopicApplicationSerializer(ApplicationSerializer):
    team = serializers.SlugRelatedField(slug_field="name", queryset=Team.objects.all())
    cluster = serializers.SlugRelatedField(slug_field="name", queryset=Cluster.objects.all())
    message_types = serializers.ListField(child=serializers.CharField(max_length=64), allow_empty=False,
                                          max_length=50)
    topic = serializers.SlugRelatedField(slug_field="name", read_only=True)

    class Meta:
        model = TopicApplication
        fields = [*ApplicationSerializer.WORKFLOW_FIELDS, *APPLICATION_FIELDS, "topic"]
