"""Writes of the provisioning side: what should land where, what was read back, repairs, the schedule.

Everything that changes ZooKeeper or the platform's view of it passes here and is audited: an
object landing a new revision, a repair, a change of the reconcile schedule.
"""

from __future__ import annotations

import json
import logging

from django.core.exceptions import ValidationError
from django.db import connection, transaction
from django.utils import timezone
from django_celery_beat.models import IntervalSchedule, PeriodicTask
from psycopg2.extras import Json, execute_values

from apps.audit.recorder import audited, record
from apps.clusters.models import Cluster
from apps.provisioning.desired import META, Desired, holder_ids, load, path_of, revision_of, wanted_on
from apps.provisioning.models import ObjectKind, SyncState, SyncStatus
from apps.provisioning.status import Observation
from apps.provisioning.units import units_of
from apps.tracing import actions as tracing_actions
from apps.tracing import schedule as trace_schedule
from control_plane.celery import send_on_commit
from control_plane.errors import require_perm

log = logging.getLogger(__name__)

RECONCILE_TASK_NAME = "Reconcile every cluster with ZooKeeper"
RECONCILE_TASK = "provisioning.reconcile_all"
PROVISION_APPLICATION_TASK = "provisioning.provision_application"
PROVISION_OBJECTS_TASK = "provisioning.provision_objects"
RECONCILE_EVERY_SECONDS = (10, 86400)


def expect(kind: str, obj, cluster) -> SyncState:
    """Note that `cluster` should hold `obj` at its current revision (inside the caller's transaction)."""
    path, revision = path_of(kind, obj), revision_of(kind, obj)
    state, created = SyncState.objects.select_for_update().get_or_create(
        kind=kind, object_id=obj.pk, cluster=cluster,
        defaults={"path": path, "desired_revision": revision, "state": SyncStatus.PENDING})
    if not created and (state.desired_revision != revision or state.path != path):
        state.desired_revision, state.path = revision, path
        if state.landed_revision != revision:
            state.state, state.error, state.attempts = SyncStatus.PENDING, "", 0
        state.save()
    return state


def schedule_application(application) -> None:
    """Expect the application's objects on its cluster and push them once the transaction commits; a topic
    being moved gets them on the other cluster that holds it too."""
    cluster = application.target_cluster()
    units = units_of(application)
    for kind, object_id in units:
        expect(kind, load(kind, object_id), cluster)
    send_on_commit(PROVISION_APPLICATION_TASK, application.kind, application.pk)
    topic = application.topic if application.kind in ("binding", "grant") else None
    if topic is not None and topic.placements.exists():
        others = [c for c in holder_ids(topic) if c != cluster.pk]
        schedule_on_clusters(others, units)


def schedule_objects(cluster, units: list[tuple[str, int]]) -> None:
    send_on_commit(PROVISION_OBJECTS_TASK, cluster.pk, [[k, int(i)] for k, i in units])


def schedule_on_clusters(cluster_ids, units: list[tuple[str, int]]) -> None:
    """Push `units` to each cluster once the transaction commits: written where wanted (expected there at
    their current revision), deleted where no longer wanted (docs/routing.md)."""
    for cluster in Cluster.objects.filter(pk__in=set(cluster_ids)).order_by("pk"):
        for kind, object_id in units:
            obj = load(kind, object_id)
            if wanted_on(kind, obj, cluster.pk):
                expect(kind, obj, cluster)
        schedule_objects(cluster, units)


def schedule_on_holders(topic, units: list[tuple[str, int]], also=()) -> None:
    """Push `units` (objects of `topic`) to every cluster that holds the topic, and to the clusters of `also`
    (ids; where it was held until now, so what it no longer holds is deleted there)."""
    schedule_on_clusters([*holder_ids(topic), *also], units)


def _locked(cluster, keys) -> list[SyncState]:
    """Lock the sync-state rows of `keys` ((kind, object id)) on `cluster`, in id order so two transactions take
    them in the same order, and only these rows: the model's ordering joins the cluster, whose row FOR UPDATE
    would also lock (and every approval on that cluster inserts rows referring to it)."""
    return list(SyncState.objects.select_for_update(of=("self",)).filter(
        cluster=cluster, kind__in={k for k, _ in keys}, object_id__in={i for _, i in keys}).order_by("pk"))


