"""Writes to binding and producer-grant applications, bindings and grants: atomic, checked, audited.

The workflow itself (submit, withdraw, approve, reject) is shared: apps/governance/actions.py.
"""

from __future__ import annotations

from apps.bindings.models import Binding, BindingApplication, GrantApplication, ProducerGrant
from apps.governance import actions as workflow
from apps.provisioning import actions as provisioning

BINDING_FIELDS = BindingApplication.fields_asked
GRANT_FIELDS = GrantApplication.fields_asked


# The workflow is shared (apps/governance/actions.py); these name the kind for callers that know it.


def create_binding_application(*, actor, submit: bool = True, **fields) -> BindingApplication:
    workflow.check_fields(fields, BINDING_FIELDS)
    return workflow.create(actor=actor, application=BindingApplication(**fields), submit=submit)


def update_binding_application(*, actor, application, **changes) -> BindingApplication:
    return workflow.update(actor=actor, application=application, changes=changes, allowed=BINDING_FIELDS)


def create_grant_application(*, actor, submit: bool = True, **fields) -> GrantApplication:
    workflow.check_fields(fields, GRANT_FIELDS)
    return workflow.create(actor=actor, application=GrantApplication(**fields), submit=submit)


def update_grant_application(*, actor, application, **changes) -> GrantApplication:
    return workflow.update(actor=actor, application=application, changes=changes, allowed=GRANT_FIELDS)


submit_binding_application = submit_grant_application = workflow.submit
withdraw_binding_application = withdraw_grant_application = workflow.withdraw
approve_binding_application = approve_grant_application = workflow.approve
reject_binding_application = reject_grant_application = workflow.reject


def materialize_binding(actor, application: BindingApplication) -> None:
    binding = Binding(topic=application.topic, app=application.app, group=application.group,
                      selector_kind=application.selector_kind, selector_pattern=application.selector_pattern,
                      mode=application.mode, delivery_limit=application.delivery_limit, ttl_s=application.ttl_s,
                      backoff_initial_ms=application.backoff_initial_ms, backoff_max_ms=application.backoff_max_ms,
                      backoff_multiplier=application.backoff_multiplier, max_in_flight=application.max_in_flight,
                      on_failure=application.on_failure,
                      description=application.description)
    workflow.save_created(actor, application, binding)
    provisioning.schedule_application(application)


def materialize_grant(actor, application: GrantApplication) -> None:
    workflow.save_created(actor, application, ProducerGrant(topic=application.topic, app=application.app))
    provisioning.schedule_application(application)
