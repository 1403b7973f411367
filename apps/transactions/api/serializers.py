from rest_framework import serializers

from apps.clusters.models import Cluster
from apps.transactions.actions import MAX_REDRIVE_IDS
from apps.transactions.choices import Resolution, ResolutionSource
from apps.transactions.models import PreparedMessage, Redrive, TxCheck


class TxCheckSerializer(serializers.ModelSerializer):
    class Meta:
        model = TxCheck
        fields = ["at", "via", "answer", "connection", "error", "duration_ms"]
        read_only_fields = fields


class PreparedMessageSerializer(serializers.ModelSerializer):
    cluster = serializers.CharField(source="cluster.name")
    # "" while the message is still prepared
    resolution = serializers.ChoiceField(choices=Resolution.choices, allow_blank=True, read_only=True)
    resolution_source = serializers.ChoiceField(choices=ResolutionSource.choices, allow_blank=True, read_only=True)

    class Meta:
        model = PreparedMessage
        fields = ["id", "cluster", "broker", "message_id", "topic", "app_id", "message_type", "key", "business_id",
                  "prepared_at", "state", "checks_done", "next_check_at", "resolution", "resolution_source",
                  "resolved_at", "last_error", "first_seen_at"]
        read_only_fields = fields


class PreparedMessageDetailSerializer(PreparedMessageSerializer):
    checks = TxCheckSerializer(many=True, read_only=True)

    class Meta(PreparedMessageSerializer.Meta):
        fields = [*PreparedMessageSerializer.Meta.fields, "checks"]
        read_only_fields = fields


class OutcomeCountsSerializer(serializers.Serializer):
    producer = serializers.IntegerField()
    check = serializers.IntegerField()
    manual = serializers.IntegerField()


class TxSummaryRowSerializer(serializers.Serializer):
    cluster = serializers.CharField()
    topic = serializers.CharField()
    app_id = serializers.CharField()
    total = serializers.IntegerField(help_text="prepared messages the sweep has seen")
    backlog = serializers.IntegerField(help_text="still prepared")
    oldest_age_s = serializers.IntegerField(allow_null=True, help_text="age of the oldest still prepared")
    checks_done = serializers.IntegerField()
    committed = OutcomeCountsSerializer(help_text="committed, by who decided")
    rolled_back = OutcomeCountsSerializer(help_text="rolled back, by who decided")
    unresolved = serializers.IntegerField(help_text="rolled back after the last check")


class ResolveSerializer(serializers.Serializer):
    decision = serializers.ChoiceField(choices=["commit", "rollback"])


class RedriveSerializer(serializers.ModelSerializer):
    cluster = serializers.SlugRelatedField(slug_field="name", queryset=Cluster.objects.all())
    topic = serializers.CharField(max_length=255)
    group = serializers.CharField(max_length=63)
    message_ids = serializers.ListField(child=serializers.CharField(max_length=64), required=False,
                                        max_length=MAX_REDRIVE_IDS, default=list,
                                        help_text="re-drive these dead letters (or give since/until)")
    requested_by = serializers.SlugRelatedField(slug_field="username", read_only=True)

    class Meta:
        model = Redrive
        fields = ["id", "cluster", "topic", "group", "operation", "since", "until", "filters", "message_ids",
                  "requested_by", "state", "total", "done", "skipped", "batches", "error", "created_at", "started_at",
                  "heartbeat_at", "finished_at"]
        read_only_fields = ["operation", "filters", "state", "total", "done", "skipped", "batches", "error", "created_at", "started_at",
                            "heartbeat_at", "finished_at"]
