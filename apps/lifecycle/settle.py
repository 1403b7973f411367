"""A lifecycle application is active once its result is on every cluster: the new revision read back from
ZooKeeper, or, for a removal or revocation, the node gone.

Provisioning calls `settle_waiting` after each push; the approval calls `settle` when it commits (an app used on
no cluster has nothing to wait for).
"""

from __future__ import annotations

from apps.governance import actions as workflow
from apps.governance.workflow import State
from apps.lifecycle.choices import Operation, Target
from apps.lifecycle.models import TARGET_FIELDS, LifecycleApplication
from apps.provisioning.desired import clusters_of_app, holder_ids
from apps.provisioning.models import SyncState

WAITING = (State.APPROVED, State.PROVISIONING, State.FAILED)
REMOVALS = {(Target.BINDING, Operation.REMOVE), (Target.GRANT, Operation.REVOKE)}


def _expected_clusters(application) -> set[int]:
    if application.target_kind == Target.APP:
        return set(clusters_of_app(application.app))
    return set(holder_ids(application.topic))


def landed(application: LifecycleApplication) -> bool:
    """Has every cluster what the approved application asked for?"""
    kind, pk = application.target_kind, application.target.pk
    records = list(SyncState.objects.filter(kind=kind, object_id=pk))
    if (application.target_kind, application.operation) in REMOVALS:
        return not records  # provisioning forgets a node once it deleted it
    wanted = application.applied_revision or 0
    have = {r.cluster_id for r in records if (r.landed_revision or 0) >= wanted}
    return _expected_clusters(application) <= have and all((r.landed_revision or 0) >= wanted for r in records)


def settle(application_id: int) -> None:
    application = LifecycleApplication.objects.filter(pk=application_id, state__in=WAITING).first()
    if application is not None and landed(application):
        workflow.mark_active(application)


def settle_waiting(units) -> None:
    """After a push of `units` ((kind, id)): the applications waiting on one of them that have now landed."""
    ids: dict[str, set[int]] = {}
    for kind, object_id in units:
        ids.setdefault(str(kind), set()).add(int(object_id))
    for kind, object_ids in ids.items():
        field = TARGET_FIELDS.get(kind)
        if field is None:
            continue
        for application in LifecycleApplication.objects.filter(state__in=WAITING, target_kind=kind,
                                                               **{f"{field}_id__in": object_ids}):
            if landed(application):
                workflow.mark_active(application)
