"""The lease of a Celery-driven state machine advanced one step at a time (topic moves, rebalances).

A row that a task advances carries `state`, `heartbeat_at`, `lease_until` and `lease_owner`. A task takes the
row with one conditional UPDATE (`lease_until` empty or past, `state` among the active ones), so a re-delivered
or re-kicked task finds it taken and stops; it gives the lease back however its run ends. A worker killed with
SIGKILL leaves the lease to expire: `stalled` lists the active rows whose worker stopped beating and whose
lease is free or expired, for a periodic task to queue them again (the row carries on from its step).
`task_pair` makes the two Celery tasks of such a machine (advance, resume the stalled).
"""

from __future__ import annotations

from datetime import timedelta

from django.db.models import Q
from django.utils import timezone

from apps.audit.context import action_context


def take(model, pk: int, owner: str, active_states, lease_s: float, related: tuple[str, ...] = ()):
    """The row for this task (leased for `lease_s`), or None when another task holds it or it is not active."""
    now = timezone.now()
    taken = model.objects.filter(Q(lease_until__isnull=True) | Q(lease_until__lt=now), pk=pk,
                                 state__in=list(active_states)).update(
        lease_until=now + timedelta(seconds=lease_s), lease_owner=owner[:64], heartbeat_at=now)
    if not taken:
        return None
    return model.objects.select_related(*related).get(pk=pk)


def release(model, pk: int, owner: str) -> None:
    model.objects.filter(pk=pk, lease_owner=owner[:64]).update(lease_until=None, lease_owner="")


def stalled(model, active_states, stale_after_s: float) -> list[int]:
    """Active rows nobody works on: no beat for `stale_after_s` and no lease held."""
    now = timezone.now()
    return list(model.objects.filter(
        Q(heartbeat_at__lt=now - timedelta(seconds=stale_after_s)) | Q(heartbeat_at__isnull=True),
        Q(lease_until__isnull=True) | Q(lease_until__lt=now), state__in=list(active_states))
        .order_by("pk").values_list("pk", flat=True))


def task_pair(app, *, advance_name: str, resume_name: str, run, stalled_ids, transient: tuple, log, noun: str):
    """The two Celery tasks of such a state machine: `advance(pk)` runs it (`run(pk, owner, schedule)`: the
    runner) and queues itself again when the runner says; it is acknowledged only when it ends (acks_late;
    reject_on_worker_lost for a pool child that dies) and retried with backoff on the `transient` errors.
    `resume_stalled(stale_after_s)` (periodic, a beat entry) queues again the rows `stalled_ids` lists."""

    @app.task(bind=True, name=advance_name, acks_late=True, reject_on_worker_lost=True, autoretry_for=transient,
              retry_backoff=1, retry_backoff_max=30, retry_jitter=False, max_retries=None)
    def advance(self, pk: int) -> str:
        def schedule(delay: float) -> None:
            advance.apply_async((pk,), countdown=delay)

        with action_context("task", self.request.id):
            return run(pk, self.request.id or "eager", schedule)

    @app.task(name=resume_name)
    def resume_stalled(stale_after_s: float = 30) -> list[int]:
        pks = stalled_ids(stale_after_s)
        for pk in pks:
            log.warning(f"{noun} resumed: its worker stopped beating", extra={f"{noun}_id": pk})
            advance.delay(pk)
        return pks

    return advance, resume_stalled
