"""Advance a move: take its lease, run its current step (apps.moves.steps) until it waits or ends, record
each outcome through the actions, give the lease back and say when to come again.

One task at a time per move: a task takes the move with one conditional UPDATE (`lease_until` empty or past),
so a re-delivered or re-kicked task finds it taken and stops. The lease covers one run (at most
RUN_BUDGET_S of steps plus one bounded call); a worker killed with SIGKILL leaves it to expire. A move whose
worker stopped beating (`heartbeat_at` older than the beat entry's `stale_after_s`) and whose lease is free
or expired is queued again by `stalled` (the beat entry "Resume stalled topic moves").
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from django.conf import settings
from django.db import OperationalError
from django.utils import timezone

from apps.clusters.zookeeper import ZooKeeperUnreachable
from apps.moves import actions, steps
from apps.moves.choices import ACTIVE_STATES, FORWARD, ROLLBACK, StepState
from apps.moves.models import MoveStep, TopicMove
from apps.transactions.broker_admin import BrokerAdminError
from control_plane import actors, stepped_tasks

log = logging.getLogger("apps.moves.runner")

# Errors worth retrying (with Celery's backoff): a cluster or the database answering late or not at all.
TRANSIENT = (ZooKeeperUnreachable, BrokerAdminError, OperationalError)


def lease_s() -> float:
    return float(getattr(settings, "SWITCHYARD_MOVE_LEASE_S", 60))


def run_budget_s() -> float:
    return float(getattr(settings, "SWITCHYARD_MOVE_RUN_BUDGET_S", 20))


def take(move_id: int, owner: str) -> TopicMove | None:
    """The move for this task, or None when another task holds it or it is not advancing."""
    return stepped_tasks.take(TopicMove, move_id, owner, ACTIVE_STATES, lease_s(), ("topic", "source", "target"))


def release(move: TopicMove, owner: str) -> None:
    stepped_tasks.release(TopicMove, move.pk, owner)


def stalled(stale_after_s: float) -> list[int]:
    """Advancing moves nobody works on: no beat for `stale_after_s` and no lease held."""
    return stepped_tasks.stalled(TopicMove, ACTIVE_STATES, stale_after_s)


def _next_of(name: str) -> str | None:
    plan = ROLLBACK if name in ROLLBACK else FORWARD
    i = plan.index(name)
    return plan[i + 1] if i + 1 < len(plan) else None


def advance(move_id: int, owner: str, schedule: Callable[[float], None]) -> str:
    """Run the move's steps from where it is. `schedule(delay)` queues the next run. TRANSIENT errors are
    recorded on the step and raised for the task to retry with backoff. Returns what happened, for the task's
    result. The lease is given back however the run ends."""
    move = take(move_id, owner)
    if move is None:
        return "not taken"
    try:
        result, delay = _run(move, owner)
    finally:
        release(move, owner)
    if delay is not None:
        schedule(delay)
    return result


def _run(move: TopicMove, owner: str) -> tuple[str, float | None]:
    """The steps of one run: (what happened, when to run again: None for never)."""
    step = None
    deadline = time.monotonic() + run_budget_s()
    try:
        while True:
            step = MoveStep.objects.get(move=move, name=move.step)
            if step.state == StepState.PENDING and not actions.step_started(actor=actors.MOVES, move=move, step=step):
                return "moved on", 0  # rolled back meanwhile: the next run takes it from there
            ctx = steps.Ctx(move=move, step=step, topic=steps.load_topic(move.topic_id), now=timezone.now(),
                            owner=owner[:64], lease_s=lease_s())
            outcome = steps.STEPS[step.name](ctx)
            if isinstance(outcome, steps.Wait):
                if not actions.step_waiting(move, step, outcome.summary, outcome.progress):
                    return "moved on", 0
                return f"waiting: {outcome.summary}", steps.poll_s() if outcome.poll_s is None else outcome.poll_s
            next_step = None if outcome.back_to else _next_of(step.name)
            if not actions.step_done(actor=actors.MOVES, move=move, step=step, summary=outcome.summary,
                                     progress=outcome.progress, next_step=next_step, back_to=outcome.back_to):
                return "moved on", 0
            log.info("move step done", extra={"move_id": move.pk, "step": step.name, "summary": outcome.summary})
            if move.state not in ACTIVE_STATES:
                return move.state, None
            if time.monotonic() > deadline:
                return f"continuing at {move.step}", 0
    except TRANSIENT as exc:
        _failed(move, step, exc, final=False)
        raise
    except Exception as exc:  # a bug or a refusal no retry will change: the move fails, visibly
        log.exception("move step failed", extra={"move_id": move.pk, "step": getattr(step, "name", None)})
        _failed(move, step, exc, final=True)
        return "failed", None


def _failed(move: TopicMove, step: MoveStep | None, exc: BaseException, *, final: bool) -> None:
    if step is None:
        return
    error = f"{type(exc).__name__}: {exc}"
    log.warning("move step error", extra={"move_id": move.pk, "step": step.name, "error": error, "final": final})
    try:
        actions.step_error(actor=actors.MOVES, move=move, step=step, error=error, final=final)
    except Exception:  # the database itself may be the trouble: the task's retry comes back to it
        log.exception("could not record the error of move %s", move.pk)
