"""The workflow's writes, shared by every application kind: submit, withdraw, approve, reject, and the
state changes provisioning reports. Each is atomic, checks who acts, and leaves one audit record.

Kind-specific actions (apps/topics/actions.py, apps/bindings/actions.py) call these with the hook
that turns an approved application into its object.
"""

from __future__ import annotations

from django.core.exceptions import PermissionDenied, ValidationError
from django.utils import timezone
from django.utils.module_loading import import_string

from apps.accounts.roles import ADMIN, has_role
from apps.audit.recorder import audited, record
from apps.audit.snapshot import snapshot
from apps.governance import policy
from apps.governance.workflow import (
    MATERIALIZED,
    State,
    Verdict,
    can_fill,
    decidable_slots,
    open_slots,
    transition,
    why_not_approver,
)
from control_plane import actors
from control_plane.errors import ActionError, require_actor, require_perm


def _lock(application):
    return type(application).objects.select_for_update().get(pk=application.pk)


def _audit(actor, application, verb: str, before: dict | None, extra: dict | None = None) -> None:
    after = snapshot(application)
    if extra:
        after = {**after, **extra}
    record(actor=actor, action=f"{application.kind}_application.{verb}", obj=application, before=before, after=after)


def _require_applicant(actor, application, doing: str) -> None:
    if actor is None or actor.pk != application.applicant_id:
        raise PermissionDenied(f"Only the applicant ({application.applicant.username}) may {doing} this application.")


def check_fields(fields: dict, allowed) -> None:
    unknown = set(fields) - set(allowed)
    if unknown:
        raise TypeError(f"unknown fields: {sorted(unknown)}")


def require_member(actor, team, field: str = "team") -> None:
    """Applicants act for their own team (admins for any); a field error otherwise."""
    require_actor(actor)
    teams = team if isinstance(team, list | tuple) else [team]
    if has_role(actor, ADMIN) or any(t.members.filter(pk=actor.pk).exists() for t in teams):
        return
    names = " or ".join(t.name for t in teams)
    raise ValidationError({field: f"You are not a member of team {names}."})


def check_policy(application, applicant=None) -> policy.Report:
    """Run the policy; refuse with field errors in words when it does not pass."""
    report = policy.evaluate(application, applicant=applicant)
    if not report.passed:
        raise ValidationError(report.errors())
    return report


def _send(actor, application) -> None:
    """Run the policy and make the application pending (its caller saves it)."""
    report = check_policy(application, actor)
    application.policy_report = report.as_dict()
    application.required_slots = list(report.required_approvals)
    application.submitted_at = timezone.now()


def _check_and_save(actor, application) -> None:
    application.prepare()
    application.full_clean()
    require_member(actor, *application.applying_teams())
    if application.state == State.PENDING:
        _send(actor, application)
    application.save()


@audited
def create(*, actor, application, submit: bool = True):
    """A new application of any kind, built by its kind's action (unsaved): a draft, or (submit) straight to
    pending once the policy passes."""
    require_perm(actor, application.perm("add"))
    application.applicant = actor
    application.state = State.PENDING if submit else State.DRAFT
    _check_and_save(actor, application)
    record(actor=actor, action=f"{application.kind}_application.create", obj=application, after=snapshot(application))
    return application


@audited
def update(*, actor, application, changes: dict, allowed):
    """Edit a draft (only the applicant; a submitted application is withdrawn and applied for anew)."""
    require_perm(actor, application.perm("change"))
    check_fields(changes, allowed)
    application = _lock(application)
    if actor is None or actor.pk != application.applicant_id:
        raise PermissionDenied("Only the applicant may edit this application.")
    if application.state != State.DRAFT:
        raise ActionError("Only a draft can be edited; withdraw this application and apply again.")
    before = snapshot(application)
    for key, value in changes.items():
        setattr(application, key, value)
    _check_and_save(actor, application)
    record(actor=actor, action=f"{application.kind}_application.update", obj=application, before=before,
           after=snapshot(application))
    return application


