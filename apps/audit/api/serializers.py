from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from apps.audit import diff, routine
from apps.audit.models import AuditRecord


class ChangeSerializer(serializers.Serializer):
    """One field the record changed: "changed", "added" (no value before) or "removed" (none after); for lists,
    what the new value adds and drops."""

    field = serializers.CharField()
    kind = serializers.ChoiceField(choices=["changed", "added", "removed"])
    before = serializers.JSONField(allow_null=True)
    after = serializers.JSONField(allow_null=True)
    added = serializers.ListField(child=serializers.JSONField())
    removed = serializers.ListField(child=serializers.JSONField())


class AuditRecordSerializer(serializers.ModelSerializer):
    actor = serializers.CharField(source="actor_name", read_only=True)
    changes = serializers.SerializerMethodField(help_text="The fields whose value differs between before and after.")
    routine = serializers.SerializerMethodField(help_text="A routine event of a sweep (hidden unless show_routine).")

    class Meta:
        model = AuditRecord
        fields = ["id", "timestamp", "actor", "action", "object_type", "object_id", "object_repr", "before", "after",
                  "changes", "routine", "request_id", "source", "prev_hash", "hash"]
        read_only_fields = fields

    @extend_schema_field(ChangeSerializer(many=True))
    def get_changes(self, obj) -> list[dict]:
        return ChangeSerializer(diff.changes(obj.before, obj.after), many=True).data

    def get_routine(self, obj) -> bool:
        return routine.is_routine(obj)


class RoutineGroupSerializer(serializers.Serializer):
    actor = serializers.CharField()
    action = serializers.CharField()
    count = serializers.IntegerField()
    first_at = serializers.DateTimeField()
    last_at = serializers.DateTimeField()
