"""Writes to binding and producer-grant applications, bindings and grants: atomic, checked, audited.

The workflow itself (submit, withdraw, approve, reject) is shared: apps/governance/actions.py.
"""

from __future__ import annotations

from django.core.exceptions import PermissionDenied
from django.utils import timezone

from apps.audit.recorder import audited, record
from apps.audit.snapshot import snapshot
from apps.bindings.models import Binding, BindingApplication, GrantApplication, ProducerGrant
from apps.governance import actions as workflow
from apps.governance.workflow import State
from apps.provisioning import actions as provisioning
from control_plane.errors import ActionError, require_perm

BINDING_FIELDS = ("topic", "app", "group", "selector_kind", "selector_pattern", "mode", "delivery_limit", "ttl_s",
                  "backoff_initial_ms", "backoff_max_ms", "backoff_multiplier", "max_in_flight", "description",
                  "reason")
GRANT_FIELDS = ("topic", "app", "description", "reason")


def _create(actor, model, fields: dict, submit: bool):
    application = model(applicant=actor, **fields)
    application.full_clean()
    workflow.require_member(actor, application.app.team, "app")
    if submit:
        report = workflow.check_policy(application, actor)
        application.state = State.PENDING
        application.policy_report = report.as_dict()
        application.required_slots = list(report.required_approvals)
        application.submitted_at = timezone.now()
    application.save()
    record(actor=actor, action=f"{model.kind}_application.create", obj=application, after=snapshot(application))
    return application


def _update(actor, application, changes: dict, allowed, perm: str):
    require_perm(actor, perm)
    workflow.check_fields(changes, allowed)
    application = type(application).objects.select_for_update().get(pk=application.pk)
    if actor is None or actor.pk != application.applicant_id:
        raise PermissionDenied("Only the applicant may edit this application.")
    if application.state != State.DRAFT:
        raise ActionError("Only a draft can be edited; withdraw this application and apply again.")
    before = snapshot(application)
    for key, value in changes.items():
        setattr(application, key, value)
    application.full_clean()
    workflow.require_member(actor, application.app.team, "app")
    application.save()
    record(actor=actor, action=f"{application.kind}_application.update", obj=application, before=before,
           after=snapshot(application))
    return application


# --- binding applications -----------------------------------------------------------------


@audited
def create_binding_application(*, actor, submit: bool = True, **fields) -> BindingApplication:
    require_perm(actor, "bindings.add_bindingapplication")
    workflow.check_fields(fields, BINDING_FIELDS)
    return _create(actor, BindingApplication, fields, submit)


@audited
def update_binding_application(*, actor, application, **changes) -> BindingApplication:
    return _update(actor, application, changes, BINDING_FIELDS, "bindings.change_bindingapplication")


def submit_binding_application(*, actor, application):
    require_perm(actor, "bindings.change_bindingapplication")
    return workflow.submit(actor=actor, application=application)


def withdraw_binding_application(*, actor, application):
    require_perm(actor, "bindings.change_bindingapplication")
    return workflow.withdraw(actor=actor, application=application)


def approve_binding_application(*, actor, application, comment: str = ""):
    return workflow.approve(actor=actor, application=application, comment=comment, materialize=_materialize_binding)


def reject_binding_application(*, actor, application, comment: str):
    return workflow.reject(actor=actor, application=application, comment=comment)


def _materialize_binding(actor, application: BindingApplication) -> None:
    binding = Binding(topic=application.topic, app=application.app, group=application.group,
                      selector_kind=application.selector_kind, selector_pattern=application.selector_pattern,
                      mode=application.mode, delivery_limit=application.delivery_limit, ttl_s=application.ttl_s,
                      backoff_initial_ms=application.backoff_initial_ms, backoff_max_ms=application.backoff_max_ms,
                      backoff_multiplier=application.backoff_multiplier, max_in_flight=application.max_in_flight,
                      description=application.description)
    binding.full_clean()
    binding.save()
    application.binding = binding
    application.save(update_fields=["binding"])
    record(actor=actor, action="binding.create", obj=binding, after=snapshot(binding))
    provisioning.schedule_application(application)


# --- producer grant applications ---------------------------------------------------------------


@audited
def create_grant_application(*, actor, submit: bool = True, **fields) -> GrantApplication:
    require_perm(actor, "bindings.add_grantapplication")
    workflow.check_fields(fields, GRANT_FIELDS)
    return _create(actor, GrantApplication, fields, submit)


@audited
def update_grant_application(*, actor, application, **changes) -> GrantApplication:
    return _update(actor, application, changes, GRANT_FIELDS, "bindings.change_grantapplication")


def submit_grant_application(*, actor, application):
    require_perm(actor, "bindings.change_grantapplication")
    return workflow.submit(actor=actor, application=application)


def withdraw_grant_application(*, actor, application):
    require_perm(actor, "bindings.change_grantapplication")
    return workflow.withdraw(actor=actor, application=application)


def approve_grant_application(*, actor, application, comment: str = ""):
    return workflow.approve(actor=actor, application=application, comment=comment, materialize=_materialize_grant)


def reject_grant_application(*, actor, application, comment: str):
    return workflow.reject(actor=actor, application=application, comment=comment)


def _materialize_grant(actor, application: GrantApplication) -> None:
    grant = ProducerGrant(topic=application.topic, app=application.app)
    grant.full_clean()
    grant.save()
    application.grant = grant
    application.save(update_fields=["grant"])
    record(actor=actor, action="grant.create", obj=grant, after=snapshot(grant))
    provisioning.schedule_application(application)