@audited
def submit(*, actor, application):
    """draft → pending, once the policy passes."""
    require_perm(actor, application.perm("change"))
    application = _lock(application)
    _require_applicant(actor, application, "submit")
    before = snapshot(application)
    transition(application, State.PENDING)
    application.prepare()
    _send(actor, application)
    application.save()
    _audit(actor, application, "submit", before)
    return application


@audited
def withdraw(*, actor, application):
    require_perm(actor, application.perm("change"))
    application = _lock(application)
    _require_applicant(actor, application, "withdraw")
    before = snapshot(application)
    transition(application, State.WITHDRAWN)
    application.decided_at = timezone.now()
    application.save()
    _audit(actor, application, "withdraw", before)
    return application


@audited
def approve(*, actor, application, comment: str = ""):
    """Fill one approval slot; the last one approves the application and materializes it (the kind's
    `materializer` action)."""
    application = _lock(application)
    if actor is not None and actor.pk == application.applicant_id:
        raise PermissionDenied("Nobody approves their own application.")
    if application.state != State.PENDING:
        raise ActionError(f"This application is {application.get_state_display().lower()}, not pending.")
    slots = decidable_slots(actor, application)
    if not slots:
        raise PermissionDenied(why_not_approver(actor, application))
    before = snapshot(application)
    slot = slots[0]
    application.decisions.create(actor=actor, slot=slot, verdict=Verdict.APPROVE, comment=comment.strip())
    if not open_slots(application):
        report = policy.evaluate(application)
        if not report.passed:
            reasons = " ".join(c.message for c in report.failures)
            raise ActionError(f"The policy no longer passes, so this cannot be approved: {reasons} "
                              "Reject it with a comment instead.")
        application.policy_report = report.as_dict()
        transition(application, State.APPROVED)
        application.decided_at = timezone.now()
        import_string(application.materializer)(actor, application)
    application.save()
    _audit(actor, application, "approve", before, {"slot": slot, "comment": comment.strip()})
    return application


def save_created(actor, application, obj) -> None:
    """What every kind's materializer ends with: the object the approved application made is validated, saved,
    linked to the application (in the field named after the kind) and audited as `<kind>.create`."""
    obj.full_clean()
    obj.save()
    setattr(application, application.kind, obj)
    application.save(update_fields=[application.kind])
    record(actor=actor, action=f"{application.kind}.create", obj=obj, after=snapshot(obj))


@audited
def reject(*, actor, application, comment: str):
    application = _lock(application)
    if actor is not None and actor.pk == application.applicant_id:
        raise PermissionDenied("Nobody decides their own application.")
    if not (comment or "").strip():
        raise ValidationError({"comment": "Say why you reject it; the applicant reads this."})
    if application.state != State.PENDING:
        raise ActionError(f"This application is {application.get_state_display().lower()}, not pending.")
    slots = [s for s in application.required_slots if can_fill(actor, application, s)]
    if not slots or application.decisions.filter(actor=actor).exists():
        raise PermissionDenied(why_not_approver(actor, application))
    before = snapshot(application)
    application.decisions.create(actor=actor, slot=slots[0], verdict=Verdict.REJECT, comment=comment.strip())
    transition(application, State.REJECTED)
    application.decided_at = timezone.now()
    application.save()
    _audit(actor, application, "reject", before, {"slot": slots[0], "comment": comment.strip()})
    return application


# --- what provisioning reports (the system actor of provisioning) -------------------------------------


@audited
def mark_provisioning(application):
    application = _lock(application)
    if application.state not in (State.APPROVED, State.FAILED):
        return application
    before = snapshot(application)
    transition(application, State.PROVISIONING)
    application.save()
    _audit(actors.PROVISIONING, application, "provisioning", before)
    return application


@audited
def mark_active(application):
    application = _lock(application)
    if application.state not in MATERIALIZED or application.state == State.ACTIVE:
        return application
    before = snapshot(application)
    transition(application, State.ACTIVE)
    application.save()
    _audit(actors.PROVISIONING, application, "active", before)
    return application


@audited
def mark_failed(application, error: str):
    application = _lock(application)
    if application.state not in (State.APPROVED, State.PROVISIONING):
        return application
    before = snapshot(application)
    transition(application, State.FAILED)
    application.save()
    _audit(actors.PROVISIONING, application, "failed", before, {"error": error[:500]})
    return application
