"""Verify the audit log: the hash chain record by record, and the table against every signed checkpoint of its
head (apps/audit/checkpoint.py), so deleted newest records and truncation are found and named."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import transaction

from apps.audit.checkpoint import Checkpoint, database_name, read_checkpoints
from apps.audit.models import GENESIS_HASH, AuditRecord

STALE_AFTER = timedelta(minutes=5)  # beat writes every 30 s: older than this, it is not running


@dataclass
class Verification:
    records: int = 0
    head_id: int | None = None
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    checkpoints: int = 0

    @property
    def ok(self) -> bool:
        return not self.problems


def verify_audit(progress=None, batch: int = 5000) -> Verification:
    stored = read_checkpoints()
    result = Verification(problems=list(stored.forged), checkpoints=len(stored.valid))
    watch = {p.head_id for p in stored.valid if p.head_id is not None}
    seen: dict[int, tuple[str, int]] = {}  # checkpointed id -> (its hash in the table, its position in the chain)
    prev, broken = GENESIS_HASH, None
    with transaction.atomic():
        for entry in AuditRecord.objects.order_by("id").iterator(chunk_size=batch):
            if broken is None:
                if entry.prev_hash != prev:
                    broken = (entry.pk, "its prev_hash does not match the previous record's hash "
                                        "(a record before it was removed or altered)")
                elif entry.compute_hash() != entry.hash:
                    broken = (entry.pk, "its content does not match its hash (the record was altered)")
            prev = entry.hash
            result.records += 1
            result.head_id = entry.pk
            if entry.pk in watch:
                seen[entry.pk] = (entry.hash, result.records)
            if progress and result.records % batch == 0:
                progress(result.records)
    if broken is not None:
        before = _count_before(broken[0])
        result.problems.append(
            f"audit chain broken at record {broken[0]}: {broken[1]}. {before} records before it are intact; restore "
            f"record {broken[0]} from a backup and investigate who changed the table.")
    result.problems.extend(_compare(stored.valid, seen, result))
    _add_notes(stored.valid, result)
    return result


def _compare(points: list[Checkpoint], seen: dict[int, tuple[str, int]], result: Verification) -> list[str]:
    problems = []
    rewritten = [p for p in points if p.head_id in seen and seen[p.head_id][0] != p.head_hash]
    for point in rewritten[-1:]:
        problems.append(
            f"record #{point.head_id} does not match the checkpoint written {point.when}: its hash is "
            f"{seen[point.head_id][0][:16]}…, the checkpoint says {point.head_hash[:16]}…; the chain up to it was "
            f"rewritten ({len(rewritten)} checkpoint(s) disagree with the table)")
    gone = [p for p in points if p.head_id is not None and p.head_id not in seen]
    if gone:
        newest = gone[-1]
        left = _count_before(newest.head_id + 1)
        lost = newest.count - left
        what = f"the newest checkpoint (written {newest.when}) names record #{newest.head_id} with hash " \
               f"{newest.head_hash[:16]}… as the head of {newest.count} records"
        if result.head_id is None:
            problems.append(f"the audit table is empty, but {what}: all {newest.count} records are missing "
                            "(the table was truncated or emptied)")
        elif result.head_id < newest.head_id:
            first = result.head_id + 1
            span = f"records #{first}–#{newest.head_id}" if lost == newest.head_id - result.head_id \
                else f"{lost} records between #{first} and #{newest.head_id}"
            problems.append(f"{span} are missing: {what}; the table ends at #{result.head_id} "
                            f"({result.records} records)")
        else:
            problems.append(f"record #{newest.head_id} is missing: {what}; the table holds {left} records up to it "
                            f"and goes on to #{result.head_id}, so {lost} records up to #{newest.head_id} were "
                            "deleted and the chain re-linked after them")
        if len(gone) > 1:
            problems.append(f"{len(gone) - 1} older checkpoint(s) name records that are missing too")
    return problems


def _count_before(pk: int) -> int:
    return AuditRecord.objects.filter(pk__lt=pk).count()


def _add_notes(points: list[Checkpoint], result: Verification) -> None:
    if not points:
        result.notes.append(
            f"no checkpoint of database {database_name()} in {settings.SWITCHYARD_AUDIT_CHECKPOINT_DIR} yet: only the "
            "chain was checked, and deleted newest records cannot be told until one is written (Celery beat writes "
            "one every 30 s; an export writes one)")
        return
    newest = max(points, key=lambda p: p.written_at)
    age = datetime.now(UTC) - datetime.fromisoformat(newest.written_at)
    if age > STALE_AFTER:
        result.notes.append(f"the newest checkpoint was written {newest.when}, {int(age.total_seconds() // 60)} "
                            "minutes ago: is Celery beat running? (task audit.write_checkpoint)")
    top = points[-1]
    if result.ok and top.head_id is not None:
        result.notes.append(f"record #{top.head_id} matches the checkpoint written {top.when}")
