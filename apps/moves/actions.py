"""Writes of topic moves: start, roll back, resume (by an SRE, the command line or automation), and what the
worker records as the steps go (acting as the moves' system actor). Atomic, permission-checked, audited;
the worker's task is queued when the transaction commits.
"""

from __future__ import annotations

import logging

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from apps.audit.recorder import audited, record
from apps.moves import checks
from apps.moves.choices import (
    ACTIVE_STATES,
    FORWARD,
    OPEN_STATES,
    ROLLBACK,
    DeadLetters,
    MoveState,
    Step,
    StepState,
)
from apps.moves.models import FOLLOW_S_RANGE, MoveStep, TopicMove
from apps.topics.models import Topic
from control_plane.celery import send_on_commit
from control_plane.errors import ActionError, require_perm

log = logging.getLogger("apps.moves")

# Rolling back stays possible until the source starts being deprovisioned.
ROLLBACK_BEFORE = Step.DEPROVISION
ADVANCE_TASK = "moves.advance"


def _kick(move_id: int) -> None:
    """Queue the worker's task once the transaction commits (by name: apps.moves.tasks runs this module)."""
    send_on_commit(ADVANCE_TASK, move_id)


def start_move(*, actor, topic: Topic, target, dead_letters: str | None = None,
               client_follow_s: int | None = None) -> TopicMove:
    """Check what the move needs (refusing what cannot be done safely, changing nothing), then record the move
    and queue its first step. `dead_letters` may be left out only while the source holds none."""
    require_perm(actor, "moves.add_topicmove")
    follow = TopicMove._meta.get_field("client_follow_s").default if client_follow_s is None else client_follow_s
    errors = checks.refusals(topic, target, dead_letters)
    if not isinstance(follow, int) or isinstance(follow, bool) or not FOLLOW_S_RANGE[0] <= follow <= FOLLOW_S_RANGE[1]:
        errors["client_follow_s"] = [f"Give whole seconds from {FOLLOW_S_RANGE[0]} to {FOLLOW_S_RANGE[1]}."]
    if errors:
        raise ValidationError(errors)
    probe = checks.probe(topic, target)  # network calls: outside any transaction
    errors = probe.refusals | checks.dead_letter_refusal(topic, dead_letters, probe.figures)
    if errors:
        raise ValidationError(errors)
    return _create(actor=actor, topic=topic, target=target, dead_letters=dead_letters or DeadLetters.MOVE,
                   follow=follow, figures=probe.figures)


@audited
def _create(*, actor, topic: Topic, target, dead_letters: str, follow: int, figures: dict) -> TopicMove:
    topic = Topic.objects.select_for_update(of=("self",)).select_related("cluster").get(pk=topic.pk)
    errors = checks.refusals(topic, target, dead_letters)  # again, under the topic's lock: a move started meanwhile
    if errors:
        raise ValidationError(errors)
    now = timezone.now()
    move = TopicMove.objects.create(topic=topic, source=topic.cluster, target=target, dead_letters=dead_letters,
                                    client_follow_s=follow, step=Step.PROVISION, heartbeat_at=now,
                                    requested_by=actor if getattr(actor, "pk", None) else None,
                                    requested_as=actor.username)
    summary = (f"{target.name}: {figures['target']['brokers']} brokers answer; {topic.cluster.name}: "
               f"{figures['source']['brokers']} brokers answer, {figures['source']['dead_letters']:,} dead letters")
    MoveStep.objects.bulk_create([
        MoveStep(move=move, name=name, position=i, state=StepState.DONE if name == Step.CHECKS else StepState.PENDING,
                 progress=figures if name == Step.CHECKS else {}, summary=summary if name == Step.CHECKS else "",
                 started_at=now if name == Step.CHECKS else None, finished_at=now if name == Step.CHECKS else None)
        for i, name in enumerate(FORWARD)])
    record(actor=actor, action="move.started", obj=move,
           after={"topic": topic.name, "environment": topic.environment, "source": topic.cluster.name,
                  "target": target.name, "dead_letters": dead_letters, "client_follow_s": follow, "checks": figures})
    _kick(move.pk)
    return move


