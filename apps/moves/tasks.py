"""Celery tasks of topic moves: thin, they take ids and call the runner (control_plane.stepped_tasks.task_pair).

`advance` is acknowledged only when it ends (acks_late; reject_on_worker_lost for a pool child that dies), and
retried with exponential backoff while a cluster or the database does not answer (autoretry_for). A move
left without a worker (the task's worker was killed, the queued next run was lost with it) is queued again by
`resume_stalled` (beat entry "Resume stalled topic moves", created by a data migration, editable live).
"""

from __future__ import annotations

import logging

from apps.moves import runner
from apps.moves.actions import ADVANCE_TASK
from control_plane.celery import app
from control_plane.stepped_tasks import task_pair

log = logging.getLogger("apps.moves.tasks")

RESUME_TASK = "moves.resume_stalled"

advance, resume_stalled = task_pair(app, advance_name=ADVANCE_TASK, resume_name=RESUME_TASK, run=runner.advance,
                                    stalled_ids=runner.stalled, transient=runner.TRANSIENT, log=log, noun="move")
