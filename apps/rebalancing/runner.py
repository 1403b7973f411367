"""Advance a rebalance: take its lease (control_plane.stepped_tasks), run the phase under way (apps.rebalancing.
steps) until it waits or the run's budget is spent, record each outcome through the actions, give the lease
back and say when to come again. Progress (step i of n, the phase) is on the row after every phase, so a worker
killed mid-way is followed by one that carries on from there (`stalled`: the beat entry "Resume stalled
rebalances")."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from django.conf import settings
from django.db import OperationalError

from apps.clusters.zookeeper import ZooKeeperUnreachable
from apps.rebalancing import actions, steps
from apps.rebalancing.choices import ACTIVE_STATES
from apps.rebalancing.models import Rebalance
from apps.rebalancing.plan import Step
from control_plane import actors, stepped_tasks

log = logging.getLogger("apps.rebalancing.runner")

TRANSIENT = (ZooKeeperUnreachable, OperationalError)


def _setting(name: str, default: float) -> float:
    return float(getattr(settings, name, default))


def lease_s() -> float:
    return _setting("SWITCHYARD_REBALANCE_LEASE_S", 60)


def poll_s() -> float:
    return _setting("SWITCHYARD_REBALANCE_POLL_S", 0.5)


def run_budget_s() -> float:
    return _setting("SWITCHYARD_REBALANCE_RUN_BUDGET_S", 20)


def stalled(stale_after_s: float) -> list[int]:
    return stepped_tasks.stalled(Rebalance, ACTIVE_STATES, stale_after_s)


def advance(pk: int, owner: str, schedule: Callable[[float], None]) -> str:
    """Run the rebalance's phases from where it is; `schedule(delay)` queues the next run. TRANSIENT errors are
    recorded and raised for the task to retry with backoff."""
    rebalance = stepped_tasks.take(Rebalance, pk, owner, ACTIVE_STATES, lease_s(), ("cluster",))
    if rebalance is None:
        return "not taken"
    try:
        result, delay = _run(rebalance)
    finally:
        stepped_tasks.release(Rebalance, pk, owner)
    if delay is not None:
        schedule(delay)
    return result


def _run(rebalance: Rebalance) -> tuple[str, float | None]:
    deadline = time.monotonic() + run_budget_s()
    position, phase = rebalance.position, rebalance.phase
    try:
        while rebalance.state in ACTIVE_STATES:
            position, phase = rebalance.position, rebalance.phase
            step = Step.from_dict(rebalance.steps[position])
            outcome = steps.PHASE_RUN[phase](rebalance.cluster, step)
            kwargs = {"actor": actors.REBALANCE, "rebalance": rebalance, "position": position, "phase": phase,
                      "summary": outcome.summary, "progress": outcome.progress}
            if isinstance(outcome, steps.Wait):
                return (f"waiting: {outcome.summary}", poll_s()) if actions.phase_waiting(**kwargs) else ("moved on",
                                                                                                        None)
            if not actions.phase_done(**kwargs):
                return "moved on", None
            log.info("rebalance phase done", extra={"rebalance_id": rebalance.pk, "step": position + 1,
                                                     "phase": phase, "summary": outcome.summary})
            if rebalance.state in ACTIVE_STATES and time.monotonic() > deadline:
                return f"continuing at step {rebalance.position + 1}", 0
        return rebalance.state, None
    except TRANSIENT as exc:
        _failed(rebalance, position, phase, exc, final=False)
        raise
    except Exception as exc:  # a refusal or a bug no retry will change: the rebalance fails, visibly
        log.exception("rebalance step failed", extra={"rebalance_id": rebalance.pk, "step": position + 1})
        _failed(rebalance, position, phase, exc, final=True)
        return "failed", None


def _failed(rebalance: Rebalance, position: int, phase: str, exc: BaseException, *, final: bool) -> None:
    error = f"{type(exc).__name__}: {exc}"
    log.warning("rebalance step error", extra={"rebalance_id": rebalance.pk, "step": position + 1, "error": error,
                                               "final": final})
    try:
        actions.phase_error(actor=actors.REBALANCE, rebalance=rebalance, position=position, phase=phase,
                            error=error, final=final)
    except Exception:  # the database itself may be the trouble: the task's retry comes back to it
        log.exception("could not record the error of rebalance %s", rebalance.pk)