def _differs(record: SyncState | None, desired: Desired, obs: Observation) -> bool:
    if record is None:
        return True
    return (record.state, record.zk_revision, record.zk_version, record.problem, record.diff,
            record.desired_revision, record.path) != (obs.state, obs.zk_revision, obs.zk_version, obs.problem,
                                                      obs.diff, desired.revision, desired.path)


@audited
def record_observations(cluster, observed: list[tuple[Desired, Observation]], *, attempt: bool = False,
                        actor, audit_landing: bool = True, known: dict | None = None) -> int:
    """Store what was read back. An object landing a new revision is audited (unless the caller audits the
    write itself, as a repair does). `known` (records read just before) lets a caller skip what did not
    change without locking it. Returns the number of records changed."""
    if known is not None and not attempt:
        observed = [(d, o) for d, o in observed
                    if d.kind != META and _differs(known.get((d.kind, d.object_id)), d, o)]
    if not observed:
        return 0
    now = timezone.now()
    keys = {(d.kind, d.object_id) for d, _ in observed if d.kind != META}
    records = {(r.kind, r.object_id): r for r in _locked(cluster, keys)}
    changed = []
    for desired, obs in observed:
        if desired.kind == META:
            continue
        r = records.get((desired.kind, desired.object_id))
        if r is None:
            r = SyncState(cluster=cluster, kind=desired.kind, object_id=desired.object_id, path=desired.path,
                          desired_revision=desired.revision)
        landed_now = obs.state == SyncStatus.SYNCED and r.landed_revision != desired.revision
        before = (r.state, r.zk_revision, r.zk_version, r.problem, r.diff, r.error, r.desired_revision)
        r.desired_revision, r.path = desired.revision, desired.path
        r.state, r.zk_revision, r.zk_version, r.problem, r.diff = (obs.state, obs.zk_revision, obs.zk_version,
                                                                   obs.problem, obs.diff)
        if obs.state == SyncStatus.SYNCED:
            r.landed_revision, r.error = desired.revision, ""
            r.synced_at = r.synced_at if not landed_now else now
        if attempt:
            r.attempts += 1
            r.last_attempt_at = now
        r.checked_at = now
        if r.pk is None or attempt or before != (r.state, r.zk_revision, r.zk_version, r.problem, r.diff, r.error,
                                                  r.desired_revision):
            changed.append(r)
        if landed_now and audit_landing:  # appended after the writes below, as the last statements (audited)
            record(actor=actor, action=f"{desired.kind}.provisioned", object_type=_object_type(desired.kind),
                   object_id=desired.object_id, object_repr=f"{cluster.name}:{desired.path}"[:200],
                   after={"cluster": cluster.name, "path": desired.path, "revision": desired.revision,
                          "zk_version": obs.zk_version})
    new = [r for r in changed if r.pk is None]
    old = [r for r in changed if r.pk is not None]
    SyncState.objects.bulk_create(new)
    _bulk_update(old, now)
    return len(changed)


_UPDATED = ["desired_revision", "path", "state", "zk_revision", "zk_version", "problem", "diff", "landed_revision",
            "error", "synced_at", "attempts", "last_attempt_at", "checked_at"]


def _bulk_update(records: list[SyncState], now) -> None:
    """One UPDATE … FROM (VALUES …) per batch: Django's bulk_update builds CASE expressions that cost
    seconds for ten thousand rows."""
    if not records:
        return
    table = SyncState._meta.db_table
    columns = [SyncState._meta.get_field(f).column for f in _UPDATED]
    types = ["integer", "varchar", "varchar", "integer", "integer", "varchar", "jsonb", "integer", "text",
             "timestamptz", "integer", "timestamptz", "timestamptz"]
    assignments = ", ".join(f"{c} = v.{c}::{t}" for c, t in zip(columns, types, strict=True))
    rows = [(r.pk, *[Json(getattr(r, f)) if f == "diff" else getattr(r, f) for f in _UPDATED]) for r in records]
    with connection.cursor() as cursor:
        raw = cursor.cursor  # psycopg2's own cursor, for execute_values
        updated_at = raw.mogrify("%s", [now]).decode()
        sql = (f"UPDATE {table} AS s SET {assignments}, updated_at = {updated_at} "
               f"FROM (VALUES %s) AS v(id, {', '.join(columns)}) WHERE s.id = v.id")
        execute_values(raw, sql, rows, page_size=2000)


