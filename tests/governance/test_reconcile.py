"""Drift: znodes changed, deleted or added by hand are reported with a diff and restored by --repair."""

import io
import json

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from apps.audit.models import AuditRecord
from apps.provisioning.models import ReconcileRun, SyncState
from tests.governance.conftest import read_node

pytestmark = pytest.mark.django_db

TOPIC_DOC = {"name": "payments.order-paid", "message_types": ["created", "paid"], "ordered": False,
             "transactional": False, "retention_s": 172800, "storage": "file", "max_message_bytes": 8192,
             "tx_check": {"delay_s": 6, "interval_s": 30, "max_checks": 15}, "revision": 1}
BINDING_DOC = {"topic": "payments.order-paid", "group": "shipping", "app_id": "shipping-worker",
               "selector": {"kind": "wildcard", "pattern": "*"}, "mode": "clustering", "delivery_limit": 16,
               "ttl_s": 86400, "backoff": {"initial_ms": 1000, "max_ms": 60000, "multiplier": 2.0},
               "max_in_flight": 32, "revision": 1}


@pytest.fixture
def provisioned(people, make_cluster, approved_topic, zk_chroot):
    """A topic and a binding approved through the actions and pushed by the provisioning code itself."""
    from apps.bindings import actions as binding_actions
    from apps.provisioning import provision
    from apps.topics.actions import create_app

    cluster = make_cluster("dev-a", "dev")
    topic = approved_topic(cluster)
    app, _ = create_app(actor=people.consumer, app_id="shipping-worker", team=people.consumer.teams.get())
    application = binding_actions.create_binding_application(actor=people.consumer, topic=topic, app=app,
                                                             group="shipping", reason="ship")
    application = binding_actions.approve_binding_application(actor=people.lead, application=application)
    assert provision.provision_application("topic", topic.application.pk) == "active"
    assert provision.provision_application("binding", application.pk) == "active"
    return cluster, f"{zk_chroot}/dev-a"


def reconcile(*args) -> str:
    out = io.StringIO()
    call_command("reconcile", "--cluster", "dev-a", *args, stdout=out)
    return out.getvalue()


def test_clean_cluster_has_no_drift(provisioned):
    output = reconcile()
    assert "5 objects checked" in output  # /meta, the topic, its route, the binding, the consumer app
    assert "drift: 0 missing, 0 unexpected, 0 different" in output and "no drift" in output


def test_hand_changes_are_reported_with_a_diff_and_repaired(provisioned, zk, people, api_for):
    cluster, root = provisioned
    changed = {**BINDING_DOC, "mode": "broadcast", "ttl_s": 5}
    zk.set(f"{root}/bindings/payments.order-paid/shipping", json.dumps(changed).encode())
    zk.delete(f"{root}/topics/payments.order-paid")
    zk.create(f"{root}/bindings/payments.order-paid/rogue", b'{"group": "rogue"}')

    output = reconcile()
    assert "drift: 1 missing, 1 unexpected, 1 different" in output
    assert "  missing    /topics/payments.order-paid" in output
    assert "  different  /bindings/payments.order-paid/shipping" in output
    assert '      mode: wanted "clustering", ZooKeeper has "broadcast"' in output
    assert "      ttl_s: wanted 86400, ZooKeeper has 5" in output
    assert "  unexpected /bindings/payments.order-paid/rogue" in output
    assert "run again with --repair to fix" in output
    # nothing was touched by a report
    assert read_node(zk, f"{root}/topics/payments.order-paid") is None

    states = {s.kind: s for s in SyncState.objects.filter(cluster=cluster)}
    assert (states["topic"].state, states["topic"].problem) == ("drifted", "missing")
    assert (states["binding"].state, states["binding"].problem) == ("drifted", "different")
    assert states["binding"].diff == {"mode": {"desired": "clustering", "actual": "broadcast"},
                                      "ttl_s": {"desired": 86400, "actual": 5}}
    assert states["app"].state == "synced"

    # the same, over REST, for an auditor
    runs = api_for(people.auditor).get("/api/v1/reconcile-runs/?cluster=dev-a&drift=true").json()["results"]
    assert [(i["path"], i["problem"]) for i in runs[0]["items"]] == [
        ("/topics/payments.order-paid", "missing"), ("/bindings/payments.order-paid/shipping", "different"),
        ("/bindings/payments.order-paid/rogue", "unexpected")]
    binding_id = states["binding"].object_id
    live = api_for(people.consumer).get(f"/api/v1/bindings/{binding_id}/sync/").json()
    assert [(s["state"], s["problem"], s["diff"]["mode"]) for s in live] == [
        ("drifted", "different", {"desired": "clustering", "actual": "broadcast"})]

    before = AuditRecord.objects.count()
    output = reconcile("--repair")
    assert "repaired 3 of 3" in output
    assert read_node(zk, f"{root}/topics/payments.order-paid") == TOPIC_DOC
    assert read_node(zk, f"{root}/bindings/payments.order-paid/shipping") == BINDING_DOC
    assert read_node(zk, f"{root}/bindings/payments.order-paid/rogue") is None
    repairs = AuditRecord.objects.filter(action="zookeeper.repair").order_by("id")
    assert AuditRecord.objects.count() == before + 3 and repairs.count() == 3
    by_path = {r.after["path"]: r for r in repairs}
    assert by_path["/bindings/payments.order-paid/shipping"].before["data"] == changed
    assert by_path["/bindings/payments.order-paid/shipping"].after["data"] == BINDING_DOC
    assert by_path["/bindings/payments.order-paid/rogue"].after["data"] is None
    assert {r.source for r in repairs} == {"cli"}
    assert set(SyncState.objects.filter(cluster=cluster).values_list("state", flat=True)) == {"synced"}
    assert "no drift" in reconcile()


