"""The audit chain's head anchored outside the database (issue 16, build 4): signed checkpoints, and
`manage.py audit_verify` naming deleted newest records, truncation, a rewritten chain and a forged checkpoint.

The attacks run as the owner of the table (this test process's role), switching the append-only trigger off as
someone with the owner's password would."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection

from apps.audit.checkpoint import history_path, latest_path, read_checkpoints, write_checkpoint
from apps.audit.context import action_context
from apps.audit.models import AuditRecord
from apps.clusters import actions

pytestmark = pytest.mark.django_db(transaction=True)
ROOT = Path(__file__).resolve().parents[2]
TRIGGER = "audit_record_no_update_delete"


@pytest.fixture
def sre(make_user):
    return make_user("sre-1", "sre")


def add_records(actor, n: int, start: int = 0) -> list[AuditRecord]:
    with action_context("cli"):
        for i in range(start, start + n):
            actions.create_cluster(actor=actor, name=f"c{i}-east", environment="dev", region="east",
                                   zk_connect="127.0.0.1:1", zk_chroot=f"/c{i}")
    return list(AuditRecord.objects.order_by("id"))


def as_attacker(*statements: str) -> None:
    with connection.cursor() as cur:
        cur.execute(f"ALTER TABLE audit_auditrecord DISABLE TRIGGER {TRIGGER}")
        for sql in statements:
            cur.execute(sql)
        cur.execute(f"ALTER TABLE audit_auditrecord ENABLE TRIGGER {TRIGGER}")


def verify_fails() -> str:
    with pytest.raises(CommandError) as failure:
        call_command("audit_verify")
    return str(failure.value)


def test_intact_chain_with_checkpoints_passes(sre, capsys):
    records = add_records(sre, 3)
    write_checkpoint("periodic")
    records = add_records(sre, 2, start=3)
    write_checkpoint("periodic")
    call_command("audit_verify")
    out, err = capsys.readouterr()
    assert "5 records verified, 2 checkpoints checked" in out
    assert f"record #{records[-1].pk} matches the checkpoint" in err


def test_checkpoint_is_signed_and_names_the_head(sre):
    records = add_records(sre, 3)
    write_checkpoint("periodic")
    write_checkpoint("periodic")  # the head did not move: the history keeps one line, the latest file is replaced
    lines = history_path().read_text().splitlines()
    assert len(lines) == 1
    stored = json.loads(lines[0])
    assert (stored["head_id"], stored["head_hash"], stored["count"]) == (records[-1].pk, records[-1].hash, 3)
    assert len(stored["sig"]) == 64 and stored["reason"] == "periodic"
    assert json.loads(latest_path().read_text())["head_id"] == records[-1].pk
    assert oct(history_path().stat().st_mode & 0o777) == "0o600"


def test_deleting_the_newest_records_is_found_and_named(sre):
    records = add_records(sre, 5)
    write_checkpoint("periodic")
    as_attacker(f"DELETE FROM audit_auditrecord WHERE id > {records[2].pk}")
    message = verify_fails()
    assert f"records #{records[3].pk}–#{records[4].pk} are missing" in message
    assert f"names record #{records[4].pk} with hash {records[4].hash[:16]}… as the head of 5 records" in message
    assert f"the table ends at #{records[2].pk} (3 records)" in message


def test_truncation_is_found(sre):
    add_records(sre, 4)
    write_checkpoint("export")
    as_attacker("TRUNCATE audit_auditrecord")
    message = verify_fails()
    assert "the audit table is empty" in message and "all 4 records are missing" in message


def test_deleting_the_newest_records_and_appending_again_is_found(sre):
    records = add_records(sre, 4)
    write_checkpoint("periodic")
    as_attacker(f"DELETE FROM audit_auditrecord WHERE id > {records[1].pk}")
    add_records(sre, 1, start=10)  # the chain goes on from record 2: it is whole again
    message = verify_fails()
    assert f"record #{records[3].pk} is missing" in message
    assert "2 records up to" in message


def test_a_rewritten_chain_is_found(sre):
    """Delete record 2 and re-hash everything after it: the chain is whole, the checkpoint is not."""
    records = add_records(sre, 3)
    write_checkpoint("periodic")
    as_attacker(f"DELETE FROM audit_auditrecord WHERE id = {records[1].pk}")
    third = AuditRecord.objects.get(pk=records[2].pk)
    third.prev_hash = records[0].hash
    forged_hash = third.compute_hash()
    as_attacker(f"UPDATE audit_auditrecord SET prev_hash = '{third.prev_hash}', hash = '{forged_hash}' "
                f"WHERE id = {third.pk}")
    message = verify_fails()
    assert "audit chain broken" not in message
    assert f"record #{records[2].pk} does not match the checkpoint" in message
    assert f"the checkpoint says {records[2].hash[:16]}…" in message


def test_a_forged_checkpoint_is_reported_as_tampering(sre):
    records = add_records(sre, 3)
    write_checkpoint("periodic")
    path = history_path()
    stored = json.loads(path.read_text())
    stored["head_id"], stored["count"] = records[0].pk, 1  # as if the table had ended at record 1
    path.write_text(json.dumps(stored) + "\n")
    latest_path().unlink()
    message = verify_fails()
    assert f"{path.name} line 1 has a bad signature" in message
    assert read_checkpoints().valid == []


def test_audit_verify_exits_non_zero_as_a_command(sre, audit_checkpoint_dir):
    """The command as an operator runs it, connected as the runtime role: exit 0 while intact, 1 after the
    newest record is deleted, naming it."""
    records = add_records(sre, 3)
    write_checkpoint("periodic")
    env = {**os.environ, "SWITCHYARD_DB_ROLE": "runtime", "SWITCHYARD_DB_NAME": connection.settings_dict["NAME"],
           "SWITCHYARD_AUDIT_CHECKPOINT_DIR": str(audit_checkpoint_dir)}

    def run(command: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "manage.py", command], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=120)

    intact = run("audit_verify")
    assert intact.returncode == 0, intact.stderr
    assert "3 records verified, 1 checkpoints checked" in intact.stdout
    as_attacker(f"DELETE FROM audit_auditrecord WHERE id = {records[2].pk}")
    for command in ("audit_verify", "verify_audit_chain"):
        broken = run(command)
        assert broken.returncode == 1
        assert f"records #{records[2].pk}–#{records[2].pk} are missing" in broken.stderr


def test_an_export_writes_a_checkpoint(sre, make_user, client):
    records = add_records(sre, 2)
    client.force_login(make_user("audit-1", "auditor"))
    response = client.get("/audit/export.csv")
    assert response.status_code == 200
    b"".join(response.streaming_content)
    (point,) = read_checkpoints().valid
    assert (point.head_id, point.head_hash, point.count, point.reason) == (records[-1].pk, records[-1].hash, 2, "export")


@pytest.mark.django_db  # the data migration's rows (a transactional test's flush removes them)
def test_the_checkpoint_schedule_is_on_by_default():
    from django_celery_beat.models import PeriodicTask

    task = PeriodicTask.objects.get(task="audit.write_checkpoint")
    assert task.enabled and (task.interval.every, task.interval.period) == (30, "seconds")


def test_the_celery_worker_writes_checkpoints_as_the_runtime_role(sre, celery_worker, trace_dirs, settings):
    """The beat task run by the real worker (which connects as the runtime role) into its state folder."""
    from control_plane.celery import app

    records = add_records(sre, 2)
    result = app.send_task("audit.write_checkpoint").get(timeout=60)
    assert result == {"head_id": records[-1].pk, "count": 2}
    settings.SWITCHYARD_AUDIT_CHECKPOINT_DIR = str(trace_dirs["state"] / "audit-checkpoints")
    assert [(p.head_id, p.head_hash) for p in read_checkpoints().valid] == [(records[-1].pk, records[-1].hash)]
