from rest_framework import serializers

from apps.audit.models import AuditRecord


class AuditRecordSerializer(serializers.ModelSerializer):
    actor = serializers.CharField(source="actor_name", read_only=True)

    class Meta:
        model = AuditRecord
        fields = ["id", "timestamp", "actor", "action", "object_type", "object_id", "object_repr", "before", "after",
                  "request_id", "source", "prev_hash", "hash"]
        read_only_fields = fields
