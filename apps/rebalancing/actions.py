"""Writes of rebalances: preview (read only), start, resume, abandon (by an SRE or the rebalances' system actor),
and what the worker records as the steps go. Atomic, permission-checked, audited; the worker's task is queued
when the transaction commits (by name: actions never import tasks).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from django.core.exceptions import ValidationError
from django.utils import timezone

from apps.audit.recorder import audited, record
from apps.clusters.choices import ClusterStatus
from apps.clusters.models import Cluster
from apps.clusters.zookeeper import ZooKeeperUnreachable
from apps.rebalancing import plan as planner
from apps.rebalancing import zk
from apps.rebalancing.choices import OPEN_STATES, PHASES, Phase, RebalanceState
from apps.rebalancing.models import Rebalance
from control_plane.celery import send_on_commit
from control_plane.errors import ActionError, require_perm

ADVANCE_TASK = "rebalancing.advance"


@dataclass
class Preview:
    cluster: Cluster
    brokers: list[str]
    remove: list[str]
    steps: list[planner.Step]
    replicas_before: dict[str, int] = field(default_factory=dict)
    replicas_after: dict[str, int] = field(default_factory=dict)


def _kick(pk: int) -> None:
    send_on_commit(ADVANCE_TASK, pk)


def preview(*, actor, cluster: Cluster, remove: list[str] | None = None) -> Preview:
    """The plan a rebalance of `cluster` would follow now (reads ZooKeeper; changes nothing). `remove` names
    brokers to empty. Raises ValidationError for a broker unknown to the cluster or a plan that cannot fit."""
    require_perm(actor, "rebalancing.add_rebalance")
    remove = sorted(set(remove or []))
    if cluster.status == ClusterStatus.RETIRED:
        raise ValidationError({"cluster": [f"Cluster {cluster.name} is retired: it has nothing to rebalance."]})
    try:
        session = zk.session(cluster)
        live = sorted(zk.registered(session))
        current = zk.placements(session)
    except ZooKeeperUnreachable as exc:
        raise ValidationError({"cluster": [f"ZooKeeper of {cluster.name} did not answer ({exc}): a rebalance reads "
                                           f"its placements there; try again when it answers."]}) from exc
    held = set(planner.loads(current)[0])
    unknown = [b for b in remove if b not in live and b not in held]
    if unknown:
        raise ValidationError({"remove": [f"Broker {b} is neither registered in {cluster.name} nor holds a replica "
                                          f"there: name a broker of this cluster." for b in unknown]})
    if not set(live) - set(remove):
        raise ValidationError({"remove": [f"Removing {', '.join(remove)} would leave {cluster.name} no broker."]})
    try:
        steps = planner.plan(current, live, remove)
    except planner.CannotPlan as exc:
        raise ValidationError({"remove": [f"{exc}: start more brokers or remove fewer."]}) from exc
    after = {t: {pid: list(r) for pid, r in parts.items()} for t, parts in current.items()}
    for s in steps:
        reps = after[s.topic][s.partition]
        reps[reps.index(s.source)] = s.target
    return Preview(cluster, live, remove, steps, planner.loads(current)[0], planner.loads(after)[0])


def start_rebalance(*, actor, cluster: Cluster, remove: list[str] | None = None) -> Rebalance:
    """Plan (outside any transaction: it reads ZooKeeper), then record the rebalance and queue its first step.
    Refused, changing nothing, when one is open on the cluster or nothing needs to move."""
    require_perm(actor, "rebalancing.add_rebalance")
    _refuse_open(cluster)
    planned = preview(actor=actor, cluster=cluster, remove=remove)
    if not planned.steps:
        raise ValidationError({"cluster": [f"The partitions of {cluster.name} are balanced over its "
                                           f"{len(planned.brokers)} brokers already: nothing to move."]})
    return _create(actor=actor, planned=planned)


def _refuse_open(cluster: Cluster) -> None:
    busy = Rebalance.objects.filter(cluster=cluster, state__in=OPEN_STATES).first()
    if busy is not None:
        raise ValidationError({"cluster": [f"Rebalance #{busy.pk} of {cluster.name} is "
                                           f"{busy.get_state_display().lower()}: let it end, or abandon it, first."]})


@audited
def _create(*, actor, planned: Preview) -> Rebalance:
    cluster = Cluster.objects.select_for_update().get(pk=planned.cluster.pk)
    _refuse_open(cluster)  # again, under the cluster's lock
    rebalance = Rebalance.objects.create(
        cluster=cluster, brokers=planned.brokers, remove=planned.remove,
        steps=[s.as_dict() for s in planned.steps], heartbeat_at=timezone.now(),
        summary=f"step 1 of {len(planned.steps)}: {planned.steps[0]}",
        requested_by=actor if getattr(actor, "pk", None) else None, requested_as=actor.username)
    record(actor=actor, action="rebalance.started", obj=rebalance,
           after={"cluster": cluster.name, "brokers": planned.brokers, "remove": planned.remove,
                  "steps": len(planned.steps), "replicas_before": planned.replicas_before,
                  "replicas_after": planned.replicas_after})
    _kick(rebalance.pk)
    return rebalance


def _locked(rebalance: Rebalance) -> Rebalance:
    return Rebalance.objects.select_for_update(of=("self",)).select_related("cluster").get(pk=rebalance.pk)


@audited
def resume_rebalance(*, actor, rebalance: Rebalance) -> Rebalance:
    """Run a failed rebalance's step again (after its cause was dealt with)."""
    require_perm(actor, "rebalancing.change_rebalance")
    rebalance = _locked(rebalance)
    if rebalance.state != RebalanceState.FAILED:
        raise ActionError(f"Rebalance #{rebalance.pk} is {rebalance.get_state_display().lower()}: only a failed "
                          f"rebalance is resumed.")
    error = rebalance.error
    rebalance.state, rebalance.error, rebalance.attempts = RebalanceState.RUNNING, "", 0
    rebalance.phase = Phase.ADD  # the step again from its start: each phase sees what is done already
    rebalance.heartbeat_at = timezone.now()
    rebalance.save(update_fields=["state", "error", "attempts", "phase", "heartbeat_at", "updated_at"])
    record(actor=actor, action="rebalance.resumed", obj=rebalance, before={"state": "failed", "error": error},
           after={"state": rebalance.state, "position": rebalance.position, "phase": rebalance.phase})
    _kick(rebalance.pk)
    return rebalance


