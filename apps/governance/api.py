"""The REST side of the workflow, shared by every application kind: one base serializer and viewset.

Each kind's api/ module subclasses them and names its action functions; the viewset stays thin.
"""

from __future__ import annotations

import django_filters
from django.core.exceptions import ValidationError
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import exceptions, mixins, serializers, status, views
from rest_framework.decorators import action
from rest_framework.fields import SkipField
from rest_framework.response import Response
from rest_framework.reverse import reverse
from rest_framework.settings import api_settings

from apps.governance import actions as workflow
from apps.governance import policy
from apps.governance.queue import awaiting_filter, awaiting_keys, find, load
from apps.governance.workflow import Membership, State, decidable_slots, slot_summary
from apps.provisioning.api.serializers import SyncStateSerializer
from apps.provisioning.status import recorded_sync
from control_plane.api import ActionViewSet, _field_errors


def your_slots(serializer, user, application) -> list[str]:
    """The caller's decidable slots on one row; a list's rows share one serializer, so they share the caller's
    roles and teams, read once."""
    if user is None:
        return []
    membership = getattr(serializer, "_membership", None)
    if membership is None or membership.user is not user:
        membership = serializer._membership = Membership(user)
    return [str(s) for s in decidable_slots(user, application, membership)]


class DecisionSerializer(serializers.Serializer):
    by = serializers.CharField(source="actor.username")
    slot = serializers.CharField()
    verdict = serializers.CharField()
    comment = serializers.CharField()
    at = serializers.DateTimeField(source="created_at")


class ApplicationSerializer(serializers.ModelSerializer):
    """Workflow fields every application shows; `submit` (write-only, default true) sends it for approval."""

    WORKFLOW_FIELDS = ["id", "number", "reference", "kind", "kind_label", "state", "applicant", "submit",
                       "required_approvals", "decisions", "policy", "your_approval_slots", "sync", "submitted_at",
                       "decided_at", "created_at", "updated_at"]

    kind = serializers.SerializerMethodField()
    number = serializers.IntegerField(read_only=True, help_text="one numbering across every kind of application")
    reference = serializers.CharField(read_only=True, help_text="the number as people quote it: T-12, B-13, C-15")
    kind_label = serializers.CharField(read_only=True)
    # the workflow sets these (submit, approve, reject, withdraw); a body naming them is ignored, never a 500
    state = serializers.ChoiceField(choices=State.choices, read_only=True)
    submitted_at = serializers.DateTimeField(read_only=True, allow_null=True)
    decided_at = serializers.DateTimeField(read_only=True, allow_null=True)
    applicant = serializers.CharField(source="applicant.username", read_only=True)
    submit = serializers.BooleanField(write_only=True, default=True,
                                      help_text="false saves a draft; true (default) submits for approval")
    required_approvals = serializers.SerializerMethodField()
    decisions = DecisionSerializer(many=True, read_only=True)
    policy = serializers.JSONField(source="policy_report", read_only=True)
    your_approval_slots = serializers.SerializerMethodField()
    sync = serializers.SerializerMethodField()

    def get_kind(self, obj) -> str:
        return obj.kind

    def get_required_approvals(self, obj) -> list[dict]:
        return slot_summary(obj)

    def get_your_approval_slots(self, obj) -> list[str]:
        request = self.context.get("request")
        return your_slots(self, getattr(request, "user", None), obj) if request else []

    def get_sync(self, obj) -> list[dict]:
        """The recorded read-back of what the application put into ZooKeeper (GET …/sync/ reads it live)."""
        # A list loads every row's records at once (ApplicationListSerializer); a single object reads its own.
        records = getattr(self, "recorded_sync", None)
        if records is None:
            records = recorded_sync([obj])
        return SyncStateSerializer(records.get((obj.kind, obj.pk), []), many=True).data

    @classmethod
    def many_init(cls, *args, **kwargs):
        """DRF's many_init, with the list serializer that loads the page's sync records at once."""
        list_kwargs = {k: kwargs.pop(k) for k in serializers.LIST_SERIALIZER_KWARGS_REMOVE if kwargs.get(k) is not None}
        list_kwargs["child"] = cls(*args, **kwargs)
        list_kwargs.update({k: v for k, v in kwargs.items() if k in serializers.LIST_SERIALIZER_KWARGS})
        return ApplicationListSerializer(*args, **list_kwargs)


class ApplicationListSerializer(serializers.ListSerializer):
    """Reads the sync records of the whole page in one query instead of one per application."""

    def to_representation(self, data):
        items = list(data.all() if hasattr(data, "all") else data)
        self.child.recorded_sync = recorded_sync(items)
        return super().to_representation(items)


