from rest_framework import serializers

from apps.bindings.api.serializers import TopicField
from apps.clusters.models import Cluster
from apps.moves.choices import DeadLetters
from apps.moves.models import FOLLOW_S_RANGE, MoveStep, TopicMove
from apps.topics.models import Topic


class MoveStepSerializer(serializers.ModelSerializer):
    class Meta:
        model = MoveStep
        fields = ["position", "name", "state", "attempts", "summary", "progress", "error", "started_at",
                  "finished_at", "updated_at"]
        read_only_fields = fields


class TopicMoveSerializer(serializers.ModelSerializer):
    topic = serializers.CharField(source="topic.name", read_only=True)
    environment = serializers.CharField(source="topic.environment", read_only=True)
    source = serializers.CharField(source="source.name", read_only=True)
    target = serializers.CharField(source="target.name", read_only=True)
    steps = MoveStepSerializer(many=True, read_only=True)

    class Meta:
        model = TopicMove
        fields = ["id", "topic", "environment", "source", "target", "dead_letters", "client_follow_s", "state",
                  "step", "error", "requested_as", "rollback_requested_by", "created_at", "heartbeat_at",
                  "finished_at", "steps"]
        read_only_fields = fields


class MoveRequestSerializer(serializers.Serializer):
    topic = TopicField(queryset=Topic.objects.all(), help_text="topic id, or name@environment")
    target = serializers.SlugRelatedField(slug_field="name", queryset=Cluster.objects.all(),
                                          help_text="the cluster that serves the topic afterwards")
    dead_letters = serializers.ChoiceField(
        choices=DeadLetters.choices, required=False, allow_null=True, default=None,
        help_text="what happens to the source's dead letters once it is drained; required when it holds some")
    client_follow_s = serializers.IntegerField(
        min_value=FOLLOW_S_RANGE[0], max_value=FOLLOW_S_RANGE[1], required=False, allow_null=True, default=None,
        help_text="seconds clients get to follow each route change (default 5: the SDK follows within 5 s)")