def rollback_refusal(move: TopicMove) -> str | None:
    """Why this move cannot be rolled back now (None: it can)."""
    if move.state == MoveState.ROLLING_BACK or move.step in ROLLBACK:
        return f"Move #{move.pk} is already being rolled back."
    if not move.open:
        return f"Move #{move.pk} has ended ({move.get_state_display().lower()}); nothing to roll back."
    if FORWARD.index(move.step) >= FORWARD.index(ROLLBACK_BEFORE):
        return (f"Move #{move.pk} is deprovisioning {move.source.name}: it can no longer be rolled back. The topic is "
                f"served by {move.target.name}; once the move ends, move it back with a new move.")
    return None


@audited
def rollback_move(*, actor, move: TopicMove) -> TopicMove:
    """Bring the topic back to the source: producers first, then what reached the target drains back, then the
    target lets go of it (docs/migration.md, "Rollback")."""
    require_perm(actor, "moves.rollback_topicmove")
    move = TopicMove.objects.select_for_update(of=("self",)).select_related("source", "target", "topic").get(
        pk=move.pk)
    refusal = rollback_refusal(move)
    if refusal:
        raise ActionError(refusal)
    before = {"state": move.state, "step": move.step}
    now = timezone.now()
    MoveStep.objects.filter(move=move, name__in=FORWARD).exclude(
        state__in=[StepState.DONE]).update(state=StepState.SKIPPED, finished_at=now, updated_at=now)
    MoveStep.objects.bulk_create([MoveStep(move=move, name=name, position=len(FORWARD) + i)
                                  for i, name in enumerate(ROLLBACK)], ignore_conflicts=True)
    move.state, move.step, move.error = MoveState.ROLLING_BACK, Step.RB_PRODUCERS, ""
    move.rollback_requested_by = actor.username
    move.heartbeat_at = now
    move.save(update_fields=["state", "step", "error", "rollback_requested_by", "heartbeat_at"])
    record(actor=actor, action="move.rollback_requested", obj=move, before=before,
           after={"state": move.state, "step": move.step, "from_step": before["step"]})
    _kick(move.pk)
    return move


@audited
def resume_move(*, actor, move: TopicMove) -> TopicMove:
    """Run a failed move's step again (after its cause was dealt with)."""
    require_perm(actor, "moves.rollback_topicmove")
    move = TopicMove.objects.select_for_update(of=("self",)).get(pk=move.pk)
    if move.state != MoveState.FAILED:
        raise ActionError(f"Move #{move.pk} is {move.get_state_display().lower()}: only a failed move is resumed.")
    move.state = MoveState.ROLLING_BACK if move.step in ROLLBACK else MoveState.RUNNING
    before_error, move.error, move.heartbeat_at = move.error, "", timezone.now()
    move.save(update_fields=["state", "error", "heartbeat_at"])
    MoveStep.objects.filter(move=move, name=move.step, state=StepState.FAILED).update(state=StepState.RUNNING)
    record(actor=actor, action="move.resumed", obj=move, before={"state": MoveState.FAILED, "error": before_error},
           after={"state": move.state, "step": move.step})
    _kick(move.pk)
    return move


# --- what the worker records (actor: control_plane.actors.MOVES) -------------------------------------


def _figures(progress: dict) -> dict:
    """The figures an audit record keeps of a step (the per-broker detail stays on the step)."""
    out = {k: v for k, v in progress.items() if k not in ("figures", "per_broker")}
    if "figures" in progress:
        out["figures"] = {k: v for k, v in progress["figures"].items() if k != "per_broker"}
    return out


def _still(move: TopicMove, step: MoveStep) -> bool:
    """Lock the move; whether it is still at this step and advancing (a rollback or a failure may have come
    in while the step ran: then what the step found is not recorded)."""
    current = TopicMove.objects.select_for_update(of=("self",)).filter(pk=move.pk).values_list(
        "state", "step").first()
    return current is not None and current[0] in ACTIVE_STATES and current[1] == step.name


