"""REST of the dead-letter browser (docs/transactions.md "Dead-letter browser"): list a group's dead letters with
previews; re-drive or delete the selected ones or all that match (a Celery run, its progress at
/api/v1/redrives/<id>/); copy some to another topic of the same team; reset the group's position.

Who may call: browsing needs `transactions.browse_deadletters` (SREs, auditors, developers and approvers), the
changes `transactions.manage_deadletters` (SREs, developers); both checked before the input is read, the team
scope (developers and approvers: their teams' topics) by the reading side and the actions.
"""

from __future__ import annotations

from django.core.exceptions import PermissionDenied
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from apps.clusters.models import Cluster
from apps.clusters.zookeeper import ZooKeeperUnreachable
from apps.transactions import actions
from apps.transactions.api.serializers import RedriveSerializer
from apps.transactions.broker_admin import BrokerAdminError
from apps.transactions.dead_letters import MAX_PAGE, PAGE, DeadLetterQuery, binding_of, may_browse, read_page
from apps.transactions.roles import BROWSE, MANAGE
from control_plane.errors import ActionError


class GroupSerializer(serializers.Serializer):
    cluster = serializers.SlugRelatedField(slug_field="name", queryset=Cluster.objects.all())
    topic = serializers.CharField(max_length=255)
    group = serializers.CharField(max_length=63)


class FiltersSerializer(GroupSerializer):
    message_type = serializers.CharField(max_length=255, required=False, allow_blank=True, default="")
    key = serializers.CharField(max_length=255, required=False, allow_blank=True, default="")
    business_id = serializers.CharField(max_length=255, required=False, allow_blank=True, default="")
    since = serializers.DateTimeField(required=False, allow_null=True, default=None, help_text="dead at or after")
    until = serializers.DateTimeField(required=False, allow_null=True, default=None, help_text="dead before")

    def query(self) -> DeadLetterQuery:
        d = self.validated_data
        return DeadLetterQuery(d["message_type"], d["key"], d["business_id"], d["since"], d["until"])


class ListQuerySerializer(FiltersSerializer):
    after = serializers.RegexField(r"^[0-9]+:.{1,64}$", required=False, help_text="next_after of the previous page")
    limit = serializers.IntegerField(min_value=1, max_value=MAX_PAGE, default=PAGE)


class DeadLetterSerializer(serializers.Serializer):
    message_id = serializers.CharField()
    message_type = serializers.CharField()
    key = serializers.CharField(allow_null=True)
    business_id = serializers.CharField(allow_null=True)
    app_id = serializers.CharField(allow_null=True)
    cause = serializers.CharField()
    attempts = serializers.IntegerField()
    dead_at = serializers.DateTimeField()
    node_id = serializers.CharField(help_text="the broker holding it")
    headers = serializers.DictField(child=serializers.CharField(), required=False)
    body_size = serializers.IntegerField(required=False)
    body_truncated = serializers.BooleanField(required=False, help_text="only the first 4 KiB are shown")
    body_kind = serializers.ChoiceField(choices=["json", "hex"], help_text="json: the whole body, pretty; hex: bytes")
    body_text = serializers.CharField(allow_blank=True)


class DeadLetterPageSerializer(serializers.Serializer):
    total = serializers.IntegerField(help_text="dead letters matching the filters, on every broker")
    next_after = serializers.CharField(allow_null=True)
    dead_letters = DeadLetterSerializer(many=True)


class SelectionSerializer(FiltersSerializer):
    message_ids = serializers.ListField(child=serializers.CharField(max_length=64), required=False, default=list,
                                        max_length=actions.MAX_REDRIVE_IDS, help_text="the selected dead letters")
    all_matching = serializers.BooleanField(default=False, help_text="every dead letter the filters match instead")


class CopySerializer(GroupSerializer):
    message_ids = serializers.ListField(child=serializers.CharField(max_length=64), max_length=actions.MAX_COPY_IDS)
    to_topic = serializers.CharField(max_length=255, help_text="an active topic of the same team and cluster")