class ApplicationFilterSet(django_filters.FilterSet):
    state = django_filters.MultipleChoiceFilter(choices=State.choices)
    applicant = django_filters.CharFilter(field_name="applicant__username")
    mine = django_filters.BooleanFilter(method="filter_mine", label="Only my applications")
    awaiting_me = django_filters.BooleanFilter(method="filter_awaiting_me", label="Waiting for my approval")

    def filter_mine(self, queryset, name, value):
        user = getattr(self.request, "user", None)
        return queryset.filter(applicant=user) if value and user else queryset

    def filter_awaiting_me(self, queryset, name, value):
        user = getattr(self.request, "user", None)
        if not value or user is None:
            return queryset
        return awaiting_filter(queryset, user)


def _valid_fields(serializer, data) -> dict:
    """The fields of a refused body that are right on their own (a dry run runs the policy on them)."""
    out = {}
    for name, field in serializer.fields.items():
        if field.read_only or name in serializer.errors or name == "submit":
            continue
        try:
            out[field.source] = field.run_validation(field.get_value(data))
        except (serializers.ValidationError, SkipField):
            continue
    return out


class DecisionBodySerializer(serializers.Serializer):
    comment = serializers.CharField(required=False, allow_blank=True, default="", max_length=2000)


def _comment(request) -> str:
    body = DecisionBodySerializer(data=request.data if isinstance(request.data, dict) else {"comment": None})
    body.is_valid(raise_exception=True)
    return body.validated_data["comment"]


class ApplicationViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, ActionViewSet):
    """list, retrieve, create (submit by default), update a draft, and the workflow's actions."""

    http_method_names = ["get", "post", "patch", "head", "options"]

    @property
    def model(self):
        return self.queryset.model

    @property
    def kind(self) -> str:
        return self.model.kind

    def get_action_perms(self):
        view, change = self.model.perm("view"), self.model.perm("change")
        # approve/reject: readers reach the action, which decides (403 with the reason when it refuses).
        return {"submit": change, "withdraw": change, "approve": view, "reject": view,
                "dry_run": self.model.perm("add"), "rules": view}

    @property
    def action_perms(self):
        return self.get_action_perms()

    def _split(self, data: dict) -> tuple[dict, bool]:
        data = dict(data)
        return data, data.pop("submit", True)

    def create_via_action(self, data):
        fields, submit = self._split(data)
        return workflow.create(actor=self.request.user, application=self.model(**fields), submit=submit)

    def update_via_action(self, instance, data):
        fields, submit = self._split(data)
        obj = workflow.update(actor=self.request.user, application=instance, changes=fields,
                              allowed=self.model.fields_asked)
        if "submit" in self.request.data and submit:
            obj = workflow.submit(actor=self.request.user, application=obj)
        return obj

    def _respond(self, obj):
        return Response(self.get_serializer(obj).data)

    @extend_schema(request=None)
    @action(detail=True, methods=["post"])
    def submit(self, request, pk=None):
        """draft → pending; the policy runs first and a failure is a 400 with field errors in words."""
        return self._respond(workflow.submit(actor=request.user, application=self.get_object()))

    @extend_schema(request=None)
    @action(detail=True, methods=["post"])
    def withdraw(self, request, pk=None):
        """The applicant withdraws a draft or a pending application."""
        return self._respond(workflow.withdraw(actor=request.user, application=self.get_object()))

    @extend_schema(request=DecisionBodySerializer)
    @action(detail=True, methods=["post"])
    def approve(self, request, pk=None):
        """Fill one approval slot (403 for the applicant and for anyone who may not fill an open slot)."""
        comment = _comment(request)
        return self._respond(workflow.approve(actor=request.user, application=self.get_object(), comment=comment))

    @extend_schema(request=DecisionBodySerializer)
    @action(detail=True, methods=["post"])
    def reject(self, request, pk=None):
        """Reject with a comment (required)."""
        comment = _comment(request)
        return self._respond(workflow.reject(actor=request.user, application=self.get_object(), comment=comment))

    @extend_schema(responses=inline_serializer("DryRun", {
        "passed": serializers.BooleanField(), "field_errors": serializers.DictField(),
        "checks": serializers.ListField(child=serializers.DictField()),
        "required_approvals": serializers.ListField(child=serializers.DictField())}))
    @action(detail=False, methods=["post"], url_path="dry-run")
    def dry_run(self, request):
        """Would this application pass, and why not? Takes the body of a create; changes nothing."""
        if not isinstance(request.data, dict):
            raise exceptions.ValidationError({"non_field_errors": ["Send the application as a JSON object."]})
        serializer = self.get_serializer(data=request.data)
        if not serializer.is_valid():  # the policy on the fields that are right, beside the field errors
            concrete = {f.name for f in self.model._meta.concrete_fields}
            fields = {k: v for k, v in _valid_fields(serializer, request.data).items() if k in concrete}
            application = self.model(applicant=request.user, **fields)
            report = policy.evaluate(application, applicant=request.user,
                                     unknown=(set(self.model.fields_asked) - set(fields)) | {"__all__"})
            errors = dict(serializer.errors)
            for field, messages in report.errors().items():
                errors.setdefault("non_field_errors" if field == "__all__" else field, messages)
            body = report.as_dict()
            return Response({"passed": False, "field_errors": errors, "checks": body["checks"],
                             "required_approvals": body["required_approvals"]})
        fields, _ = self._split(serializer.validated_data)
        application = self.model(applicant=request.user, **fields)
        try:
            application.prepare()
            application.full_clean()
        except ValidationError as exc:
            return Response({"passed": False, "field_errors": _field_errors(exc), "checks": [],
                             "required_approvals": []})
        report = policy.evaluate(application, applicant=request.user)
        errors = {("non_field_errors" if k == "__all__" else k): v for k, v in report.errors().items()}
        body = report.as_dict()
        return Response({"passed": report.passed, "field_errors": errors, "checks": body["checks"],
                         "required_approvals": body["required_approvals"]}, status=status.HTTP_200_OK)

    @extend_schema(responses=inline_serializer("PolicyRule", {
        "rule": serializers.CharField(), "title": serializers.CharField(),
        "explanation": serializers.CharField()}, many=True))
    @action(detail=False, methods=["get"], pagination_class=None, filter_backends=[])
    def rules(self, request):
        """The policy rules this kind of application goes through, in words."""
        return Response(policy.describe(self.rules_key(request)))

    def rules_key(self, request) -> str:
        return self.kind


