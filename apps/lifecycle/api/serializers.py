from rest_framework import serializers

from apps.bindings.api.serializers import TopicField
from apps.bindings.models import Binding, ProducerGrant
from apps.governance.api import ApplicationSerializer
from apps.lifecycle.choices import Operation
from apps.lifecycle.models import LifecycleApplication
from apps.topics.models import App, Topic


class DiffRowSerializer(serializers.Serializer):
    field = serializers.CharField()
    label = serializers.CharField()
    before = serializers.JSONField()
    after = serializers.JSONField()
    added = serializers.ListField(required=False, help_text="for lists: the values added")
    removed = serializers.ListField(required=False, help_text="for lists: the values removed")


class LifecycleApplicationSerializer(ApplicationSerializer):
    """Name the operation and its target: `topic` (change, retire), `binding` (change, remove), `grant` (revoke)
    or `app` (deactivate, activate); a change gives `changes` as {field: new value}."""

    operation = serializers.ChoiceField(choices=Operation.choices)
    target_kind = serializers.CharField(read_only=True)
    topic = TopicField(queryset=Topic.objects.all(), required=False, allow_null=True,
                       help_text="topic id, or name@environment")
    binding = serializers.PrimaryKeyRelatedField(queryset=Binding.objects.all(), required=False, allow_null=True)
    grant = serializers.PrimaryKeyRelatedField(queryset=ProducerGrant.objects.all(), required=False, allow_null=True)
    app = serializers.SlugRelatedField(slug_field="app_id", queryset=App.objects.all(), required=False,
                                       allow_null=True)
    changes = serializers.JSONField(required=False, default=dict,
                                    help_text="a change: {field: new value}, e.g. {\"retention_hours\": 96}; a team "
                                              "by name")
    team = serializers.CharField(source="team.name", read_only=True, default=None,
                                 help_text="the team whose approver decides")
    target = serializers.CharField(source="target_name", read_only=True)
    diff = DiffRowSerializer(many=True, read_only=True, help_text="each changed field: before → after")
    before = serializers.JSONField(read_only=True)

    class Meta:
        model = LifecycleApplication
        fields = [*ApplicationSerializer.WORKFLOW_FIELDS, *LifecycleApplication.fields_asked, "target_kind",
                  "target", "team", "diff", "before", "base_revision", "applied_revision"]
        read_only_fields = ["base_revision", "applied_revision"]
