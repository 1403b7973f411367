"""Writes of lifecycle applications and of what they lead to: atomic, audited, with an actor.

The workflow (create, submit, withdraw, approve, reject) is shared: apps/governance/actions.py. Approving the last
slot calls `materialize`, which applies the application to its target (a new revision, or a status), audits it
and schedules the push to every cluster holding the topic. A retired topic's end is in `retire_drained_binding`,
`drop_backlog` and `delete_topic` (the periodic sweep and the SRE call them; apps/lifecycle/retirement.py).
"""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from apps.audit.recorder import audited, record
from apps.bindings.choices import BindingStatus
from apps.bindings.models import Binding, ProducerGrant
from apps.governance import actions as workflow
from apps.lifecycle import settle, targets
from apps.lifecycle.choices import Operation, Target
from apps.lifecycle.models import LifecycleApplication
from apps.provisioning import actions as provisioning
from apps.provisioning.desired import topic_units
from apps.provisioning.models import ObjectKind
from apps.topics import actions as topic_actions
from apps.topics.choices import TopicStatus
from apps.topics.models import App, Topic
from control_plane.errors import ActionError, require_perm

DROP_BACKLOG_PERM = "bindings.drop_backlog"


def create_lifecycle_application(*, actor, submit: bool = True, **fields) -> LifecycleApplication:
    """A new lifecycle application (operation, its target, for a change `changes`, and `reason`)."""
    workflow.check_fields(fields, LifecycleApplication.fields_asked)
    return workflow.create(actor=actor, application=LifecycleApplication(**fields), submit=submit)


def update_lifecycle_application(*, actor, application, **changes) -> LifecycleApplication:
    return workflow.update(actor=actor, application=application, changes=changes,
                           allowed=LifecycleApplication.fields_asked)


# --- applying an approved application (inside the approving transaction) --------------------------


def materialize(actor, application: LifecycleApplication) -> None:
    """Apply the approved application to its target and schedule the push; the application becomes active
    once every cluster holds the result (apps/lifecycle/settle.py)."""
    target = APPLY[(application.target_kind, application.operation)](actor, application)
    application.applied_revision = target.revision
    pk = application.pk
    transaction.on_commit(lambda: settle.settle(pk))


def _locked(model, pk):
    return model.objects.select_for_update(of=("self",)).get(pk=pk)


def _audit(actor, application, action: str, obj, before: dict, after: dict) -> None:
    record(actor=actor, action=action, obj=obj, before=before,
           after={**after, "application": application.reference})


def _change(actor, application, model, kind: str, topic_of):
    target = _locked(model, application.target.pk)
    before = targets.apply(target, application.changes)
    before["revision"] = target.revision
    target.revision += 1
    target.full_clean()
    target.save()
    _audit(actor, application, f"{kind}.change", target, before, {**application.changes, "revision": target.revision})
    provisioning.schedule_on_holders(topic_of(target), [(kind, target.pk)])
    return target


def _change_topic(actor, application):
    return _change(actor, application, Topic, ObjectKind.TOPIC, lambda topic: topic)


def _change_binding(actor, application):
    return _change(actor, application, Binding, ObjectKind.BINDING, lambda binding: binding.topic)


def _retire_topic(actor, application):
    topic = _locked(Topic, application.topic_id)
    before = {"status": topic.status, "revision": topic.revision}
    topic.status, topic.retired_at = TopicStatus.RETIRED, timezone.now()
    topic.revision += 1
    topic.save(update_fields=["status", "retired_at", "revision", "updated_at"])
    _audit(actor, application, "topic.retire", topic, before,
           {"status": topic.status, "revision": topic.revision, "retired_at": topic.retired_at.isoformat(),
            "data_deleted_after": topic.data_deleted_after.isoformat()})
    provisioning.schedule_on_holders(topic, [(ObjectKind.TOPIC, topic.pk)])
    return topic


def _end(actor, obj, kind: str, verb: str, extra: dict | None = None, application=None) -> None:
    """A binding or grant leaves: retired here, its node deleted from every cluster holding the topic (and its
    app's node where nothing else uses the app)."""
    before = {"status": obj.status, "revision": obj.revision}
    obj.status = BindingStatus.RETIRED
    obj.revision += 1
    obj.save(update_fields=["status", "revision", "updated_at"])
    after = {"status": obj.status, "revision": obj.revision, **(extra or {})}
    if application is not None:
        after["application"] = application.reference
    record(actor=actor, action=f"{kind}.{verb}", obj=obj, before=before, after=after)
    provisioning.schedule_on_holders(obj.topic, [(ObjectKind.APP, obj.app_id), (kind, obj.pk)])