@audited
def abandon_rebalance(*, actor, rebalance: Rebalance) -> Rebalance:
    """Stop a running or failed rebalance where it is. The placement stays valid: a step stopped between its
    add and its drop leaves its partition one replica more (a later rebalance evens it out)."""
    require_perm(actor, "rebalancing.change_rebalance")
    rebalance = _locked(rebalance)
    if not rebalance.open:
        raise ActionError(f"Rebalance #{rebalance.pk} has ended ({rebalance.get_state_display().lower()}): "
                          f"nothing to abandon.")
    before = {"state": rebalance.state, "position": rebalance.position, "phase": rebalance.phase}
    rebalance.state, rebalance.finished_at = RebalanceState.ABANDONED, timezone.now()
    rebalance.summary = f"abandoned at step {rebalance.position + 1} of {rebalance.total} ({rebalance.phase})"
    rebalance.save(update_fields=["state", "finished_at", "summary", "updated_at"])
    record(actor=actor, action="rebalance.abandoned", obj=rebalance, before=before, after={"state": rebalance.state})
    return rebalance


# --- what the worker records (actor: control_plane.actors.REBALANCE) -----------------------------------------


def _still(rebalance: Rebalance, position: int, phase: str) -> Rebalance | None:
    """Lock the row; it when it is still running at this step and phase (an abandon may have come in)."""
    row = _locked(rebalance)
    ok = row.state == RebalanceState.RUNNING and row.position == position and row.phase == phase
    return row if ok else None


@audited
def phase_done(*, actor, rebalance: Rebalance, position: int, phase: str, summary: str, progress: dict) -> bool:
    """A phase of the step at `position` is done: on to the next phase, the next step, or the end. A finished step
    is audited with its figures. False when the rebalance has moved on meanwhile."""
    row = _still(rebalance, position, phase)
    if row is None:
        return False
    now = timezone.now()
    row.progress, row.error, row.attempts, row.heartbeat_at = progress, "", 0, now
    if phase != Phase.DROP:
        row.phase = PHASES[PHASES.index(phase) + 1]
        row.summary = f"step {position + 1} of {row.total}: {summary}"[:300]
    else:
        row.position, row.phase = position + 1, Phase.ADD
        record(actor=actor, action="rebalance.step_done", obj=row,
               after={"step": position + 1, "of": row.total, **row.steps[position], "summary": summary,
                      "epoch": progress.get("epoch")})
        if row.position >= row.total:
            row.state, row.finished_at = RebalanceState.SUCCEEDED, now
            row.summary = f"done: {row.total} of {row.total} steps"
            record(actor=actor, action="rebalance.succeeded", obj=row,
                   after={"cluster": row.cluster.name, "steps": row.total})
        else:
            row.summary = f"step {row.position + 1} of {row.total}: {planner.Step.from_dict(row.current)}"
    row.save()
    for key in ("state", "position", "phase", "summary", "progress"):  # the runner goes on from the caller's copy
        setattr(rebalance, key, getattr(row, key))
    return True


@audited
def phase_waiting(*, actor, rebalance: Rebalance, position: int, phase: str, summary: str, progress: dict) -> bool:
    """What a waiting phase read: kept on the row (shown live), not audited each time."""
    row = _still(rebalance, position, phase)
    if row is None:
        return False
    Rebalance.objects.filter(pk=row.pk).update(
        summary=f"step {position + 1} of {row.total}: {summary}"[:300], progress=progress, error="",
        heartbeat_at=timezone.now(), updated_at=timezone.now())
    return True


@audited
def phase_error(*, actor, rebalance: Rebalance, position: int, phase: str, error: str, final: bool) -> None:
    """A run failed. Not final: kept and retried with backoff (audited the first time). Final: the rebalance
    fails until an SRE resumes or abandons it."""
    row = _still(rebalance, position, phase)
    if row is None:
        return
    row.attempts += 1
    row.error, row.heartbeat_at = error[:4000], timezone.now()
    if final:
        row.state = RebalanceState.FAILED
    row.save(update_fields=["attempts", "error", "heartbeat_at", "state", "updated_at"])
    if final or row.attempts == 1:
        record(actor=actor, action="rebalance.failed" if final else "rebalance.step_error", obj=row,
               after={"step": position + 1, "phase": phase, "attempt": row.attempts, "error": error[:1000]})
