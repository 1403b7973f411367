import copy

from rest_framework import serializers

from apps.tracing.actions import MAX_EVERY_MINUTES, MIN_EVERY_MINUTES
from apps.tracing.models import IndexRun, TracedMessage


class GroupStateSerializer(serializers.Serializer):
    group = serializers.CharField()
    state = serializers.CharField()
    attempts = serializers.IntegerField()
    deliveries = serializers.IntegerField()
    nacks = serializers.IntegerField()
    timeouts = serializers.IntegerField()
    first_delivered_us = serializers.IntegerField(allow_null=True)
    ended_us = serializers.IntegerField(allow_null=True)
    latency_us = serializers.IntegerField(allow_null=True)
    last_consumer = serializers.CharField(allow_null=True)
    detail = serializers.CharField(allow_null=True)


class TracedMessageSerializer(serializers.ModelSerializer):
    """A traced message's summary. The lookup is the API's hot path: the fields DRF builds from the model are
    built once per class and copied for each serializer, as DRF copies declared fields (building them again from
    the model took about a tenth of a lookup)."""

    groups = GroupStateSerializer(many=True, read_only=True)

    def get_fields(self):
        built = type(self).__dict__.get("_built_fields")
        if built is None:
            built = super().get_fields()
            type(self)._built_fields = built
        return copy.deepcopy(built)

    class Meta:
        model = TracedMessage
        fields = ["message_id", "topic", "message_type", "key", "business_id", "cluster", "app_id", "producer_host",
                  "broker", "size", "first_at", "last_at", "published_at", "stored_at", "transaction_state",
                  "final_state", "final_states", "attempts", "event_count", "groups", "indexed_at"]
        read_only_fields = fields


class TraceEventSerializer(serializers.Serializer):
    event_id = serializers.CharField()
    at = serializers.DateTimeField()
    ts_us = serializers.IntegerField()
    event = serializers.CharField()
    group = serializers.CharField(source="group_name", allow_null=True)
    attempt = serializers.IntegerField(allow_null=True)
    consumer = serializers.CharField(allow_null=True)
    client_host = serializers.CharField(allow_null=True)
    broker = serializers.CharField(allow_null=True)
    app_id = serializers.CharField(allow_null=True)
    detail = serializers.CharField(allow_null=True)
    size = serializers.IntegerField(allow_null=True)


class TracedMessageDetailSerializer(TracedMessageSerializer):
    timeline = serializers.SerializerMethodField()

    class Meta(TracedMessageSerializer.Meta):
        fields = [*TracedMessageSerializer.Meta.fields, "timeline"]
        read_only_fields = fields

    def get_timeline(self, obj) -> list[dict]:
        return TraceEventSerializer(self.context["timeline"], many=True).data


class IndexRunSerializer(serializers.ModelSerializer):
    requested_by = serializers.SlugRelatedField(slug_field="username", read_only=True)

    class Meta:
        model = IndexRun
        fields = ["id", "trigger", "requested_by", "state", "stage", "percent", "new_files", "new_events",
                  "messages", "error", "steps", "created_at", "started_at", "finished_at"]
        read_only_fields = fields


class IndexScheduleSerializer(serializers.Serializer):
    every_minutes = serializers.IntegerField(min_value=MIN_EVERY_MINUTES, max_value=MAX_EVERY_MINUTES)
    enabled = serializers.BooleanField()


class IndexScheduleStateSerializer(IndexScheduleSerializer):
    """The schedule as read: every_minutes is null when the beat task does not exist (nothing is scheduled)."""

    every_minutes = serializers.IntegerField(allow_null=True)
