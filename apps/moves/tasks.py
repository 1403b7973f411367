"""Celery tasks of topic moves: thin, they take ids and call the runner.

`advance` is acknowledged only when it ends (acks_late; reject_on_worker_lost for a pool child that dies), and
retried with exponential backoff while a cluster or the database does not answer (autoretry_for). A move
left without a worker (the task's worker was killed, the queued next run was lost with it) is queued again by
`resume_stalled` (beat entry "Resume stalled topic moves", created by a data migration, editable live).
"""

from __future__ import annotations

import logging

from apps.audit.context import action_context
from apps.moves import runner
from apps.moves.actions import ADVANCE_TASK
from control_plane.celery import app

log = logging.getLogger("apps.moves.tasks")

RESUME_TASK = "moves.resume_stalled"


@app.task(bind=True, name=ADVANCE_TASK, acks_late=True, reject_on_worker_lost=True, autoretry_for=runner.TRANSIENT,
          retry_backoff=1, retry_backoff_max=30, retry_jitter=False, max_retries=None)
def advance(self, move_id: int) -> str:
    def schedule(delay: float) -> None:
        advance.apply_async((move_id,), countdown=delay)

    with action_context("task", self.request.id):
        return runner.advance(move_id, self.request.id or "eager", schedule)


@app.task(name=RESUME_TASK)
def resume_stalled(stale_after_s: float = 30) -> list[int]:
    """Periodic: queue again the moves whose worker stopped beating for `stale_after_s` (their lease expired)."""
    pks = runner.stalled(stale_after_s)
    for pk in pks:
        log.warning("move resumed: its worker stopped beating", extra={"move_id": pk})
        advance.delay(pk)
    return pks
