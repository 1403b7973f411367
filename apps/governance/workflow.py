"""The life of an application (topic, binding or producer grant), shared by every kind.

    draft ──submit──> pending ──approve (all slots)──> approved ──> provisioning ──> active
      │                 │  └──reject──> rejected                       └──> failed ──(re-drive)──> active
      └──withdraw──>  withdrawn <──withdraw──┘

Approval is by *slots*: the owning team's approver always, and an SRE besides for a production
cluster (policy decides which slots an application needs). One person fills at most one slot, and
nobody decides their own application.
"""

from __future__ import annotations

from functools import cached_property

from django.apps import apps as django_apps
from django.conf import settings
from django.db import models
from django.urls import reverse

from apps.accounts.roles import ADMIN, has_role
from control_plane.choices import text_choices
from control_plane.errors import ActionError

State = text_choices("State", "draft", ("pending", "Pending approval"), "approved", "rejected", "withdrawn",
                     "provisioning", "active", ("failed", "Provisioning failed"))


TRANSITIONS: dict[str, set[str]] = {
    State.DRAFT: {State.PENDING, State.WITHDRAWN},
    State.PENDING: {State.APPROVED, State.REJECTED, State.WITHDRAWN},
    State.APPROVED: {State.PROVISIONING, State.ACTIVE, State.FAILED},
    State.PROVISIONING: {State.ACTIVE, State.FAILED},
    State.FAILED: {State.PROVISIONING, State.ACTIVE},
    State.REJECTED: set(),
    State.WITHDRAWN: set(),
    State.ACTIVE: set(),
}
# States in which the approved object exists (and is, or is being, provisioned).
MATERIALIZED = {State.APPROVED, State.PROVISIONING, State.ACTIVE, State.FAILED}
# States that still claim a name or a quota.
LIVE = {State.PENDING, *MATERIALIZED}


Slot = text_choices("Slot", ("owner", "Owning team's approver"), ("sre", "SRE (production cluster)"))
SLOT_AS = {Slot.OWNER: "the owning team's approver", Slot.SRE: "an SRE"}  # "approved as …"
Verdict = text_choices("Verdict", ("approve", "Approved"), ("reject", "Rejected"))


SRE_APPROVAL_PERM = "topics.approve_production"  # declared on TopicApplication; covers every kind

# Every application of every kind draws its number from this one sequence (each kind's migration creates it if
# missing), so a number names one application: T-3 and B-3 cannot both exist.
NUMBER_SEQUENCE = "governance_application_number"
CREATE_NUMBER_SEQUENCE = f"CREATE SEQUENCE IF NOT EXISTS {NUMBER_SEQUENCE}"


class NextApplicationNumber(models.Func):
    """The database default of `number`: the sequence's next value."""

    template = f"nextval('{NUMBER_SEQUENCE}')"
    output_field = models.BigIntegerField()

    def __init__(self):
        super().__init__()


REFERENCE_RE = r"(?P<prefix>[A-Z])-(?P<number>[0-9]{1,18})"


class ApplicationBase(models.Model):
    """Fields and rules common to every application kind; each kind adds what it asks for."""

    kind: str = ""  # "topic" | "binding" | "grant" | "lifecycle"
    prefix: str = ""  # shown before the number: T-12, B-13, G-14 (lifecycle kinds by operation)
    approve_perm: str = ""  # the model permission of the owning team's approver
    team_lookup: str = "team_id"  # the approving team's id as a lookup from the application (the queue filters on it)
    list_related: tuple[str, ...] = ("applicant",)  # what a list of applications joins (select_related)
    fields_asked: tuple[str, ...] = ()  # what an applicant sets (forms, REST bodies, draft edits)
    materializer: str = ""  # dotted path of the kind's action turning the approved application into its object
    url_name: str = ""  # its pages' URL names: "<url_name>-detail", -create, -edit, -verb (governance.routes)

    number = models.BigIntegerField(unique=True, editable=False, db_default=NextApplicationNumber(),
                                    help_text="One numbering across every kind of application.")
    state = models.CharField(max_length=16, choices=State.choices, default=State.DRAFT, db_index=True)
    applicant = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    description = models.TextField(blank=True)
    reason = models.TextField(help_text="Why this is needed; the approver reads it.")
    policy_report = models.JSONField(default=dict, blank=True, editable=False)
    required_slots = models.JSONField(default=list, blank=True, editable=False)
    submitted_at = models.DateTimeField(null=True, blank=True)
    decided_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        abstract = True
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.reference} {self.summary()}" if self.pk else self.summary()

    @classmethod
    def perm(cls, action: str) -> str:
        """The model permission for add | change | view of this kind."""
        return f"{cls._meta.app_label}.{action}_{cls._meta.model_name}"

    def prepare(self) -> None:
        """Fill what the application derives from what it asks for, before it is validated and saved."""

    def applying_teams(self) -> tuple[list, str]:
        """The teams whose members may apply (any one of them), and the form field an error names."""
        return [self.team], "team"

    # Each kind says what it asks for, which team approves it and where it lands.
    def summary(self) -> str:  # pragma: no cover - kinds implement
        raise NotImplementedError

    def approving_team(self):  # pragma: no cover - kinds implement
        raise NotImplementedError

    def target_cluster(self):  # pragma: no cover - kinds implement
        raise NotImplementedError

    def provisioned_object(self):  # pragma: no cover - kinds implement
        raise NotImplementedError

    def get_absolute_url(self):
        return reverse(f"{self.url_name}-detail", args=[self.pk])

    @property
    def title(self) -> str:
        return str(self)

    @property
    def reference(self) -> str:
        """The number as people quote it: the kind's letter, a dash, the number (T-12)."""
        return f"{self.prefix}-{self.number}" if self.pk else "(unsaved)"

    @property
    def kind_label(self) -> str:
        return f"new {self.kind}"

    @property
    def is_open(self) -> bool:
        return self.state in (State.DRAFT, State.PENDING)


