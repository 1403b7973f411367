from rest_framework import serializers

from apps.clusters.models import Cluster
from apps.rebalancing.models import Rebalance


class StepSerializer(serializers.Serializer):
    topic = serializers.CharField()
    partition = serializers.IntegerField()
    source = serializers.CharField(help_text="the broker the replica leaves")
    target = serializers.CharField(help_text="the broker that takes its place")
    leader = serializers.BooleanField(help_text="the replica leads the partition (the target leads it afterwards)")


class RebalanceSerializer(serializers.ModelSerializer):
    cluster = serializers.CharField(source="cluster.name", read_only=True)
    steps = StepSerializer(many=True, read_only=True)
    total = serializers.IntegerField(read_only=True, help_text="steps planned")

    class Meta:
        model = Rebalance
        fields = ["id", "cluster", "state", "brokers", "remove", "position", "total", "phase", "summary", "progress",
                  "error", "attempts", "steps", "requested_as", "created_at", "updated_at", "heartbeat_at",
                  "finished_at"]
        read_only_fields = fields


class RebalanceRequestSerializer(serializers.Serializer):
    cluster = serializers.SlugRelatedField(slug_field="name", queryset=Cluster.objects.all(),
                                           help_text="the cluster whose partitions are rebalanced")
    remove = serializers.ListField(
        child=serializers.RegexField(r"^[A-Za-z0-9._:-]{1,128}$", max_length=128), required=False, default=list,
        max_length=64, help_text="node ids of brokers to empty (to stop them afterwards); empty: balance only")


class PreviewSerializer(serializers.Serializer):
    cluster = serializers.CharField(source="cluster.name")
    brokers = serializers.ListField(child=serializers.CharField(), help_text="the brokers registered now")
    remove = serializers.ListField(child=serializers.CharField())
    steps = StepSerializer(many=True)
    replicas_before = serializers.DictField(child=serializers.IntegerField(), help_text="replicas per broker now")
    replicas_after = serializers.DictField(child=serializers.IntegerField(), help_text="replicas per broker after")