def test_reconcile_command_refuses_unknown_and_unreachable_clusters(make_cluster):
    with pytest.raises(CommandError, match="no cluster named 'nope'"):
        call_command("reconcile", "--cluster", "nope")
    make_cluster("dev-a", "dev", connect="127.0.0.1:1")
    with pytest.raises(CommandError, match="ZooKeeper of dev-a is unreachable"):
        call_command("reconcile", "--cluster", "dev-a", stdout=io.StringIO())
    run = ReconcileRun.objects.get()
    assert not run.reachable and "127.0.0.1:1" in run.error


def test_only_an_sre_reconciles_or_repairs_over_rest(provisioned, zk, people, api_for):
    cluster, root = provisioned
    zk.delete(f"{root}/apps/shipping-worker")
    assert api_for(people.dev).post("/api/v1/reconcile-runs/", {"cluster": "dev-a", "repair": True},
                                    format="json").status_code == 403
    assert read_node(zk, f"{root}/apps/shipping-worker") is None
    run = api_for(people.sre).post("/api/v1/reconcile-runs/", {"cluster": "dev-a", "repair": True},
                                   format="json").json()
    assert (run["missing"], run["repaired"], run["requested_by"], run["source"]) == (1, 1, "sre-1", "api")
    assert read_node(zk, f"{root}/apps/shipping-worker")["app_id"] == "shipping-worker"
    repair = AuditRecord.objects.get(action="zookeeper.repair")
    assert (repair.actor_name, repair.object_type) == ("sre-1", "topics.app")
    bad = api_for(people.sre).post("/api/v1/reconcile-runs/", {"cluster": "nope"}, format="json")
    assert bad.status_code == 400 and "cluster" in bad.json()


def test_the_periodic_reconcile_is_a_beat_task_editable_live(people, api_for):
    from django_celery_beat.models import PeriodicTask

    task = PeriodicTask.objects.get(name="Reconcile every cluster with ZooKeeper")  # from the data migration
    assert (task.task, task.interval.every, task.interval.period, task.enabled) == (
        "provisioning.reconcile_all", 60, "seconds", True)
    assert api_for(people.auditor).get("/api/v1/reconcile-runs/schedule/").json() == {
        "every_seconds": 60, "enabled": True, "repair": False, "last_run_at": None}
    body = {"every_seconds": 15, "enabled": True, "repair": False}
    assert api_for(people.dev).put("/api/v1/reconcile-runs/schedule/", body, format="json").status_code == 403
    bad = api_for(people.sre).put("/api/v1/reconcile-runs/schedule/", {**body, "every_seconds": 1}, format="json")
    assert bad.status_code == 400 and "every_seconds" in bad.json()
    assert api_for(people.sre).put("/api/v1/reconcile-runs/schedule/", body, format="json").status_code == 200
    task.refresh_from_db()
    assert task.interval.every == 15
    record = AuditRecord.objects.get(action="reconcile.schedule")
    assert (record.before["every_seconds"], record.after["every_seconds"]) == (60, 15)


def test_the_periodic_task_records_drift_without_repairing(provisioned, zk):
    from apps.provisioning.tasks import reconcile_all

    cluster, root = provisioned
    zk.delete(f"{root}/topics/payments.order-paid")
    summary = reconcile_all.apply(kwargs={"repair": False}).get()
    assert summary == {"dev-a": {"reachable": True, "drift": 1, "redriven": 0}}
    assert read_node(zk, f"{root}/topics/payments.order-paid") is None
    run = ReconcileRun.objects.get()
    assert (run.source, run.missing, run.repaired) == ("task", 1, 0)


def test_bulk_reader_agrees_with_kazoo_over_several_windows(zk, zk_connect, zk_chroot):
    from apps.provisioning import zkbulk

    zk.ensure_path(f"{zk_chroot}/many")
    created = [zk.create_async(f"{zk_chroot}/many/n{i}", f'{{"n": {i}}}'.encode()) for i in range(1200)]
    [c.get() for c in created]
    zk.set(f"{zk_chroot}/many/n7", b'{"n": "seven"}')
    paths = [f"{zk_chroot}/many/n{i}" for i in range(1200)] + [f"{zk_chroot}/many/absent"]
    found = zkbulk.read_data(zk_connect, paths, timeout=5)
    assert len(found) == 1201 and found[f"{zk_chroot}/many/absent"] is None
    assert found[f"{zk_chroot}/many/n7"] == (b'{"n": "seven"}', 1)
    assert found[f"{zk_chroot}/many/n1199"] == (b'{"n": 1199}', 0)
    assert all(found[p][0] == zk.get(p)[0] for p in paths[::97])


def test_the_sweep_redrives_what_never_landed(people, make_cluster, approved_topic, zk, zk_chroot):
    """An approval whose push was lost (Redis down at commit, say) is found and landed by the sweep's re-drive."""
    from datetime import timedelta

    from apps.provisioning import provision
    from apps.provisioning.reconcile import stale_units

    cluster = make_cluster("dev-a", "dev")
    topic = approved_topic(cluster)
    assert stale_units(cluster, older_than=timedelta(minutes=5)) == []  # too fresh: a push may be under way
    units = stale_units(cluster, older_than=timedelta(0))
    assert units == [("route", topic.pk), ("topic", topic.pk)]
    provision.provision_objects(cluster.pk, units)
    assert read_node(zk, f"{zk_chroot}/dev-a/topics/payments.order-paid")["revision"] == 1
    topic.application.refresh_from_db()
    assert topic.application.state == "active"
    assert SyncState.objects.get(kind="topic").state == "synced"
