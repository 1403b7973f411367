from rest_framework import serializers

from apps.clusters.models import Cluster


class ClusterSerializer(serializers.ModelSerializer):
    class Meta:
        model = Cluster
        fields = ["id", "name", "environment", "region", "zk_connect", "zk_chroot", "storage_level",
                  "description", "status", "created_at", "updated_at"]
        read_only_fields = ["id", "created_at", "updated_at"]


class BrokerNodeSerializer(serializers.Serializer):
    node_id = serializers.CharField()
    host = serializers.CharField()
    port = serializers.IntegerField()
    metrics_port = serializers.IntegerField(allow_null=True)
    started_at = serializers.CharField(allow_null=True)
    version = serializers.CharField(allow_null=True)


class ClusterHealthSerializer(serializers.Serializer):
    reachable = serializers.BooleanField()
    error = serializers.CharField()
    layout_version = serializers.IntegerField(allow_null=True)
    brokers = BrokerNodeSerializer(many=True)