def _object_type(kind: str) -> str:
    return {ObjectKind.TOPIC: "topics.topic", ObjectKind.APP: "topics.app", ObjectKind.BINDING: "bindings.binding",
            ObjectKind.GRANT: "bindings.producergrant", ObjectKind.ROUTE: "topics.topic"}.get(kind,
                                                                                          "provisioning.znode")


@transaction.atomic
def record_failure(cluster, units: list[tuple[str, int]], error: str, *, final: bool) -> None:
    """A push did not land: note the error on every object still waiting for its revision."""
    now = timezone.now()
    for r in _locked(cluster, units):
        if (r.kind, r.object_id) not in set(units) or r.landed_revision == r.desired_revision:
            continue
        r.attempts += 1
        r.last_attempt_at = now
        r.error = error[:2000]
        r.state = SyncStatus.FAILED if final else SyncStatus.PENDING
        r.save(update_fields=["attempts", "last_attempt_at", "error", "state", "updated_at"])


@audited
def record_removals(cluster, removed: list[tuple[str, int, str]], *, deleted: set[tuple[str, int]], actor) -> None:
    """Objects a cluster no longer holds: their sync state goes, and each node deleted now is audited."""
    for kind, object_id, path in removed:
        SyncState.objects.filter(cluster=cluster, kind=kind, object_id=object_id).delete()
        if (kind, object_id) in deleted:
            record(actor=actor, action=f"{kind}.deprovisioned", object_type=_object_type(kind), object_id=object_id,
                   object_repr=f"{cluster.name}:{path}"[:200], before={"cluster": cluster.name, "path": path},
                   after=None)


@audited
def record_repair(*, actor, cluster, path: str, problem: str, kind: str | None, object_id: int | None,
                  before: dict | None, after: dict | None) -> None:
    """One audit record per repaired node: what ZooKeeper held and what it holds now."""
    record(actor=actor, action="zookeeper.repair", object_type=_object_type(kind) if kind else "provisioning.znode",
           object_id=object_id if object_id is not None else f"{cluster.name}{path}"[:64],
           object_repr=f"{cluster.name}:{path}"[:200],
           before={"cluster": cluster.name, "path": path, "problem": problem, "data": before},
           after={"cluster": cluster.name, "path": path, "data": after})


@audited
def record_drift_alert(cluster, items: list[dict], *, previous: set[tuple[str, str]], repair: bool, actor) -> bool:
    """An audit record when reconcile finds drift that was not already open (found and left unrepaired by the
    cluster's previous run): a hand edit of ZooKeeper is reported once, not at every sweep. True if recorded."""
    found = {(i["path"], i["problem"]) for i in items}
    new = sorted(found - previous)
    if not new:
        return False
    counts: dict[str, int] = {}
    for _, problem in found:
        counts[problem] = counts.get(problem, 0) + 1
    record(actor=actor, action="zookeeper.drift_detected", obj=cluster,
           after={"cluster": cluster.name, "counts": counts, "new": [f"{problem} {path}" for path, problem in new[:50]],
                  "more": max(0, len(new) - 50), "repairing": repair})
    log.warning("zookeeper drift on cluster %s: %s (%d new)%s", cluster.name, counts, len(new),
                "; repairing" if repair else "")
    return True


@audited
def record_secure(*, actor, cluster, nodes: int, changed: int, failed: list[str]) -> None:
    """`manage.py secure_zookeeper` gave a cluster's nodes their ACLs."""
    record(actor=actor, action="zookeeper.secure", obj=cluster,
           after={"cluster": cluster.name, "nodes": nodes, "changed": changed, "failed": failed[:50]})


# --- the reconcile schedule (django-celery-beat's PeriodicTask, editable live) ---------------


def reconcile_schedule():
    return PeriodicTask.objects.filter(name=RECONCILE_TASK_NAME).select_related("interval").first()


def ensure_reconcile_schedule(every_seconds: int = 60):
    """Create the periodic reconcile when it is missing (migrations call this); never overwrite edits."""
    existing = reconcile_schedule()
    if existing is not None:
        return existing
    interval, _ = IntervalSchedule.objects.get_or_create(every=every_seconds, period=IntervalSchedule.SECONDS)
    return PeriodicTask.objects.create(name=RECONCILE_TASK_NAME, task=RECONCILE_TASK, interval=interval,
                                       kwargs=json.dumps({"repair": False}),
                                       description="Compare every cluster's desired objects with ZooKeeper, "
                                                   "record drift, re-drive what is still pending.")


