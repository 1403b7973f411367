"""Run one dead-letter re-drive (docs/transactions.md): page the broker's dead letters of the group, send
the ones never re-driven before in batches, record each one re-driven, keep the progress on the run.

Idempotent: a (cluster, topic, group, message id) is recorded once (unique) and never sent again; the
broker also skips ids it already re-drove.
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.utils import timezone

from apps.clusters.zookeeper import ZooKeeperUnreachable
from apps.transactions import actions
from apps.transactions.broker_admin import BrokerAdmin, BrokerAdminError, live_brokers
from apps.transactions.choices import RedriveState
from apps.transactions.models import Redrive, RedrivenMessage

log = logging.getLogger("apps.transactions.redrive")


def _ms(dt) -> int | None:
    return int(dt.timestamp() * 1000) if dt else None


def run(redrive_id: int) -> Redrive:
    run = Redrive.objects.select_related("cluster").get(pk=redrive_id)
    if run.state != RedriveState.QUEUED:
        return run
    _update(run, state=RedriveState.RUNNING, started_at=timezone.now(),
            total=len(run.message_ids) if run.message_ids else 0)
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
    actions.finish_redrive(run=run)
    return run


def _already(run: Redrive, ids: list[str]) -> set[str]:
    return set(RedrivenMessage.objects.filter(cluster=run.cluster, topic=run.topic, group=run.group,
                                              message_id__in=ids).values_list("message_id", flat=True))


def _send(run: Redrive, admin: BrokerAdmin, ids: list[str]) -> tuple[list[str], list[dict]]:
    """Send the ids never re-driven before; record the ones the broker re-drove. (re-driven, skipped)."""
    done_before = _already(run, ids)
    fresh = [i for i in ids if i not in done_before]
    skipped = [{"message_id": i, "reason": "already_redriven"} for i in ids if i in done_before]
    if not fresh:
        return [], skipped
    answer = admin.redrive(topic=run.topic, group=run.group, message_ids=fresh)
    redriven = [str(i) for i in answer.get("redriven", [])]
    RedrivenMessage.objects.bulk_create(
        [RedrivenMessage(cluster=run.cluster, topic=run.topic, group=run.group, message_id=i, redrive=run)
         for i in redriven], ignore_conflicts=True)
    return redriven, skipped + list(answer.get("skipped", []))


def _by_range(run: Redrive, admin: BrokerAdmin) -> None:
    batch = max(1, min(settings.SWITCHYARD_REDRIVE_BATCH, 1000))
    after = None
    while True:
        page = admin.dead_letters(topic=run.topic, group=run.group, since_ms=_ms(run.since), until_ms=_ms(run.until),
                                  limit=batch, after=after)
        ids = [d["message_id"] for d in page.get("dead_letters", [])]
        if ids:
            redriven, skipped = _send(run, admin, ids)
            _update(run, total=run.total + len(ids), done=run.done + len(redriven),
                    skipped=run.skipped + len(ids) - len(redriven), batches=run.batches + 1)
        after = page.get("next_after")
        if not after or not ids:
            return


def _by_ids(run: Redrive, admins: list[BrokerAdmin]) -> None:
    """By ids, batch by batch: each broker is asked for the ids no broker has re-driven yet (a message lives
    on one broker); what none re-drove is skipped."""
    batch = max(1, min(settings.SWITCHYARD_REDRIVE_BATCH, 1000))
    for i in range(0, len(run.message_ids), batch):
        ids = run.message_ids[i:i + batch]
        left, sent = list(ids), 0
        for admin in admins:
            if not left:
                break
            redriven, _ = _send(run, admin, left)
            sent += len(redriven)
            gone = set(redriven) | _already(run, left)
            left = [m for m in left if m not in gone]
        _update(run, done=run.done + sent, skipped=run.skipped + len(ids) - sent, batches=run.batches + 1)


def _update(run: Redrive, **fields) -> None:
    for key, value in fields.items():
        setattr(run, key, value)
    Redrive.objects.filter(pk=run.pk).update(**fields)
