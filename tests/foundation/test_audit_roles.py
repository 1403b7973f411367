"""The running control plane's PostgreSQL role cannot erase the audit log (issue 16, build 4).

Each test connects to the test database with a real, separate connection as the runtime role (the role the web
server, the Celery worker and Spark's load use), with the password devstack made for it."""

import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import psycopg2
import pytest
from django.conf import settings
from django.core.management import call_command
from django.db import connection

from apps.audit.context import action_context
from apps.audit.models import AuditRecord
from apps.clusters import actions
from broker_core.secret_source import read_secret

pytestmark = pytest.mark.django_db(transaction=True)
INSUFFICIENT_PRIVILEGE = "42501"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def runtime_db():
    """A connection to the test database as the runtime role (not the owner this test process uses)."""
    db = connection.settings_dict
    assert settings.SWITCHYARD_DB_RUNTIME_USER != db["USER"], "the test process should be the owner"
    conn = psycopg2.connect(host=db["HOST"], port=db["PORT"], dbname=db["NAME"],
                            user=settings.SWITCHYARD_DB_RUNTIME_USER, password=read_secret("SWITCHYARD_DB_PASSWORD"))
    yield conn
    conn.close()


@pytest.fixture
def three_records(make_user):
    sre = make_user("sre-1", "sre")
    with action_context("cli"):
        for i in range(3):
            actions.create_cluster(actor=sre, name=f"c{i}-east", environment="dev", region="east",
                                   zk_connect="127.0.0.1:1", zk_chroot=f"/c{i}")
    return list(AuditRecord.objects.order_by("id"))


def refused(conn, sql: str) -> str:
    """Run sql as the runtime role; return the SQLSTATE of the error it raised (rolled back)."""
    with conn.cursor() as cur:
        try:
            cur.execute(sql)
        except psycopg2.Error as exc:
            conn.rollback()
            return exc.pgcode
    conn.rollback()
    raise AssertionError(f"the runtime role was allowed to run: {sql}")


@pytest.mark.parametrize("sql", [
    "TRUNCATE audit_auditrecord",
    "DELETE FROM audit_auditrecord",
    "UPDATE audit_auditrecord SET actor_name = 'mallory'",
])
def test_runtime_role_cannot_truncate_delete_or_update_the_audit_log(runtime_db, three_records, sql):
    # refused by privileges (42501), not only by the append-only trigger, which the owner could switch off
    assert refused(runtime_db, sql) == INSUFFICIENT_PRIVILEGE
    assert list(AuditRecord.objects.order_by("id").values_list("hash", flat=True)) == [r.hash for r in three_records]


@pytest.mark.parametrize("sql", [
    "ALTER TABLE audit_auditrecord DISABLE TRIGGER audit_record_no_update_delete",
    "DROP TRIGGER audit_record_no_update_delete ON audit_auditrecord",
    "DROP TABLE audit_auditrecord",
    "CREATE TABLE mallory (id int)",
    "SET session_replication_role = replica",
    "INSERT INTO django_migrations (app, name, applied) VALUES ('audit', '9999_x', now())",
])
def test_runtime_role_has_no_ddl_and_cannot_switch_the_guard_off(runtime_db, three_records, sql):
    assert refused(runtime_db, sql) == INSUFFICIENT_PRIVILEGE


def test_runtime_role_is_neither_superuser_nor_owner(runtime_db):
    with runtime_db.cursor() as cur:
        cur.execute("SELECT rolsuper, rolcreatedb, rolcreaterole, rolbypassrls FROM pg_roles WHERE rolname = current_user")
        assert cur.fetchone() == (False, False, False, False)
        cur.execute("SELECT tableowner = current_user FROM pg_tables WHERE tablename = 'audit_auditrecord'")
        assert cur.fetchone() == (False,)
        cur.execute("SELECT " + ", ".join(f"has_table_privilege('audit_auditrecord', '{p}')"
                                         for p in ("INSERT", "SELECT", "UPDATE", "DELETE", "TRUNCATE")))
        assert cur.fetchone() == (True, True, False, False, False)


def test_runtime_role_appends_to_the_chain_and_reads_it(runtime_db, three_records, capsys):
    """What the recorder does, as the runtime role: the chain lock, an id from the sequence, INSERT, SELECT."""
    head = three_records[-1]
    with runtime_db.cursor() as cur:
        cur.execute("SELECT pg_advisory_xact_lock(%s)", [0x5357_4155])
        cur.execute("SELECT nextval(pg_get_serial_sequence('audit_auditrecord', 'id'))")
        entry = AuditRecord(pk=cur.fetchone()[0], timestamp=datetime.now(UTC), actor_name="worker",
                            action="test.append", object_type="test", object_id="1", object_repr="", before=None,
                            after={"n": 1}, request_id="r1", source="task", prev_hash=head.hash)
        entry.hash = entry.compute_hash()
        cur.execute("INSERT INTO audit_auditrecord (id, timestamp, actor_name, action, object_type, object_id, "
                    "object_repr, after, request_id, source, prev_hash, hash) "
                    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                    [entry.pk, entry.timestamp, entry.actor_name, entry.action, entry.object_type, entry.object_id,
                     entry.object_repr, '{"n": 1}', entry.request_id, entry.source, entry.prev_hash, entry.hash])
        runtime_db.commit()
        cur.execute("SELECT id, hash FROM audit_auditrecord ORDER BY id DESC LIMIT 1")
        assert cur.fetchone() == (entry.pk, entry.hash)
    call_command("audit_verify")
    assert "4 records verified" in capsys.readouterr().out


def test_runtime_role_keeps_ordinary_dml_elsewhere(runtime_db, three_records):
    with runtime_db.cursor() as cur:
        cur.execute("UPDATE clusters_cluster SET region = 'west' WHERE name = 'c0-east'")
        assert cur.rowcount == 1
        cur.execute("DELETE FROM clusters_cluster WHERE name = 'c1-east'")
        assert cur.rowcount == 1
        # what Spark's load does with rows it upserts
        cur.execute("CREATE TEMPORARY TABLE load_rows (LIKE tracing_message) ON COMMIT DROP")
    runtime_db.rollback()
    assert refused(runtime_db, "TRUNCATE clusters_cluster") == INSUFFICIENT_PRIVILEGE


def test_migrate_as_the_runtime_role_is_refused_with_what_to_do():
    env = {**os.environ, "SWITCHYARD_DB_ROLE": "runtime", "SWITCHYARD_DB_NAME": connection.settings_dict["NAME"]}
    result = subprocess.run([sys.executable, "manage.py", "migrate", "--noinput"], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 1
    assert "migrate connects as the runtime role" in result.stderr
    assert "SWITCHYARD_DB_ROLE=owner ./manage.py migrate" in result.stderr
