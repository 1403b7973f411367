import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection, transaction
from django.db.utils import InternalError
from django.test.utils import CaptureQueriesContext

from apps.audit.context import action_context
from apps.audit.models import AuditLogIsAppendOnly, AuditRecord
from apps.clusters import actions

pytestmark = pytest.mark.django_db
TRIGGER = "audit_record_no_update_delete"


def make_clusters(actor, n=3):
    with action_context("cli"):
        return [actions.create_cluster(actor=actor, name=f"c{i}-east", environment="dev", region="east",
                                       zk_connect="127.0.0.1:1", zk_chroot=f"/c{i}") for i in range(n)]


def test_verify_passes_on_clean_database(capsys):
    call_command("verify_audit_chain")
    assert "0 records verified" in capsys.readouterr().out


def test_verify_passes_after_actions_and_chains_records(make_user, capsys):
    sre = make_user("sre-1", "sre")
    make_clusters(sre)
    records = list(AuditRecord.objects.order_by("id"))
    assert [r.action for r in records] == ["cluster.create"] * 3
    assert records[1].prev_hash == records[0].hash and records[2].prev_hash == records[1].hash
    call_command("verify_audit_chain")
    assert "3 records verified" in capsys.readouterr().out


def test_verify_names_the_record_altered_in_sql(make_user):
    sre = make_user("sre-1", "sre")
    make_clusters(sre)
    target = AuditRecord.objects.order_by("id")[1]
    with connection.cursor() as cur:
        # The owner bypassing the append-only trigger, as an attacker with the owner's rights would.
        cur.execute(f"ALTER TABLE audit_auditrecord DISABLE TRIGGER {TRIGGER}")
        cur.execute("UPDATE audit_auditrecord SET actor_name = 'mallory' WHERE id = %s", [target.pk])
        cur.execute(f"ALTER TABLE audit_auditrecord ENABLE TRIGGER {TRIGGER}")
    with pytest.raises(CommandError, match=rf"broken at record {target.pk}: its content does not match"):
        call_command("verify_audit_chain")


def test_verify_names_the_record_after_a_deleted_one(make_user):
    sre = make_user("sre-1", "sre")
    make_clusters(sre)
    first, second, third = AuditRecord.objects.order_by("id")
    with connection.cursor() as cur:
        cur.execute(f"ALTER TABLE audit_auditrecord DISABLE TRIGGER {TRIGGER}")
        cur.execute("DELETE FROM audit_auditrecord WHERE id = %s", [second.pk])
        cur.execute(f"ALTER TABLE audit_auditrecord ENABLE TRIGGER {TRIGGER}")
    with pytest.raises(CommandError, match=rf"broken at record {third.pk}: its prev_hash"):
        call_command("verify_audit_chain")


def test_audit_records_cannot_be_changed_through_the_orm_or_plain_sql(make_user):
    sre = make_user("sre-1", "sre")
    make_clusters(sre, n=1)
    rec = AuditRecord.objects.get()
    rec.actor_name = "mallory"
    with pytest.raises(AuditLogIsAppendOnly):
        rec.save()
    with pytest.raises(AuditLogIsAppendOnly):
        rec.delete()
    with pytest.raises(AuditLogIsAppendOnly):
        AuditRecord.objects.all().update(actor_name="mallory")
    with pytest.raises(AuditLogIsAppendOnly):
        AuditRecord.objects.all().delete()
    with pytest.raises(InternalError, match="append-only"), transaction.atomic(), connection.cursor() as cur:
        cur.execute("UPDATE audit_auditrecord SET actor_name = 'mallory'")
    assert AuditRecord.objects.get().actor_name == "sre-1"


def test_record_carries_actor_source_and_request_id(make_user):
    sre = make_user("sre-1", "sre")
    with action_context("task", request_id="req-123"):
        actions.create_cluster(actor=sre, name="c-east", environment="dev", region="east",
                               zk_connect="127.0.0.1:1", zk_chroot="/c")
    rec = AuditRecord.objects.get()
    assert (rec.actor_id, rec.actor_name, rec.source, rec.request_id) == (sre.pk, "sre-1", "task", "req-123")
    assert rec.before is None and rec.after["name"] == "c-east"


def test_an_audited_action_appends_its_records_last_and_a_failed_inner_one_takes_its_records_back(make_user):
    from apps.audit.recorder import audited
    from apps.clusters.models import Cluster

    sre = make_user("sre-1", "sre")

    @audited
    def failing(name):
        actions.create_cluster(actor=sre, name=name, environment="dev", region="east", zk_connect="127.0.0.1:1",
                               zk_chroot=f"/{name}")
        raise ValueError("refused")

    @audited
    def outer():
        actions.create_cluster(actor=sre, name="kept", environment="dev", region="east", zk_connect="127.0.0.1:1",
                               zk_chroot="/kept")
        with pytest.raises(ValueError):
            failing("dropped")
        assert AuditRecord.objects.count() == 0  # nothing appended before the action's other writes are done
        Cluster.objects.filter(name="kept").update(description="written after the record was made")

    with CaptureQueriesContext(connection) as queries:
        outer()
    sql = [q["sql"] for q in queries.captured_queries]
    lock = next(i for i, s in enumerate(sql) if "pg_advisory_xact_lock" in s)
    assert any("UPDATE" in s and "clusters_cluster" in s for s in sql[:lock])
    assert not any("clusters_cluster" in s for s in sql[lock:])
    assert [(r.action, r.object_repr) for r in AuditRecord.objects.all()] == [("cluster.create", "kept")]
    assert list(Cluster.objects.values_list("name", flat=True)) == ["kept"]
    call_command("verify_audit_chain")
