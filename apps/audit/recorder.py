"""Write and verify audit records. Actions call `record` inside their own transaction."""

from __future__ import annotations

from dataclasses import dataclass

from django.db import connection, transaction
from django.utils import timezone

from apps.audit.context import current
from apps.audit.models import GENESIS_HASH, AuditRecord

# One advisory lock serialises appends so the chain has a single order.
_CHAIN_LOCK_KEY = 0x5357_4155  # "SWAU"


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
    """Append one audit record; must run inside the action's transaction."""
    if not connection.in_atomic_block:
        raise RuntimeError("audit.record must be called inside the action's transaction")
    if obj is not None:
        object_type = object_type or obj._meta.label_lower
        object_id = obj.pk if object_id is None else object_id
        object_repr = object_repr if object_repr is not None else str(obj)[:200]
    ctx = current()
    with connection.cursor() as cur:
        cur.execute("SELECT pg_advisory_xact_lock(%s)", [_CHAIN_LOCK_KEY])
    last = AuditRecord.objects.order_by("-id").values_list("hash", flat=True).first()
    entry = AuditRecord(
        timestamp=timezone.now(),
        actor=actor if getattr(actor, "pk", None) else None,
        actor_name=getattr(actor, "username", None) or "system",
        action=action,
        object_type=object_type or "",
        object_id=str(object_id if object_id is not None else ""),
        object_repr=object_repr or "",
        before=before,
        after=after,
        request_id=ctx.request_id,
        source=ctx.source,
        prev_hash=last or GENESIS_HASH,
        hash="pending",
    )
    # The id is part of the hash, so take it from the sequence first.
    with connection.cursor() as cur:
        cur.execute("SELECT nextval(pg_get_serial_sequence(%s, 'id'))", [AuditRecord._meta.db_table])
        entry.pk = cur.fetchone()[0]
    entry.hash = entry.compute_hash()
    entry.save(force_insert=True)
    return entry


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
