"""Run one dead-letter re-drive or delete (docs/transactions.md): page the broker's dead letters of the group
(those the run's time range and filters take, or its ids), send the ones never re-driven before in batches,
record each one re-driven, keep the progress on the run. A delete run goes the same way and calls the brokers'
delete instead (nothing is recorded per message: a deleted dead letter is gone).

Idempotent: a (cluster, topic, group, message id) is recorded once (unique) and never sent again; the
broker also skips ids it already re-drove.

Recoverable: the task beats (`heartbeat_at`) at every batch. A run still `running` whose beat is older than
LEASE_S was left by a worker that died; the next task for it (the broker re-delivers the unacked task, or
the periodic `resume_stalled_redrives` queues one) takes it over and carries on from its counters and its
records.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from apps.clusters.zookeeper import ZooKeeperUnreachable
from apps.transactions import actions
from apps.transactions.broker_admin import BrokerAdmin, BrokerAdminError, live_brokers
from apps.transactions.choices import RedriveOperation, RedriveState
from apps.transactions.models import Redrive, RedrivenMessage
from control_plane import actors

log = logging.getLogger("apps.transactions.redrive")

# A batch takes seconds (admin calls are bounded by SWITCHYARD_BROKER_ADMIN_TIMEOUT); a minute without a
# beat means the worker is gone.
LEASE_S = 60


def _ms(dt) -> int | None:
    return int(dt.timestamp() * 1000) if dt else None


def stalled() -> list[int]:
    """Runs to queue again: running without a beat for LEASE_S, or queued that long (the task was lost)."""
    cutoff = timezone.now() - timedelta(seconds=LEASE_S)
    return list(Redrive.objects.filter(
        Q(state=RedriveState.RUNNING) & (Q(heartbeat_at__lt=cutoff) | Q(heartbeat_at__isnull=True))
        | Q(state=RedriveState.QUEUED, created_at__lt=cutoff)).order_by("pk").values_list("pk", flat=True))


def _take(redrive_id: int) -> tuple[Redrive | None, bool]:
    """Take the run for this task: a queued one, or a running one whose lease expired (resumed=True).
    None when another task holds it or it has ended. One UPDATE each, so two tasks never both win."""
    now = timezone.now()
    runs = Redrive.objects.filter(pk=redrive_id)
    if runs.filter(state=RedriveState.QUEUED).update(state=RedriveState.RUNNING, started_at=now, heartbeat_at=now):
        return runs.select_related("cluster").get(), False
    cutoff = now - timedelta(seconds=LEASE_S)
    if runs.filter(Q(heartbeat_at__lt=cutoff) | Q(heartbeat_at__isnull=True),
                   state=RedriveState.RUNNING).update(heartbeat_at=now):
        return runs.select_related("cluster").get(), True
    return None, False


def run(redrive_id: int) -> Redrive:
    run, resumed = _take(redrive_id)
    if run is None:
        return Redrive.objects.get(pk=redrive_id)
    if not resumed:
        _update(run, total=len(run.message_ids) if run.message_ids else 0)
    elif not run.message_ids:
        # by range, paging starts again (the broker no longer lists what it re-drove): count from the records
        done = RedrivenMessage.objects.filter(redrive=run).count()
        _update(run, done=done, total=done + run.skipped)
    if resumed:
        log.warning("re-drive resumed after its worker stopped", extra={"redrive_id": run.pk, "done": run.done})
    try:
        brokers = live_brokers(run.cluster)
        if not brokers:
            raise BrokerAdminError(f"no broker of {run.cluster.name} is registered in ZooKeeper")
        admins = [BrokerAdmin(endpoint) for endpoint in brokers]
        try:
            if run.message_ids:
                _by_ids(run, admins)
            else:
                for admin in admins:
                    _by_range(run, admin)
        finally:
            for admin in admins:
                admin.close()
    except (BrokerAdminError, ZooKeeperUnreachable) as exc:
        _update(run, state=RedriveState.FAILED, error=str(exc)[:2000], finished_at=timezone.now())
        log.error("re-drive failed", extra={"redrive_id": run.pk, "error": str(exc)})
    else:
        _update(run, state=RedriveState.SUCCEEDED, finished_at=timezone.now())
        log.info("re-drive done", extra={"redrive_id": run.pk, "done": run.done, "skipped": run.skipped})
    actions.finish_redrive(actor=actors.REDRIVE, run=run)
    return run


def _recorded(run: Redrive, ids: list[str]) -> dict[str, int]:
    """Of these ids, the ones recorded re-driven (any run): message id → the run that re-drove it."""
    return dict(RedrivenMessage.objects.filter(cluster=run.cluster, topic=run.topic, group=run.group,
                                               message_id__in=ids).values_list("message_id", "redrive_id"))


def _send(run: Redrive, admin: BrokerAdmin, ids: list[str]) -> tuple[list[str], list[str], list[dict]]:
    """Send the ids never re-driven before; record the ones the broker re-drove. (re-driven now, re-driven by
    this run before it was resumed, skipped)."""
    if run.operation == RedriveOperation.DELETE:  # nothing is recorded per id: the broker knows what is gone
        answer = admin.delete(topic=run.topic, group=run.group, message_ids=ids)
        return [str(i) for i in answer.get("deleted", [])], [], list(answer.get("skipped", []))
    recorded = _recorded(run, ids)
    mine = [i for i in ids if recorded.get(i) == run.pk]
    skipped = [{"message_id": i, "reason": "already_redriven"} for i in ids if i in recorded and i not in mine]
    fresh = [i for i in ids if i not in recorded]
    if not fresh:
        return [], mine, skipped
    answer = admin.redrive(topic=run.topic, group=run.group, message_ids=fresh)
    redriven = [str(i) for i in answer.get("redriven", [])]
    RedrivenMessage.objects.bulk_create(
        [RedrivenMessage(cluster=run.cluster, topic=run.topic, group=run.group, message_id=i, redrive=run)
         for i in redriven], ignore_conflicts=True)
    return redriven, mine, skipped + list(answer.get("skipped", []))


def _by_range(run: Redrive, admin: BrokerAdmin) -> None:
    batch = max(1, min(settings.SWITCHYARD_REDRIVE_BATCH, 1000))
    after = None
    while True:
        page = admin.dead_letters(topic=run.topic, group=run.group, since_ms=_ms(run.since), until_ms=_ms(run.until),
                                  limit=batch, after=after, **run.filters)
        ids = [d["message_id"] for d in page.get("dead_letters", [])]
        if ids:
            redriven, mine, _ = _send(run, admin, ids)
            new = len(ids) - len(mine)  # ids this run re-drove before it was resumed are counted already
            _update(run, total=run.total + new, done=run.done + len(redriven),
                    skipped=run.skipped + new - len(redriven), batches=run.batches + 1)
        after = page.get("next_after")
        if not after or not ids:
            return


def _by_ids(run: Redrive, admins: list[BrokerAdmin]) -> None:
    """By ids, batch by batch: each broker is asked for the ids no broker has re-driven yet (a message lives
    on one broker); what none re-drove is skipped. A resumed run starts after the ids it has counted."""
    batch = max(1, min(settings.SWITCHYARD_REDRIVE_BATCH, 1000))
    for i in range(run.done + run.skipped, len(run.message_ids), batch):
        ids = run.message_ids[i:i + batch]
        left, sent = list(ids), 0
        for admin in admins:
            if not left:
                break
            redriven, mine, _ = _send(run, admin, left)
            sent += len(redriven) + len(mine)
            gone = set(redriven) | set(mine)
            if run.operation == RedriveOperation.REDRIVE:
                gone |= set(_recorded(run, left))
            left = [m for m in left if m not in gone]
        _update(run, done=run.done + sent, skipped=run.skipped + len(ids) - sent, batches=run.batches + 1)


def _update(run: Redrive, **fields) -> None:
    fields["heartbeat_at"] = timezone.now()
    for key, value in fields.items():
        setattr(run, key, value)
    Redrive.objects.filter(pk=run.pk).update(**fields)
