"""The audit chain's head, anchored outside the database.

Someone with the owner's rights can delete the newest audit records, or empty the table, and the hash chain that
is left is still whole. So the head of the chain (its last record's id and hash, and the number of records) is
written, signed with an HMAC key PostgreSQL never sees, to files outside the database: every 30 s by Celery beat
and on every export. `manage.py audit_verify` compares the table with every checkpoint (apps/audit/verify.py).

    <SWITCHYARD_AUDIT_CHECKPOINT_DIR>/<database>.jsonl        history: one signed checkpoint a line, appended
                                                              when the head moved, and on every export
    <SWITCHYARD_AUDIT_CHECKPOINT_DIR>/<database>.latest.json  the newest checkpoint, replaced on every write

A file and not ZooKeeper: each cluster has its own ZooKeeper (the control plane has none of its own), and an
append-only file in the state folder is as far from a PostgreSQL credential as a znode, with one writer per host.
"""

from __future__ import annotations

import fcntl
import hashlib
import hmac
import json
import os
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import connection

from apps.audit.models import AuditRecord

FORMAT = 1


@dataclass(frozen=True)
class Checkpoint:
    database: str
    head_id: int | None  # None: the table was empty
    head_hash: str
    count: int
    written_at: str  # ISO 8601, UTC
    reason: str  # periodic | export | manual
    v: int = FORMAT

    def signed(self, key: bytes) -> dict:
        body = asdict(self)
        return {**body, "sig": sign(body, key)}

    @property
    def when(self) -> str:
        return datetime.fromisoformat(self.written_at).strftime("%Y-%m-%d %H:%M:%S UTC")


class CheckpointKeyMissing(ImproperlyConfigured):
    pass


def sign(body: dict, key: bytes) -> str:
    blob = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return hmac.new(key, blob.encode(), hashlib.sha256).hexdigest()


def checkpoint_key() -> bytes:
    key = settings.SWITCHYARD_AUDIT_CHECKPOINT_KEY
    if not key:
        raise CheckpointKeyMissing(
            "no audit checkpoint key: set SWITCHYARD_AUDIT_CHECKPOINT_KEY_FILE to a mode-600 file holding a random "
            "key (./dev up makes state/secrets/audit-checkpoint-key), the same for every control-plane process")
    return key.encode()


def database_name() -> str:
    return connection.settings_dict["NAME"]


def history_path(database: str | None = None) -> Path:
    return Path(settings.SWITCHYARD_AUDIT_CHECKPOINT_DIR) / f"{database or database_name()}.jsonl"


def latest_path(database: str | None = None) -> Path:
    return Path(settings.SWITCHYARD_AUDIT_CHECKPOINT_DIR) / f"{database or database_name()}.latest.json"


def read_head() -> tuple[int | None, str, int]:
    """(id, hash, number of records) of the chain's last committed record, read in one snapshot."""
    table = connection.ops.quote_name(AuditRecord._meta.db_table)
    with connection.cursor() as cur:
        cur.execute(f"SELECT c.n, h.id, h.hash FROM (SELECT count(*) AS n FROM {table}) c "
                    f"LEFT JOIN LATERAL (SELECT id, hash FROM {table} ORDER BY id DESC LIMIT 1) h ON true")
        count, head_id, head_hash = cur.fetchone()
    return head_id, head_hash or "", count


def write_checkpoint(reason: str = "periodic") -> Checkpoint:
    """Sign the chain's head and write it: replace the latest file, append to the history when the head moved
    since its last line (an export always appends)."""
    key = checkpoint_key()
    head_id, head_hash, count = read_head()
    point = Checkpoint(database=database_name(), head_id=head_id, head_hash=head_hash, count=count,
                       written_at=datetime.now(UTC).isoformat(timespec="seconds"), reason=reason)
    folder = Path(settings.SWITCHYARD_AUDIT_CHECKPOINT_DIR)
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    line = json.dumps(point.signed(key), sort_keys=True)
    history = history_path(point.database)
    with open(folder / f"{point.database}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # web and Celery processes write the same files
        last = _last_line(history)
        if reason != "periodic" or last is None or (last.get("head_id"), last.get("head_hash")) != (head_id, head_hash):
            fd = os.open(history, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            with os.fdopen(fd, "a") as out:
                out.write(line + "\n")
                out.flush()
                os.fsync(out.fileno())
        latest = latest_path(point.database)
        tmp = latest.with_name(f".{latest.name}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(line + "\n")
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, latest)
    return point


def _last_line(path: Path) -> dict | None:
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - 4096))
            lines = handle.read().splitlines()
    except FileNotFoundError:
        return None
    try:
        return json.loads(lines[-1]) if lines else None
    except ValueError:
        return None


@dataclass(frozen=True)
class StoredCheckpoints:
    valid: list[Checkpoint]
    forged: list[str]  # where and why a stored line is not a checkpoint this key signed


def read_checkpoints(database: str | None = None) -> StoredCheckpoints:
    """Every checkpoint of the database in the history and the latest file, each signature checked."""
    key = checkpoint_key()
    valid: dict[tuple, Checkpoint] = {}
    forged: list[str] = []
    for path in (history_path(database), latest_path(database)):
        try:
            lines = path.read_text().splitlines()
        except FileNotFoundError:
            continue
        for number, text in enumerate(lines, start=1):
            if not text.strip():
                continue
            where = f"{path.name} line {number}"
            try:
                data = json.loads(text)
                sig = data.pop("sig")
                point = Checkpoint(**data)
            except (ValueError, TypeError, KeyError, AttributeError):
                forged.append(f"{where} is not a checkpoint (unreadable or missing fields)")
                continue
            if not hmac.compare_digest(sign(data, key), str(sig)):
                forged.append(f"{where} has a bad signature (checkpoint of record #{point.head_id} "
                              f"written {point.written_at}): the checkpoint was altered or forged")
                continue
            valid[(point.head_id, point.head_hash, point.written_at, point.reason)] = point
    return StoredCheckpoints(sorted(valid.values(), key=lambda p: (p.head_id or 0, p.written_at)), forged)