class SkippedSerializer(serializers.Serializer):
    message_id = serializers.CharField()
    reason = serializers.CharField()


class CopyResultSerializer(serializers.Serializer):
    copied = serializers.ListField(child=serializers.CharField())
    skipped = SkippedSerializer(many=True)


class ResetSerializer(GroupSerializer):
    to = serializers.DateTimeField(required=False, allow_null=True, default=None,
                                   help_text="skip what was stored before this time (absent or null: now)")


class ResetResultSerializer(serializers.Serializer):
    cluster = serializers.CharField()
    topic = serializers.CharField()
    group = serializers.CharField()
    to = serializers.DateTimeField()
    skipped = serializers.IntegerField(help_text="messages no longer owed to the group")
    by_broker = serializers.DictField(child=serializers.IntegerField())


class DeadLetterViewSet(viewsets.ViewSet):
    """A group's dead letters: browse, re-drive, delete, copy; and the group's position reset."""

    action_perms = {"list": BROWSE, "redrive": MANAGE, "delete_selected": MANAGE, "copy": MANAGE, "reset": MANAGE}

    @extend_schema(parameters=[ListQuerySerializer], responses=DeadLetterPageSerializer)
    def list(self, request):
        """One page of a group's dead letters that match the filters, with a preview of each."""
        query = ListQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        d = query.validated_data
        binding = binding_of(d["cluster"], d["topic"], d["group"])
        if not may_browse(request.user, binding.topic):
            raise PermissionDenied(f"only SREs, auditors and team {binding.topic.team.name} see these dead letters")
        try:
            page = read_page(d["cluster"], d["topic"], d["group"], query.query(), after=d.get("after"),
                             limit=d["limit"])
        except (BrokerAdminError, ZooKeeperUnreachable) as exc:
            raise ActionError(f"The brokers could not be read: {exc}") from exc
        return Response(DeadLetterPageSerializer(
            {"total": page.total, "next_after": page.next_after, "dead_letters": page.rows}).data)

    def _run(self, request, operation: str) -> Response:
        body = SelectionSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        d, query = body.validated_data, body.query()
        everything = d["all_matching"]
        run = actions.request_redrive(
            actor=request.user, cluster=d["cluster"], topic=d["topic"], group=d["group"], operation=operation,
            message_ids=d["message_ids"], all_matching=everything,
            since=query.since, until=query.until, filters=query.stored())
        return Response(RedriveSerializer(run).data, status=status.HTTP_202_ACCEPTED)

    @extend_schema(request=SelectionSerializer, responses={202: RedriveSerializer})
    @action(detail=False, methods=["post"])
    def redrive(self, request):
        """Re-drive the selected dead letters (or all matching) to their group: a run, progress on /redrives/."""
        return self._run(request, "redrive")

    @extend_schema(request=SelectionSerializer, responses={202: RedriveSerializer})
    @action(detail=False, methods=["post"], url_path="delete")
    def delete_selected(self, request):
        """Delete the selected dead letters (or all matching): a run, progress on /redrives/."""
        return self._run(request, "delete")

    @extend_schema(request=CopySerializer, responses=CopyResultSerializer)
    @action(detail=False, methods=["post"])
    def copy(self, request):
        """Copy the selected dead letters to another topic of the same team (they stay dead letters here)."""
        body = CopySerializer(data=request.data)
        body.is_valid(raise_exception=True)
        d = body.validated_data
        result = actions.copy_dead_letters(actor=request.user, cluster=d["cluster"], topic=d["topic"],
                                           group=d["group"], message_ids=d["message_ids"], to_topic=d["to_topic"])
        return Response(CopyResultSerializer(result).data)

    @extend_schema(request=ResetSerializer, responses=ResetResultSerializer)
    @action(detail=False, methods=["post"])
    def reset(self, request):
        """Reset the group's position: what it owes that was stored before `to` (or now) is skipped."""
        body = ResetSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        d = body.validated_data
        result = actions.reset_group_position(actor=request.user, cluster=d["cluster"], topic=d["topic"],
                                              group=d["group"], to=d["to"])
        return Response(ResetResultSerializer(result).data)
