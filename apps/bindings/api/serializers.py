from rest_framework import serializers

from apps.bindings.actions import BINDING_FIELDS, GRANT_FIELDS
from apps.bindings.models import Binding, BindingApplication, GrantApplication, ProducerGrant
from apps.governance.api import ApplicationSerializer
from apps.provisioning.api.serializers import RecordedSyncMixin
from apps.topics.models import App, Topic


class TopicField(serializers.PrimaryKeyRelatedField):
    """A topic by id, or by {"name", "environment"} / "name@environment" for readability."""

    def to_internal_value(self, data):
        if isinstance(data, str) and "@" in data:
            name, _, environment = data.partition("@")
            topic = Topic.objects.filter(name=name, environment=environment).first()
            if topic is None:
                self.fail("does_not_exist", pk_value=data)
            return topic
        return super().to_internal_value(data)

    def to_representation(self, value):
        return value.pk


class BindingSerializer(RecordedSyncMixin, serializers.ModelSerializer):
    sync_kind = "binding"
    topic = serializers.CharField(source="topic.name")
    environment = serializers.CharField(source="topic.environment")
    cluster = serializers.CharField(source="topic.cluster.name")
    app = serializers.CharField(source="app.app_id")

    class Meta:
        model = Binding
        fields = ["id", "topic", "environment", "cluster", "app", "group", "selector_kind", "selector_pattern",
                  "mode", "delivery_limit", "ttl_s", "backoff_initial_ms", "backoff_max_ms", "backoff_multiplier",
                  "max_in_flight", "on_failure", "description", "revision", "status", "sync", "created_at", "updated_at"]


class ProducerGrantSerializer(RecordedSyncMixin, serializers.ModelSerializer):
    sync_kind = "grant"
    topic = serializers.CharField(source="topic.name")
    environment = serializers.CharField(source="topic.environment")
    app = serializers.CharField(source="app.app_id")

    class Meta:
        model = ProducerGrant
        fields = ["id", "topic", "environment", "app", "revision", "status", "sync", "created_at"]


class BindingApplicationSerializer(ApplicationSerializer):
    topic = TopicField(queryset=Topic.objects.all(), help_text="topic id, or name@environment")
    app = serializers.SlugRelatedField(slug_field="app_id", queryset=App.objects.all())
    binding = serializers.PrimaryKeyRelatedField(read_only=True)

    class Meta:
        model = BindingApplication
        fields = [*ApplicationSerializer.WORKFLOW_FIELDS, *BINDING_FIELDS, "binding"]


class GrantApplicationSerializer(ApplicationSerializer):
    topic = TopicField(queryset=Topic.objects.all(), help_text="topic id, or name@environment")
    app = serializers.SlugRelatedField(slug_field="app_id", queryset=App.objects.all())
    grant = serializers.PrimaryKeyRelatedField(read_only=True)

    class Meta:
        model = GrantApplication
        fields = [*ApplicationSerializer.WORKFLOW_FIELDS, *GRANT_FIELDS, "grant"]
