"""Writes of the transactions section: resolutions of prepared messages, re-drive and delete requests of dead
letters, copies of dead letters to another topic, resets of a group's position. Atomic, permission-checked,
audited (docs/transactions.md). The changes made on brokers (resolve, copy, reset) call the brokers first and
write their audit record, with what the brokers answered, in a transaction after.

Back-check tasks resolve hundreds of messages per call; each call of `apply_check_outcomes` writes one
audit record listing every message it committed or rolled back (and why), not one record per message,
so that the audit chain's single lock does not bound the rate of resolutions.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from apps.audit.recorder import record
from apps.clusters.zookeeper import ZooKeeperUnreachable
from apps.topics.choices import TopicStatus
from apps.topics.models import Topic
from apps.transactions.broker_admin import BrokerAdmin, BrokerAdminError, live_brokers
from apps.transactions.brokers import admin_for
from apps.transactions.choices import RedriveOperation, Resolution, ResolutionSource, TxState
from apps.transactions.dead_letters import binding_of, ms, require_manage
from apps.transactions.models import PreparedMessage, Redrive, TxCheck
from apps.transactions.roles import MANAGE
from control_plane.celery import send_on_commit
from control_plane.errors import ActionError, require_actor, require_perm

log = logging.getLogger("apps.transactions")

MAX_REDRIVE_IDS = 100_000
REDRIVE_TASK = "transactions.run_redrive"
FINAL = {"committed": TxState.COMMITTED, "rolled_back": TxState.ROLLED_BACK}


@dataclass
class Outcome:
    """What one check round decided for one message (the row is updated to these values)."""

    pk: int
    state: str = TxState.PREPARED
    checks_done: int = 0
    next_check_at: datetime | None = None
    resolution: str = ""
    resolution_source: str = ""
    last_error: str = ""


@dataclass
class CheckRound:
    cluster_name: str
    outcomes: list[Outcome] = field(default_factory=list)
    checks: list[TxCheck] = field(default_factory=list)
    message_ids: dict[int, str] = field(default_factory=dict)  # pk → message id, for the audit record


@transaction.atomic
def apply_check_outcomes(*, actor, round: CheckRound) -> int:
    """Record a round of back-checks: every check, each message's new state, one audit record for the
    round's resolutions. Releases the messages' claim. Returns how many messages were resolved."""
    require_perm(actor, "transactions.resolve_preparedmessage")
    now = timezone.now()
    TxCheck.objects.bulk_create(round.checks, batch_size=1000)
    rows = {r.pk: r for r in PreparedMessage.objects.filter(pk__in=[o.pk for o in round.outcomes])}
    resolved: dict[str, dict[str, str]] = {}
    for o in round.outcomes:
        row = rows.get(o.pk)
        if row is None:
            continue
        row.state, row.checks_done, row.next_check_at = o.state, o.checks_done, o.next_check_at
        row.resolution, row.resolution_source, row.last_error = o.resolution, o.resolution_source, o.last_error
        row.claimed_until = None
        row.updated_at = now
        if o.state != TxState.PREPARED:
            row.resolved_at = now
            row.next_check_at = None
            if o.resolution_source in (ResolutionSource.CHECK, ResolutionSource.EXHAUSTED):
                resolved.setdefault(o.resolution_source, {})[row.message_id] = o.resolution
    PreparedMessage.objects.bulk_update(
        rows.values(), ["state", "checks_done", "next_check_at", "resolution", "resolution_source", "last_error",
                        "claimed_until", "resolved_at", "updated_at"], batch_size=1000)
    if resolved:
        record(actor=actor, action="tx.resolve", object_type="transactions.preparedmessage",
               object_id=f"{len(sum((list(v) for v in resolved.values()), []))} messages",
               object_repr=f"back-check resolutions on {round.cluster_name}",
               after={"cluster": round.cluster_name, "by_source": resolved})
    return sum(len(v) for v in resolved.values())


def note_producer_outcomes(states: dict[int, str]) -> int:
    """Messages the producer committed or rolled back itself (seen by the sweep): an observation, not a
    change the platform made, so no audit record. `states`: pk → "committed" | "rolled_back"."""
    now = timezone.now()
    changed = 0
    for final in ("committed", "rolled_back"):
        pks = [pk for pk, s in states.items() if s == final]
        if pks:
            changed += PreparedMessage.objects.filter(pk__in=pks, state=TxState.PREPARED).update(
                state=FINAL[final], resolution=Resolution.COMMIT if final == "committed" else Resolution.ROLLBACK,
                resolution_source=ResolutionSource.PRODUCER, resolved_at=now, next_check_at=None,
                claimed_until=None, updated_at=now)
    return changed


def resolve_manually(*, actor, message: PreparedMessage, decision: str) -> PreparedMessage:
    """An SRE commits or rolls back one prepared message by hand (the broker applies it first)."""
    require_perm(actor, "transactions.resolve_preparedmessage")
    if decision not in Resolution.values:
        raise ValidationError({"decision": "Say commit or rollback."})
    if message.state != TxState.PREPARED:
        raise ActionError(f"Message {message.message_id} is already {message.state}.")
    try:
        with admin_for(message.cluster, message.broker) as admin:
            result = admin.resolve([{"message_id": message.message_id, "decision": decision,
                                     "reason": "manual"}])[0]
    except (BrokerAdminError, LookupError) as exc:
        raise ActionError(f"The broker could not apply it: {exc}") from exc
    with transaction.atomic():
        row = PreparedMessage.objects.select_for_update().get(pk=message.pk)
        before = {"state": row.state}
        state = FINAL.get(result.get("state") or "")
        if state is None:
            raise ActionError(f"The broker answered {result.get('error') or 'nothing'} for {row.message_id}.")
        row.state = state
        row.resolution = Resolution.COMMIT if state == TxState.COMMITTED else Resolution.ROLLBACK
        row.resolution_source = ResolutionSource.MANUAL if not result.get("error") else ResolutionSource.PRODUCER
        row.resolved_at, row.next_check_at, row.claimed_until = timezone.now(), None, None
        row.save()
        record(actor=actor, action="tx.resolve_manual", obj=row, before=before,
               after={"state": row.state, "decision": decision, "broker_answer": result})
    return row


# --- dead-letter re-drive ---------------------------------------------------------------------


FILTER_KEYS = ("message_type", "key", "business_id")
MAX_COPY_IDS = 1000


def _require_dead_letter_perm(actor, cluster, topic: str, group: str, operation: str) -> None:
    """SREs re-drive any group by name (the re-drive form); every other change needs the manage permission on
    the topic's binding: SREs on every topic, developers on their teams' topics."""
    require_actor(actor)
    if operation == RedriveOperation.REDRIVE and actor.has_perm("transactions.add_redrive"):
        return
    require_perm(actor, MANAGE)
    require_manage(actor, binding_of(cluster, topic, group).topic)


@transaction.atomic
def request_redrive(*, actor, cluster, topic: str, group: str, since: datetime | None = None,
                    until: datetime | None = None, message_ids: list[str] | None = None,
                    operation: str = RedriveOperation.REDRIVE, filters: dict | None = None,
                    all_matching: bool = True) -> Redrive:
    """Queue a re-drive (or a delete) of one group's dead letters: the listed ids, or (`all_matching`) every one
    the broker lists for the time range (either end may be open) and the filters (exact message type, key,
    business id)."""
    if operation not in RedriveOperation.values:
        raise ValidationError({"operation": "Say redrive or delete."})
    _require_dead_letter_perm(actor, cluster, topic, group, operation)
    errors: dict[str, str] = {}
    ids = [str(i).strip() for i in (message_ids or []) if str(i).strip()]
    filters = {k: v for k, v in (filters or {}).items() if v}
    if not topic:
        errors["topic"] = "Name the topic whose dead letters to re-drive."
    if not group:
        errors["group"] = "Name the consumer group whose dead letters to re-drive."
    if ids and (since or until or filters):
        errors["message_ids"] = "Choose dead letters by filters or by ids, not both."
    if not ids and not all_matching:
        errors["message_ids"] = "Select at least one dead letter, or all that match the filters."
    if len(ids) > MAX_REDRIVE_IDS:
        errors["message_ids"] = f"At most {MAX_REDRIVE_IDS:,} ids per run; select all that match instead."
    if set(filters) - set(FILTER_KEYS) or not all(isinstance(v, str) and len(v) <= 255 for v in filters.values()):
        errors["filters"] = f"Filters are {', '.join(FILTER_KEYS)}, each a text of at most 255 characters."
    if since and until and since >= until:
        errors["until"] = "The end of the time range must be after its start."
    if cluster.status != "active":
        errors["cluster"] = f"Cluster {cluster.name} is {cluster.status}; re-drive on an active cluster."
    if errors:
        raise ValidationError(errors)
    busy = Redrive.objects.select_for_update().filter(cluster=cluster, topic=topic, group=group,
                                                      state__in=["queued", "running"]).first()
    if busy is not None:
        raise ActionError(f"Run #{busy.pk} on the dead letters of {topic}/{group} is {busy.state}; wait for it to "
                          "finish.")
    run = Redrive.objects.create(cluster=cluster, topic=topic, group=group, since=since, until=until,
                                 operation=operation, filters=filters, message_ids=list(dict.fromkeys(ids)),
                                 requested_by=actor if getattr(actor, "pk", None) else None)
    record(actor=actor, action="dlq.redrive_request" if operation == RedriveOperation.REDRIVE else "dlq.delete_request",
           obj=run, after={"cluster": cluster.name, "topic": topic, "group": group, "operation": operation,
                           "since": since.isoformat() if since else None, "until": until.isoformat() if until else None,
                           "filters": filters, "message_ids": len(run.message_ids)})
    send_on_commit(REDRIVE_TASK, run.pk)
    return run


def copy_dead_letters(*, actor, cluster, topic: str, group: str, message_ids: list[str], to_topic: str) -> dict:
    """Publish copies of these dead letters to another topic of the same team on the same cluster (the dead
    letters stay). Returns {"copied": [...], "skipped": [...]}; audited."""
    _require_dead_letter_perm(actor, cluster, topic, group, "copy")
    source = binding_of(cluster, topic, group).topic
    ids = list(dict.fromkeys(str(i).strip() for i in message_ids or [] if str(i).strip()))
    errors: dict[str, str] = {}
    if not ids:
        errors["message_ids"] = "Select at least one dead letter to copy."
    elif len(ids) > MAX_COPY_IDS:
        errors["message_ids"] = f"Copy at most {MAX_COPY_IDS:,} dead letters at once."
    target = Topic.objects.filter(name=to_topic, cluster=cluster, status=TopicStatus.ACTIVE).first()
    if to_topic == topic:
        errors["to_topic"] = "Choose another topic: to deliver a dead letter to its group again, re-drive it."
    elif target is None or target.team_id != source.team_id:
        errors["to_topic"] = f"Choose an active topic of team {source.team.name} on cluster {cluster.name}."
    if errors:
        raise ValidationError(errors)
    copied: list[str] = []
    skipped: dict[str, str] = {}
    try:
        for endpoint in live_brokers(cluster):
            left = [i for i in ids if i not in copied]
            if not left:
                break
            with BrokerAdmin(endpoint) as admin:
                answer = admin.copy(topic=topic, group=group, message_ids=left, to_topic=to_topic)
            copied += answer.get("copied", [])
            skipped.update({s["message_id"]: s["reason"] for s in answer.get("skipped", [])})
    except (BrokerAdminError, ZooKeeperUnreachable) as exc:
        failure = str(exc)
    else:
        failure = ""
    result = {"copied": copied, "skipped": [{"message_id": i, "reason": skipped.get(i, "not_dead_lettered")}
                                            for i in ids if i not in copied]}
    if copied or not failure:
        with transaction.atomic():
            record(actor=actor, action="dlq.copy", object_type="bindings.binding", object_id=f"{topic}/{group}",
                   object_repr=f"dead letters of {topic}/{group} on {cluster.name}",
                   after={"cluster": cluster.name, "to_topic": to_topic, **result, "error": failure or None})
    if failure:
        raise ActionError(f"The brokers could not copy every dead letter ({len(copied)} copied): {failure}")
    return result


def reset_group_position(*, actor, cluster, topic: str, group: str, to: datetime | None = None) -> dict:
    """Skip a group's backlog: every message it still owes that was stored before `to` (None: now) is no longer
    delivered to it, on every broker of the cluster. Returns what each broker skipped; audited."""
    _require_dead_letter_perm(actor, cluster, topic, group, "reset")
    binding = binding_of(cluster, topic, group)
    now = timezone.now()
    if to is not None and to > now:
        raise ValidationError({"to": "Choose a time in the past (or now): a group skips only what was stored "
                                     "before it."})
    before_ms = ms(to or now)
    skipped: dict[str, int] = {}
    failure = ""
    try:
        for endpoint in live_brokers(cluster):
            with BrokerAdmin(endpoint) as admin:
                skipped[endpoint.node_id] = admin.reset_group(topic=topic, group=group, before_ms=before_ms)["skipped"]
    except (BrokerAdminError, ZooKeeperUnreachable) as exc:
        failure = str(exc)
    result = {"cluster": cluster.name, "topic": topic, "group": group, "to": (to or now).isoformat(),
              "before_ms": before_ms, "skipped": sum(skipped.values()), "by_broker": skipped}
    if skipped or not failure:
        with transaction.atomic():
            record(actor=actor, action="binding.reset_position", obj=binding,
                   after={**result, "error": failure or None})
    if failure:
        raise ActionError(f"The reset did not reach every broker ({len(skipped)} did): {failure}. Reset again: "
                          "a broker skips only what is older than the time, so a repeat changes nothing more.")
    return result


@transaction.atomic
def finish_redrive(*, actor, run: Redrive) -> None:
    """The task's closing record of a re-drive: what it sent, what it skipped."""
    record(actor=actor, action="dlq.redrive_done", obj=run,
           after={"state": run.state, "total": run.total, "done": run.done, "skipped": run.skipped,
                  "batches": run.batches, "error": run.error})
