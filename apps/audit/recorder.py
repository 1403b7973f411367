"""Write and verify audit records. Actions call `record` inside their own transaction.

Lock order: the audit chain's lock is the last lock a transaction takes. An action decorated with `audited`
collects its records and appends them to the chain as the transaction's last statements, after every row it
changes or locks; the chain lock is held for those inserts and the commit only, so it never waits for a row
lock while holding the chain. `record` outside an audited action appends at once: there it must be the
action's last write.
"""

from __future__ import annotations

import functools
from contextvars import ContextVar
from dataclasses import dataclass

from django.db import connection, transaction
from django.utils import timezone

from apps.audit.context import current
from apps.audit.models import GENESIS_HASH, AuditRecord
from control_plane.errors import require_actor

# One transaction-scoped advisory lock serialises appends so the chain has a single order. It is the last lock
# a transaction takes (see `audited`): taken earlier, it deadlocks against a transaction holding a row this one
# goes on to lock while waiting for the chain itself.
CHAIN_LOCK_KEY = 0x5357_4155  # "SWAU"

# The records of the audited action under way in this thread, appended when it ends.
_pending: ContextVar[list[AuditRecord] | None] = ContextVar("switchyard_pending_audit", default=None)


def audited(func):
    """An action: one transaction whose audit records are appended to the chain after all its other writes.

    Actions called inside another audited action join its transaction and its records (a nested one that
    raises takes its records back with its savepoint)."""
    @functools.wraps(func)
    def action(*args, **kwargs):
        pending = _pending.get()
        if pending is not None:
            mark = len(pending)
            try:
                with transaction.atomic():
                    return func(*args, **kwargs)
            except BaseException:
                del pending[mark:]
                raise
        pending = []
        token = _pending.set(pending)
        with transaction.atomic():
            try:
                result = func(*args, **kwargs)
                _append(pending)
            finally:
                _pending.reset(token)  # before commit: on_commit hooks that run actions start their own
        return result

    return action


def record(
    *,
    actor,
    action: str,
    obj=None,
    object_type: str | None = None,
    object_id: str | int | None = None,
    object_repr: str | None = None,
    before: dict | None = None,
    after: dict | None = None,
) -> AuditRecord:
    """One audit record of the action under way; must run inside the action's transaction. Inside an
    `audited` action it is appended (id, time, hash) when the action ends, otherwise at once."""
    if not connection.in_atomic_block:
        raise RuntimeError("audit.record must be called inside the action's transaction")
    require_actor(actor)  # every record names who acted: a user, a service account or a system actor
    if obj is not None:
        object_type = object_type or obj._meta.label_lower
        object_id = obj.pk if object_id is None else object_id
        object_repr = object_repr if object_repr is not None else str(obj)[:200]
    ctx = current()
    entry = AuditRecord(
        actor=actor if getattr(actor, "pk", None) else None,
        actor_name=actor.username,
        action=action,
        object_type=object_type or "",
        object_id=str(object_id if object_id is not None else ""),
        object_repr=object_repr or "",
        before=before,
        after=after,
        request_id=ctx.request_id,
        source=ctx.source,
    )
    pending = _pending.get()
    if pending is not None:
        pending.append(entry)
    else:
        _append([entry])
    return entry


def _append(entries: list[AuditRecord]) -> None:
    """Link `entries` to the end of the chain and insert them; the only place that takes the chain lock."""
    if not entries:
        return
    with connection.cursor() as cur:
        cur.execute("SELECT pg_advisory_xact_lock(%s)", [CHAIN_LOCK_KEY])
        # The id is part of the hash, so take the ids from the sequence first (in order, under the lock).
        cur.execute("SELECT nextval(pg_get_serial_sequence(%s, 'id')) FROM generate_series(1, %s)",
                    [AuditRecord._meta.db_table, len(entries)])
        ids = sorted(row[0] for row in cur.fetchall())
    prev = AuditRecord.objects.order_by("-id").values_list("hash", flat=True).first() or GENESIS_HASH
    now = timezone.now()
    for entry, pk in zip(entries, ids, strict=True):
        entry.pk, entry.timestamp, entry.prev_hash = pk, now, prev
        entry.hash = prev = entry.compute_hash()
    AuditRecord.objects.bulk_create(entries)


@dataclass
class ChainReport:
    ok: bool
    checked: int
    first_bad_id: int | None = None
    reason: str = ""


def verify_chain(progress=None, batch: int = 5000) -> ChainReport:
    """Walk the chain in id order; report the first record whose link or hash is wrong."""
    prev = GENESIS_HASH
    checked = 0
    with transaction.atomic():
        for entry in AuditRecord.objects.order_by("id").iterator(chunk_size=batch):
            if entry.prev_hash != prev:
                return ChainReport(False, checked, entry.pk,
                                   "its prev_hash does not match the previous record's hash "
                                   "(a record before it was removed or altered)")
            if entry.compute_hash() != entry.hash:
                return ChainReport(False, checked, entry.pk,
                                   "its content does not match its hash (the record was altered)")
            prev = entry.hash
            checked += 1
            if progress and checked % batch == 0:
                progress(checked)
    return ChainReport(True, checked)
