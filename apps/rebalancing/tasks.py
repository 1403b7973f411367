"""Celery tasks of rebalances: thin, they take ids and call the runner.

`advance` is acknowledged only when it ends (acks_late; reject_on_worker_lost for a pool child that dies) and
retried with backoff while ZooKeeper or the database does not answer. A rebalance left without a worker is
queued again by `resume_stalled` (beat entry "Resume stalled rebalances", created by a data migration).
"""

from __future__ import annotations

import logging

from apps.audit.context import action_context
from apps.rebalancing import runner
from apps.rebalancing.actions import ADVANCE_TASK
from control_plane.celery import app

log = logging.getLogger("apps.rebalancing.tasks")

RESUME_TASK = "rebalancing.resume_stalled"


@app.task(bind=True, name=ADVANCE_TASK, acks_late=True, reject_on_worker_lost=True, autoretry_for=runner.TRANSIENT,
          retry_backoff=1, retry_backoff_max=30, retry_jitter=False, max_retries=None)
def advance(self, rebalance_id: int) -> str:
    def schedule(delay: float) -> None:
        advance.apply_async((rebalance_id,), countdown=delay)

    with action_context("task", self.request.id):
        return runner.advance(rebalance_id, self.request.id or "eager", schedule)


@app.task(name=RESUME_TASK)
def resume_stalled(stale_after_s: float = 30) -> list[int]:
    """Periodic: queue again the rebalances whose worker stopped beating for `stale_after_s`."""
    pks = runner.stalled(stale_after_s)
    for pk in pks:
        log.warning("rebalance resumed: its worker stopped beating", extra={"rebalance_id": pk})
        advance.delay(pk)
    return pks
