from rest_framework import serializers

from apps.alerts.actions import MAX_RECEIVERS
from apps.alerts.models import AlertEvent, AlertRule
from apps.bindings.api.serializers import TopicField
from apps.clusters.models import Cluster
from apps.topics.models import Topic


class AlertRuleSerializer(serializers.ModelSerializer):
    """Shape only; the rules of each field (and who may hold the rule) are the action's (apps.alerts.actions)."""

    cluster = serializers.SlugRelatedField(slug_field="name", queryset=Cluster.objects.all())
    topic = TopicField(queryset=Topic.objects.all(), required=False, allow_null=True,
                       help_text="topic id, or name@environment; empty for cluster-wide kinds")
    threshold = serializers.FloatField(required=False, min_value=0, max_value=1e15,
                                       help_text="defaults to 1 for no_consumers and broker_down")
    for_seconds = serializers.IntegerField(required=False, min_value=0, max_value=7 * 86400)
    webhook_urls = serializers.ListField(child=serializers.CharField(max_length=500), required=False,
                                         max_length=MAX_RECEIVERS)
    emails = serializers.ListField(child=serializers.CharField(max_length=254), required=False,
                                   max_length=MAX_RECEIVERS)
    created_by = serializers.CharField(source="created_by.username", read_only=True, allow_null=True)

    class Meta:
        model = AlertRule
        fields = ["id", "name", "kind", "cluster", "topic", "group", "threshold", "for_seconds", "webhook_urls",
                  "emails", "enabled", "created_by", "created_at", "updated_at"]
        read_only_fields = ["id", "created_by", "created_at", "updated_at"]
        validators = []  # uniqueness of the name per cluster: the action answers with a field error


class AlertEventSerializer(serializers.ModelSerializer):
    class Meta:
        model = AlertEvent
        fields = ["id", "alertname", "status", "rule", "cluster", "labels", "annotations", "starts_at", "ends_at",
                  "first_notified_at", "last_notified_at"]
        read_only_fields = fields


class FiringAlertSerializer(serializers.Serializer):
    """An alert as Alertmanager holds it now (its API v2 shape, in part)."""

    fingerprint = serializers.CharField()
    labels = serializers.DictField(child=serializers.CharField())
    annotations = serializers.DictField(child=serializers.CharField())
    startsAt = serializers.CharField()  # noqa: N815 (Alertmanager's names)
    status = serializers.DictField()


class SilenceSerializer(serializers.Serializer):
    id = serializers.CharField(read_only=True)
    matchers = serializers.DictField(child=serializers.CharField(max_length=500), help_text='{"rule_id": "12"}')
    hours = serializers.FloatField(write_only=True, min_value=0.001, max_value=7 * 24)
    comment = serializers.CharField(max_length=1000)
    state = serializers.CharField(read_only=True)
    ends_at = serializers.CharField(read_only=True)
    created_by = serializers.CharField(read_only=True)