@audited
def step_started(*, actor, move: TopicMove, step: MoveStep) -> bool:
    if not _still(move, step):
        return False
    now = timezone.now()
    MoveStep.objects.filter(pk=step.pk).update(state=StepState.RUNNING, started_at=now, updated_at=now)
    step.state, step.started_at = StepState.RUNNING, now
    record(actor=actor, action="move.step_started", obj=move, after={"step": step.name, "position": step.position})
    return True


@audited
def step_done(*, actor, move: TopicMove, step: MoveStep, summary: str, progress: dict, next_step: str | None,
              back_to: str | None = None) -> bool:
    """A step completed: record its last figures, go on to `next_step` (None: the move has ended), or back to
    `back_to` (the steps from there run again). False when the move is no longer at this step."""
    if not _still(move, step):
        return False
    now = timezone.now()
    MoveStep.objects.filter(pk=step.pk).update(state=StepState.DONE, summary=summary[:300], progress=progress,
                                               error="", finished_at=now, updated_at=now)
    fields = {"step": next_step or move.step, "heartbeat_at": now}
    if back_to is not None:
        plan = ROLLBACK if back_to in ROLLBACK else FORWARD
        again = plan[plan.index(back_to):plan.index(step.name) + 1]
        MoveStep.objects.filter(move=move, name__in=again).update(state=StepState.PENDING, progress={}, summary="",
                                                                 started_at=None, finished_at=None, updated_at=now)
        fields["step"] = back_to
    if next_step is None and back_to is None:
        fields.update(state=MoveState.SUCCEEDED if move.state == MoveState.RUNNING else MoveState.ROLLED_BACK,
                      finished_at=now)
    TopicMove.objects.filter(pk=move.pk).update(**fields)
    for key, value in fields.items():
        setattr(move, key, value)
    record(actor=actor, action="move.step_done", obj=move,
           after={"step": step.name, "summary": summary, "figures": _figures(progress), "next": move.step,
                  **({"back_to": back_to} if back_to else {})})
    if move.state in (MoveState.SUCCEEDED, MoveState.ROLLED_BACK):
        record(actor=actor, action=f"move.{move.state}", obj=move,
               after={"topic": move.topic.name, "serving": move.target.name if move.state == MoveState.SUCCEEDED
                      else move.source.name})
    return True


@transaction.atomic
def step_waiting(move: TopicMove, step: MoveStep, summary: str, progress: dict) -> bool:
    """The figures read while a step waits: kept on the step (shown live), not audited each time."""
    if not _still(move, step):
        return False
    now = timezone.now()
    MoveStep.objects.filter(pk=step.pk).update(summary=summary[:300], progress=progress, error="", updated_at=now)
    TopicMove.objects.filter(pk=move.pk).update(heartbeat_at=now)
    return True


@audited
def step_error(*, actor, move: TopicMove, step: MoveStep, error: str, final: bool) -> None:
    """A step's run failed. Not final: kept on the step and retried with backoff (audited the first time).
    Final: the move fails, until an SRE resumes or rolls it back."""
    if not _still(move, step):
        return
    now = timezone.now()
    step = MoveStep.objects.select_for_update().get(pk=step.pk)
    step.attempts += 1
    step.error = error[:4000]
    step.state = StepState.FAILED if final else step.state
    step.save(update_fields=["attempts", "error", "state", "updated_at"])
    if final:
        TopicMove.objects.filter(pk=move.pk, state__in=OPEN_STATES).update(state=MoveState.FAILED, error=error[:4000],
                                                                          heartbeat_at=now)
    else:
        TopicMove.objects.filter(pk=move.pk).update(heartbeat_at=now)
    if final or step.attempts == 1:
        record(actor=actor, action="move.failed" if final else "move.step_error", obj=move,
               after={"step": step.name, "attempt": step.attempts, "error": error[:1000]})
