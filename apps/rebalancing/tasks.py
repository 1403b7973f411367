"""Celery tasks of rebalances: thin, they take ids and call the runner (control_plane.stepped_tasks.task_pair).

`advance` is acknowledged only when it ends (acks_late; reject_on_worker_lost for a pool child that dies) and
retried with backoff while ZooKeeper or the database does not answer. A rebalance left without a worker is
queued again by `resume_stalled` (beat entry "Resume stalled rebalances", created by a data migration).
"""

from __future__ import annotations

import logging

from apps.rebalancing import runner
from apps.rebalancing.actions import ADVANCE_TASK
from control_plane.celery import app
from control_plane.stepped_tasks import task_pair

log = logging.getLogger("apps.rebalancing.tasks")

RESUME_TASK = "rebalancing.resume_stalled"

advance, resume_stalled = task_pair(app, advance_name=ADVANCE_TASK, resume_name=RESUME_TASK, run=runner.advance,
                                    stalled_ids=runner.stalled, transient=runner.TRANSIENT, log=log, noun="rebalance")