class QueueItemSerializer(serializers.Serializer):
    kind = serializers.CharField()
    kind_label = serializers.CharField()
    id = serializers.IntegerField(source="pk")
    number = serializers.IntegerField()
    reference = serializers.CharField()
    title = serializers.CharField()
    applicant = serializers.CharField(source="applicant.username")
    state = serializers.CharField()
    submitted_at = serializers.DateTimeField()
    your_approval_slots = serializers.SerializerMethodField()
    url = serializers.SerializerMethodField()

    def get_your_approval_slots(self, obj) -> list[str]:
        return your_slots(self, self.context["request"].user, obj)

    def get_url(self, obj) -> str:
        return reverse(f"{obj.kind}-application-detail", args=[obj.pk], request=self.context["request"])


class ApprovalQueueView(views.APIView):
    """Applications of every kind waiting for the caller's approval, oldest first."""

    pagination_class = api_settings.DEFAULT_PAGINATION_CLASS

    @extend_schema(responses=QueueItemSerializer(many=True))
    def get(self, request):
        paginator = self.pagination_class()
        page = load(paginator.paginate_queryset(awaiting_keys(request.user), request, view=self))
        return paginator.get_paginated_response(
            QueueItemSerializer(page, many=True, context={"request": request}).data)


class ApplicationRefSerializer(serializers.Serializer):
    kind = serializers.CharField()
    kind_label = serializers.CharField()
    id = serializers.IntegerField(source="pk")
    number = serializers.IntegerField()
    reference = serializers.CharField()
    title = serializers.CharField()
    state = serializers.CharField()
    url = serializers.SerializerMethodField()

    def get_url(self, obj) -> str:
        return reverse(f"{obj.kind}-application-detail", args=[obj.pk], request=self.context["request"])


class ApplicationLookupView(views.APIView):
    """The application a number names, whatever its kind: `T-12`, or the bare number `12` (signed-in callers; the
    application's own read permission decides, 403 otherwise; 404 when no application has that number)."""

    @extend_schema(responses=ApplicationRefSerializer)
    def get(self, request, ref):
        application = find(ref)
        if application is None:
            raise exceptions.NotFound(f"No application {ref}: give a number like T-12 or 12.")
        if not request.user.has_perm(application.perm("view")):
            raise exceptions.PermissionDenied("Your role does not allow reading this application.")
        return Response(ApplicationRefSerializer(application, context={"request": request}).data)