def _remove_binding(actor, application):
    binding = _locked(Binding, application.binding_id)
    _end(actor, binding, ObjectKind.BINDING, "remove", application=application)
    return binding


def _revoke_grant(actor, application):
    grant = _locked(ProducerGrant, application.grant_id)
    _end(actor, grant, ObjectKind.GRANT, "revoke", application=application)
    return grant


def _set_app_active(actor, application):
    app = _locked(App, application.app_id)
    active = application.operation == Operation.ACTIVATE
    before = {"active": app.active, "revision": app.revision}
    app.active = active
    app.revision += 1
    app.save(update_fields=["active", "revision", "updated_at"])
    _audit(actor, application, "app.activate" if active else "app.deactivate", app, before,
           {"active": app.active, "revision": app.revision})
    topic_actions.push_app(app)
    return app


APPLY = {
    (Target.TOPIC, Operation.CHANGE): _change_topic,
    (Target.TOPIC, Operation.RETIRE): _retire_topic,
    (Target.BINDING, Operation.CHANGE): _change_binding,
    (Target.BINDING, Operation.REMOVE): _remove_binding,
    (Target.GRANT, Operation.REVOKE): _revoke_grant,
    (Target.APP, Operation.DEACTIVATE): _set_app_active,
    (Target.APP, Operation.ACTIVATE): _set_app_active,
}


# --- the end of a retired topic -------------------------------------------------------------------


def _retired_binding(binding_pk: int) -> Binding:
    binding = _locked(Binding, binding_pk)
    if binding.status != BindingStatus.ACTIVE:
        raise ActionError(f"Binding {binding} is already gone.")
    if binding.topic.status != TopicStatus.RETIRED:
        raise ActionError(f"Topic {binding.topic.name} is not retired: remove the binding through a binding "
                          "removal application instead.")
    return binding


@audited
def retire_drained_binding(*, actor, binding: Binding, figures: dict) -> Binding:
    """The sweep found the binding of a retired topic drained (no backlog, nothing in flight): it goes."""
    binding = _retired_binding(binding.pk)
    _end(actor, binding, ObjectKind.BINDING, "drained", {"figures": figures})
    return binding


@audited
def drop_backlog(*, actor, binding: Binding, backlog: int, confirmed: int) -> Binding:
    """An SRE drops a retired topic's binding with what it still holds. `backlog` is what the brokers hold for
    the group now (read just before); `confirmed` the number the SRE typed: it must cover the backlog."""
    require_perm(actor, DROP_BACKLOG_PERM)
    binding = _retired_binding(binding.pk)
    if confirmed < backlog:
        raise ValidationError({"confirm_backlog": f"The group holds {backlog:,} messages now, more than the "
                                                  f"{confirmed:,} you confirmed; confirm {backlog:,} to drop them."})
    _end(actor, binding, ObjectKind.BINDING, "drop_backlog", {"backlog": backlog, "confirmed": confirmed})
    return binding


@audited
def delete_topic(*, actor, topic: Topic, now=None) -> Topic:
    """A retired topic with no binding left, its retention after retirement passed: its data goes. It becomes
    deleted, its grants go, and its nodes leave every cluster's ZooKeeper (brokers then delete its data)."""
    topic = _locked(Topic, topic.pk)
    now = now or timezone.now()
    if topic.status != TopicStatus.RETIRED:
        raise ActionError(f"Topic {topic.name} is {topic.get_status_display().lower()}, not retired.")
    if Binding.objects.filter(topic=topic, status=BindingStatus.ACTIVE).exists():
        raise ActionError(f"Topic {topic.name} still has bindings draining.")
    if now < topic.data_deleted_after:
        raise ActionError(f"Topic {topic.name} keeps its data until {topic.data_deleted_after:%Y-%m-%d %H:%M} UTC.")
    before = {"status": topic.status, "revision": topic.revision}
    grants = list(ProducerGrant.objects.select_for_update(of=("self",)).filter(topic=topic,
                                                                              status=BindingStatus.ACTIVE))
    for grant in grants:
        grant.status = BindingStatus.RETIRED
        grant.revision += 1
        grant.save(update_fields=["status", "revision", "updated_at"])
    topic.status, topic.deleted_at = TopicStatus.DELETED, now
    topic.revision += 1
    topic.save(update_fields=["status", "deleted_at", "revision", "updated_at"])
    record(actor=actor, action="topic.delete", obj=topic, before=before,
           after={"status": topic.status, "revision": topic.revision, "deleted_at": now.isoformat(),
                  "grants_retired": [g.app.app_id for g in grants]})
    provisioning.schedule_on_holders(topic, topic_units(topic))
    return topic
