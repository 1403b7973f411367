"""Applications that change what exists: change or retire a topic, change or remove a binding, revoke a producer
grant, deactivate or reactivate an app. One model for all of them (the target and operation are data), on the
same workflow as the applications that create things (apps/governance/workflow.py)."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db import models

from apps.accounts.models import Team
from apps.bindings.models import Binding, ProducerGrant
from apps.governance.workflow import ApplicationBase, DecisionBase
from apps.lifecycle import targets
from apps.lifecycle.choices import NOUNS, OPERATIONS, PREFIXES, Operation, Target
from apps.topics.models import App, Topic

# The field naming each target (what the application acts on).
TARGET_FIELDS = {Target.TOPIC: "topic", Target.BINDING: "binding", Target.GRANT: "grant", Target.APP: "app"}


class LifecycleApplication(ApplicationBase):
    """A request to change, retire, remove, revoke, deactivate or reactivate something that exists."""

    kind = "lifecycle"
    approve_perm = "lifecycle.approve_lifecycleapplication"
    list_related = ("team", "topic__cluster", "binding", "grant__app", "app", "applicant")
    fields_asked = ("operation", "topic", "binding", "grant", "app", "changes", "reason")
    materializer = "apps.lifecycle.actions.materialize"
    url_name = "lifecycle:application"

    operation = models.CharField(max_length=16, choices=Operation.choices)
    target_kind = models.CharField(max_length=16, choices=Target.choices, editable=False)
    topic = models.ForeignKey(Topic, null=True, blank=True, on_delete=models.PROTECT,
                              related_name="lifecycle_applications")
    binding = models.ForeignKey(Binding, null=True, blank=True, on_delete=models.PROTECT,
                                related_name="lifecycle_applications")
    grant = models.ForeignKey(ProducerGrant, null=True, blank=True, on_delete=models.PROTECT,
                              related_name="lifecycle_applications", verbose_name="producer grant")
    app = models.ForeignKey(App, null=True, blank=True, on_delete=models.PROTECT, related_name="lifecycle_applications")
    team = models.ForeignKey(Team, null=True, blank=True, on_delete=models.PROTECT, related_name="+", editable=False,
                             help_text="The team whose approver decides: the topic's owner, or the app's team.")
    changes = models.JSONField(default=dict, blank=True, help_text="A change: {field: new value}.")
    before = models.JSONField(default=dict, blank=True, editable=False,
                              help_text="The changed fields' values when the application was made or submitted.")
    base_revision = models.PositiveIntegerField(null=True, blank=True, editable=False,
                                                help_text="The target's revision the change was made against.")
    applied_revision = models.PositiveIntegerField(null=True, blank=True, editable=False,
                                                   help_text="The target's revision once approved and applied.")

    class Meta(ApplicationBase.Meta):
        permissions = [("approve_lifecycleapplication",
                        "Approve or reject changes, retirements and removals of one's team's objects")]
        indexes = [models.Index(fields=["target_kind", "state"])]

    # --- what it acts on --------------------------------------------------------------------------

    @property
    def prefix(self) -> str:
        return PREFIXES.get(self.operation, "L")

    @property
    def policy_key(self) -> str:
        return f"{self.target_kind}-{self.operation}"

    @property
    def kind_label(self) -> str:
        return NOUNS.get((self.target_kind, self.operation), f"{self.target_kind} {self.operation}")

    @property
    def target(self):
        field = TARGET_FIELDS.get(self.target_kind)
        return getattr(self, field) if field else None

    def target_name(self) -> str:
        target = self.target
        if target is None:
            return "?"
        if self.target_kind == Target.BINDING:
            return f"{target.topic.name} → {target.group}"
        if self.target_kind == Target.GRANT:
            return f"{target.app.app_id} → {target.topic.name}"
        return str(target)

    def summary(self) -> str:
        return f"{self.kind_label} {self.target_name()}"

    def sync_units(self) -> list[tuple[str, int]]:
        """The node the application changes (the sync records shown with it)."""
        target = self.target
        return [(self.target_kind, target.pk)] if target is not None else []

    @property
    def diff(self) -> list[dict]:
        if self.operation != Operation.CHANGE or self.target is None:
            return []
        return targets.diff_rows(type(self.target), self.before, self.changes)

    def diff_text(self) -> str:
        """One line for lists and the inbox: retention_hours 48 → 96; message_types +refunded."""
        parts = []
        for row in self.diff:
            if "added" in row:
                parts.append(f"{row['field']} " + " ".join([*(f"+{v}" for v in row["added"]),
                                                            *(f"−{v}" for v in row["removed"])]))
            else:
                parts.append(f"{row['field']} {row['before_text']} → {row['after_text']}")
        return "; ".join(parts)

    # --- the workflow's hooks -----------------------------------------------------------------------

    def _infer_target_kind(self) -> str:
        if self.operation in (Operation.DEACTIVATE, Operation.ACTIVATE):
            return Target.APP
        if self.operation == Operation.REVOKE:
            return Target.GRANT
        if self.operation == Operation.REMOVE or (self.operation == Operation.CHANGE and self.binding_id):
            return Target.BINDING
        return Target.TOPIC

    def prepare(self) -> None:
        """Derive the target kind, the topic and app it concerns, the approving team, and the values a change
        replaces (refreshed each time a draft is saved or submitted)."""
        self.target_kind = self._infer_target_kind()
        self._named = {kind for kind, field in TARGET_FIELDS.items() if getattr(self, f"{field}_id")}
        target = self.target
        if target is None:
            return
        if self.target_kind in (Target.BINDING, Target.GRANT):
            self.topic, self.app = target.topic, target.app
        self.team = target.team if self.target_kind in (Target.TOPIC, Target.APP) else target.topic.team
        self.base_revision = target.revision
        if self.operation == Operation.CHANGE and isinstance(self.changes, dict):
            known = [f for f in self.changes if f in targets.CHANGEABLE[self.target_kind]]
            self.before = targets.current(target, known)
        else:
            self.changes, self.before = {}, {}

    def clean(self):
        super().clean()
        if self.operation not in OPERATIONS.get(self.target_kind, ()):
            raise ValidationError({"operation": f"A {self.target_kind} cannot be {self.operation}d."})
        field = TARGET_FIELDS[self.target_kind]
        named = getattr(self, "_named", set())
        if self.target is None and named:
            other = sorted(named)[0]
            ops = ", ".join(str(op) for op in OPERATIONS[other])
            raise ValidationError({"operation": f"A {other} cannot be {self.operation}d; a {other} can: {ops}."})
        if self.target is None:
            raise ValidationError({field: f"Name the {Target(self.target_kind).label.lower()} to "
                                          f"{Operation(self.operation).label.lower()}."})
        if self.operation == Operation.CHANGE:
            self.changes = targets.normalize(self.target_kind, self.target, self.changes)
            self.before = {f: v for f, v in self.before.items() if f in self.changes}
            if not self.changes:
                raise ValidationError({"changes": "Nothing would change: every value given is the current one. "
                                                  "Change at least one value."})

    def applying_teams(self):
        """Who may apply: the owning team for a topic, the app's team for an app; for a binding or grant, the
        app's team or the topic's owners (a removal or revocation may come from either side; a binding change
        from the consumer's team, as the binding did)."""
        if self.target_kind == Target.TOPIC:
            return [self.topic.team], "topic"
        if self.target_kind == Target.APP:
            return [self.app.team], "app"
        field = TARGET_FIELDS[self.target_kind]
        if self.operation == Operation.CHANGE:
            return [self.app.team], field
        return [self.app.team, self.topic.team], field

    def approving_team(self):
        return self.team

    def target_cluster(self):
        return self.topic.cluster if self.topic_id else None

    def provisioned_object(self):
        return self.target


class LifecycleDecision(DecisionBase):
    application = models.ForeignKey(LifecycleApplication, on_delete=models.CASCADE, related_name="decisions")