class DecisionBase(models.Model):
    """One approver's word on an application: which slot, approve or reject, and why."""

    actor = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    slot = models.CharField(max_length=16, choices=Slot.choices)
    verdict = models.CharField(max_length=16, choices=Verdict.choices)
    comment = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        abstract = True
        ordering = ["created_at"]


def application_models() -> list[type[ApplicationBase]]:
    """Every application kind installed (each a model on ApplicationBase), in a fixed order."""
    found = [m for m in django_apps.get_models() if issubclass(m, ApplicationBase)]
    return sorted(found, key=lambda m: m.kind)


def application_model(kind: str) -> type[ApplicationBase]:
    for model in application_models():
        if model.kind == kind:
            return model
    raise LookupError(f"no application kind {kind!r}")


def transition(application: ApplicationBase, to_state: str) -> None:
    if to_state not in TRANSITIONS[application.state]:
        raise ActionError(f"This application is {application.get_state_display().lower()}; "
                          f"it cannot become {State(to_state).label.lower()}.")
    application.state = to_state


def approved_slots(application) -> set[str]:
    return {d.slot for d in application.decisions.all() if d.verdict == Verdict.APPROVE}


def open_slots(application) -> list[str]:
    done = approved_slots(application)
    return [s for s in application.required_slots if s not in done]


class Membership:
    """The admin role and the teams that decide whose owner slot `user` may fill, each read once when first
    needed: a queue or a list asks for every row (user.has_perm caches permissions the same way)."""

    def __init__(self, user):
        self.user = user

    @cached_property
    def admin(self) -> bool:
        return has_role(self.user, ADMIN)

    @cached_property
    def team_ids(self) -> frozenset[int]:
        return frozenset(self.user.teams.values_list("pk", flat=True))

    def covers(self, team) -> bool:
        return self.admin or team.pk in self.team_ids


def can_fill(user, application, slot: str, membership: Membership | None = None) -> bool:
    """May `user` fill `slot` of `application` (ignoring whether they applied themselves)? Pass the same
    `membership` for every row of a list."""
    if user is None or not user.is_authenticated:
        return False
    if slot == Slot.OWNER:
        if not user.has_perm(application.approve_perm):
            return False
        return (membership or Membership(user)).covers(application.approving_team())
    if slot == Slot.SRE:
        return user.has_perm(SRE_APPROVAL_PERM)
    return False


def _decided_by(user, application) -> bool:
    # .all() reads prefetched decisions (the queue and the lists prefetch them) instead of a query per row
    return any(d.actor_id == user.pk for d in application.decisions.all())


def decidable_slots(user, application, membership: Membership | None = None) -> list[str]:
    """The open slots `user` could fill now; empty for the applicant and for someone who already decided."""
    if application.state != State.PENDING or user is None or user.pk == application.applicant_id:
        return []
    if _decided_by(user, application):
        return []
    membership = membership or Membership(user)
    return [s for s in open_slots(application) if can_fill(user, application, s, membership)]


def slot_summary(application) -> list[dict]:
    """Each required slot with who filled it (for pages and the API)."""
    by_slot = {d.slot: d for d in application.decisions.all()}
    out = []
    for slot in application.required_slots:
        d = by_slot.get(slot)
        out.append({
            "slot": slot,
            "label": Slot(slot).label,
            "verdict": d.verdict if d else None,
            "by": d.actor.username if d else None,
            "comment": d.comment if d else "",
            "at": d.created_at.isoformat() if d else None,
        })
    return out


def why_not_approver(user, application) -> str:
    """In words: why `user` cannot approve now (empty when they can)."""
    if application.state != State.PENDING:
        return f"The application is {application.get_state_display().lower()}, not pending."
    if user.pk == application.applicant_id:
        return "Nobody approves their own application."
    if _decided_by(user, application):
        return "You have already decided on this application; another person fills the other slot."
    if not open_slots(application):
        return "Every approval slot is already filled."
    taken = [d for d in application.decisions.all() if can_fill(user, application, d.slot)]
    if taken:  # the slot this person could fill went to someone else first
        return (f"{taken[0].actor.username} has already approved as {SLOT_AS[taken[0].slot]}; this "
                f"application is waiting for {waiting_for(application)}.")
    return f"This application is waiting for {waiting_for(application)}."


def waiting_for(application) -> str:
    """Who the pending application still needs, in words: "an approver of team payments and an SRE"."""
    needs = [f"an approver of team {application.approving_team().name}" if slot == Slot.OWNER else "an SRE"
             for slot in open_slots(application)]
    return " and ".join(needs) or "nobody (every approval slot is filled)"