@audited
def set_reconcile_schedule(*, actor, every_seconds: int, enabled: bool, repair: bool = False):
    require_perm(actor, "provisioning.repair_drift")
    low, high = RECONCILE_EVERY_SECONDS
    if not isinstance(every_seconds, int) or not low <= every_seconds <= high:
        raise ValidationError({"every_seconds": "Give a whole number of seconds between 10 and 86400."})
    task = ensure_reconcile_schedule()
    before = {"every_seconds": task.interval.every if task.interval else None, "enabled": task.enabled,
              "kwargs": json.loads(task.kwargs or "{}")}
    interval, _ = IntervalSchedule.objects.get_or_create(every=every_seconds, period=IntervalSchedule.SECONDS)
    task.interval, task.enabled, task.kwargs = interval, enabled, json.dumps({"repair": bool(repair)})
    task.save()
    record(actor=actor, action="reconcile.schedule", object_type="django_celery_beat.periodictask",
           object_id=task.pk, object_repr=task.name,
           before=before, after={"every_seconds": every_seconds, "enabled": enabled, "kwargs": {"repair": repair}})
    return task


# --- any periodic task (the admin's schedule page) ---------------------------------------------

_PERIOD_SECONDS = {"seconds": 1, "minutes": 60, "hours": 3600, "days": 86400}


def check_schedule(task, every, period: str) -> int:
    """The interval in seconds, or a ValidationError naming the field (forms call this before saving)."""
    if period not in _PERIOD_SECONDS:
        raise ValidationError({"period": f"Choose one of {', '.join(_PERIOD_SECONDS)}."})
    if not isinstance(every, int) or isinstance(every, bool) or every < 1:
        raise ValidationError({"every": "Give a whole number of at least 1."})
    seconds = every * _PERIOD_SECONDS[period]
    low, high = RECONCILE_EVERY_SECONDS
    if task.name == RECONCILE_TASK_NAME and not low <= seconds <= high:
        raise ValidationError({"every": "The reconcile runs every 10 seconds to once a day."})
    if task.name == trace_schedule.TASK_NAME and (
            seconds % 60 or not tracing_actions.MIN_EVERY_MINUTES <= seconds // 60 <= tracing_actions.MAX_EVERY_MINUTES):
        raise ValidationError({"every": f"The trace index runs every {tracing_actions.MIN_EVERY_MINUTES} to "
                                        f"{tracing_actions.MAX_EVERY_MINUTES} whole minutes."})
    return seconds


@audited
def update_schedule(*, actor, task, every: int, period: str, enabled: bool):
    """Change one periodic task's interval and on/off. The reconcile and the trace index go through their own
    action (permission, audit record); any other task is permission-checked and recorded here."""
    seconds = check_schedule(task, every, period)
    if task.name == RECONCILE_TASK_NAME:
        repair = bool(json.loads(task.kwargs or "{}").get("repair", False))
        return set_reconcile_schedule(actor=actor, every_seconds=seconds, enabled=enabled, repair=repair)
    if task.name == trace_schedule.TASK_NAME:
        tracing_actions.update_index_schedule(actor=actor, every_minutes=seconds // 60, enabled=enabled)
        return PeriodicTask.objects.get(pk=task.pk)
    require_perm(actor, "django_celery_beat.change_periodictask")
    task = PeriodicTask.objects.select_for_update(of=("self",)).select_related("interval").get(pk=task.pk)
    before = {"interval": str(task.interval) if task.interval else None, "enabled": task.enabled}
    interval, _ = IntervalSchedule.objects.get_or_create(every=every, period=period)
    task.interval, task.crontab, task.solar, task.clocked = interval, None, None, None
    task.enabled = enabled
    task.save()  # PeriodicTask.save bumps PeriodicTasks.last_update: beat reloads its schedule
    record(actor=actor, action="schedule.update", object_type="django_celery_beat.periodictask",
           object_id=task.pk, object_repr=task.name, before=before,
           after={"interval": str(interval), "enabled": enabled})
    return task

