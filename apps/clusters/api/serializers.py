from rest_framework import serializers

from apps.clusters.models import Cluster


class ClusterSerializer(serializers.ModelSerializer):
    class Meta:
        model = Cluster
        fields = ["id", "name", "environment", "region", "zk_connect", "zk_chroot", "storage_level",
                  "description", "status", "repair_drift", "backcheck_allow_private", "default_partitions",
                  "default_replication_factor", "min_insync", "created_at", "updated_at"]
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


class NodeStatsSerializer(serializers.Serializer):
    node_id = serializers.CharField(source="node.node_id")
    address = serializers.SerializerMethodField()
    ok = serializers.BooleanField()
    error = serializers.CharField()
    stats = serializers.JSONField(allow_null=True, help_text="the broker's /stats document, as it answered")

    def get_address(self, obj) -> str:
        return f"{obj.node.host}:{obj.node.port}"


class GroupFiguresSerializer(serializers.Serializer):
    topic = serializers.CharField()
    group = serializers.CharField()
    mode = serializers.CharField()
    bound = serializers.BooleanField()
    figures = serializers.DictField(child=serializers.IntegerField())


class TopicFiguresSerializer(serializers.Serializer):
    topic = serializers.CharField()
    figures = serializers.DictField(child=serializers.IntegerField())


class ClusterStatsSerializer(serializers.Serializer):
    reachable = serializers.BooleanField(help_text="whether the cluster's ZooKeeper answered")
    error = serializers.CharField()
    answered = serializers.IntegerField(help_text="broker nodes whose /stats answered")
    nodes = NodeStatsSerializer(many=True)
    topics = TopicFiguresSerializer(many=True, help_text="figures summed over the nodes that answered")
    groups = GroupFiguresSerializer(many=True, help_text="figures summed over the nodes that answered")
