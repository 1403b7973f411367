"""Approval → Celery worker (a real process) → the cluster's real ZooKeeper, read back as sync state."""

import time

import pytest

from apps.audit.models import AuditRecord
from apps.governance.workflow import State
from apps.provisioning.models import SyncState
from apps.topics.models import App, TopicApplication
from devstack.waiting import wait_for
from tests.governance.conftest import read_node

pytestmark = pytest.mark.django_db(transaction=True)

TOPIC_BODY = {"name": "payments.order-paid", "team": "payments", "environment": "dev", "cluster": "dev-a",
              "message_types": ["created", "paid"], "expected_peak_mps": 500, "max_message_bytes": 8192,
              "retention_hours": 48, "storage_level": "file", "transactional": True, "ordered": False,
              "reason": "Billing needs it"}


def approve_topic(api_for, people, body=None):
    created = api_for(people.dev).post("/api/v1/topic-applications/", body or TOPIC_BODY, format="json").json()
    response = api_for(people.lead).post(f"/api/v1/topic-applications/{created['id']}/approve/", format="json")
    assert response.status_code == 200, response.content
    return response.json()


def test_approved_topic_lands_in_zookeeper_and_reads_back_synced(celery_worker, people, api_for, make_cluster, zk,
                                                                  zk_chroot):
    make_cluster("dev-a", "dev")
    approved = approve_topic(api_for, people)
    path = f"{zk_chroot}/dev-a/topics/payments.order-paid"
    node = wait_for(lambda: read_node(zk, path), what="the topic's znode")
    assert node == {"name": "payments.order-paid", "message_types": ["created", "paid"], "ordered": False,
                    "transactional": True, "retention_s": 172800, "storage": "file", "max_message_bytes": 8192,
                    "tx_check": {"delay_s": 6, "interval_s": 30, "max_checks": 15}, "revision": 1}
    assert read_node(zk, f"{zk_chroot}/dev-a/meta") == {"layout_version": 3, "cluster": "dev-a", "default_partitions": 1,
                                                        "default_replication_factor": 1, "min_insync": 1}
    wait_for(lambda: TopicApplication.objects.get(pk=approved["id"]).state == State.ACTIVE, what="active")

    topic_id = api_for(people.dev).get("/api/v1/topics/").json()["results"][0]["id"]
    live = api_for(people.auditor).get(f"/api/v1/topics/{topic_id}/sync/").json()
    assert [(s["state"], s["zk_revision"], s["live"], s["path"]) for s in live] == [
        ("synced", 1, True, "/topics/payments.order-paid")]
    recorded = SyncState.objects.get(kind="topic")
    assert (recorded.state, recorded.landed_revision, recorded.error) == ("synced", 1, "")
    provisioned = AuditRecord.objects.get(action="topic.provisioned")
    assert (provisioned.source, provisioned.actor_name, provisioned.after["path"]) == (
        "task", "system:provisioning", "/topics/payments.order-paid")
    states = list(AuditRecord.objects.filter(action__startswith="topic_application.").order_by("id")
                  .values_list("action", flat=True))
    assert states == ["topic_application.create", "topic_application.approve", "topic_application.provisioning",
                      "topic_application.active"]


def test_binding_and_grant_land_with_their_apps(celery_worker, people, api_for, make_cluster, zk, zk_chroot):
    make_cluster("dev-a", "dev")
    approve_topic(api_for, people)
    consumer = api_for(people.consumer).post("/api/v1/apps/", {"app_id": "shipping-worker", "team": "logistics"},
                                             format="json").json()
    body = {"topic": "payments.order-paid@dev", "app": "shipping-worker", "group": "shipping",
            "selector_kind": "regex", "selector_pattern": "paid|created", "mode": "broadcast", "delivery_limit": 5,
            "ttl_s": 3600, "backoff_initial_ms": 500, "backoff_max_ms": 30000, "backoff_multiplier": 1.5,
            "max_in_flight": 16, "reason": "Ship paid orders"}
    application = api_for(people.consumer).post("/api/v1/binding-applications/", body, format="json").json()
    assert api_for(people.lead).post(f"/api/v1/binding-applications/{application['id']}/approve/",
                                     format="json").status_code == 200
    root = f"{zk_chroot}/dev-a"
    node = wait_for(lambda: read_node(zk, f"{root}/bindings/payments.order-paid/shipping"), what="the binding")
    assert node == {"topic": "payments.order-paid", "group": "shipping", "app_id": "shipping-worker",
                    "selector": {"kind": "regex", "pattern": "paid|created"}, "mode": "broadcast",
                    "delivery_limit": 5, "ttl_s": 3600,
                    "backoff": {"initial_ms": 500, "max_ms": 30000, "multiplier": 1.5}, "max_in_flight": 16,
                    "revision": 1}  # no on_failure: block, the default, is left out
    app_node = read_node(zk, f"{root}/apps/shipping-worker")
    assert app_node == {"app_id": "shipping-worker", "team": "logistics", "active": True, "revision": 1,
                        "secrets": [{"hash": App.objects.get(app_id="shipping-worker").secret_hash,
                                     "expires_at": None}]}
    assert consumer["secret"] not in str(app_node)

    api_for(people.dev).post("/api/v1/apps/", {"app_id": "checkout", "team": "payments"}, format="json")
    grant = api_for(people.dev).post("/api/v1/grant-applications/", {"topic": "payments.order-paid@dev",
                                                                     "app": "checkout", "reason": "publish"},
                                     format="json").json()
    api_for(people.lead).post(f"/api/v1/grant-applications/{grant['id']}/approve/", format="json")
    assert wait_for(lambda: read_node(zk, f"{root}/grants/payments.order-paid/checkout"), what="the grant") == {
        "topic": "payments.order-paid", "app_id": "checkout", "produce": True, "revision": 1}
    wait_for(lambda: api_for(people.consumer).get(f"/api/v1/binding-applications/{application['id']}/")
             .json()["state"] == "active", what="the binding application to be active")
    body = api_for(people.consumer).get(f"/api/v1/binding-applications/{application['id']}/").json()
    assert sorted((s["kind"], s["state"], s["landed_revision"]) for s in body["sync"]) == [
        ("app", "synced", 1), ("binding", "synced", 1)]


def test_an_ordered_topics_binding_carries_on_failure_into_zookeeper(celery_worker, people, api_for, make_cluster, zk,
                                                                     zk_chroot):
    """Issue 21 item 1: the binding says what a failing message does to its key; the broker reads it there."""
    from broker_core.cluster.state import Binding

    make_cluster("dev-a", "dev")
    approve_topic(api_for, people, {**TOPIC_BODY, "transactional": False, "ordered": True})
    api_for(people.consumer).post("/api/v1/apps/", {"app_id": "shipping-worker", "team": "logistics"}, format="json")
    body = {"topic": "payments.order-paid@dev", "app": "shipping-worker", "group": "shipping",
            "selector_kind": "wildcard", "selector_pattern": "*", "mode": "clustering", "delivery_limit": 3,
            "ttl_s": 3600, "backoff_initial_ms": 500, "backoff_max_ms": 30000, "backoff_multiplier": 2.0,
            "max_in_flight": 16, "on_failure": "dead_letter", "reason": "Ship paid orders"}
    application = api_for(people.consumer).post("/api/v1/binding-applications/", body, format="json").json()
    assert api_for(people.lead).post(f"/api/v1/binding-applications/{application['id']}/approve/",
                                     format="json").status_code == 200
    path = f"{zk_chroot}/dev-a/bindings/payments.order-paid/shipping"
    node = wait_for(lambda: read_node(zk, path), what="the binding")
    assert (node["on_failure"], node["delivery_limit"]) == ("dead_letter", 3)
    assert Binding.from_doc("payments.order-paid", "shipping", node).on_failure == "dead_letter"  # as a broker does


def test_rotated_secret_replaces_the_hash_in_zookeeper(celery_worker, people, api_for, make_cluster, zk, zk_chroot):
    make_cluster("dev-a", "dev")
    approve_topic(api_for, people)
    api_for(people.dev).post("/api/v1/apps/", {"app_id": "checkout", "team": "payments"}, format="json")
    grant = api_for(people.dev).post("/api/v1/grant-applications/", {"topic": "payments.order-paid@dev",
                                                                     "app": "checkout", "reason": "publish"},
                                     format="json").json()
    api_for(people.lead).post(f"/api/v1/grant-applications/{grant['id']}/approve/", format="json")
    path = f"{zk_chroot}/dev-a/apps/checkout"
    [old] = wait_for(lambda: read_node(zk, path), what="the app node")["secrets"]

    before = int(time.time())
    rotated = api_for(people.dev).post("/api/v1/apps/checkout/rotate-secret/", {"old_secret_valid_for_s": 600},
                                       format="json").json()
    node = wait_for(lambda: (n := read_node(zk, path)) and n["revision"] == 2 and n, what="the new hash")
    new, previous = node["secrets"]
    assert new == {"hash": App.objects.get(app_id="checkout").secret_hash, "expires_at": None}
    assert previous["hash"] == old["hash"] and before + 600 - 1 <= previous["expires_at"] <= int(time.time()) + 600
    from broker_core.auth import verify_secret

    assert verify_secret(rotated["secret"], new["hash"]) and not verify_secret(rotated["secret"], old["hash"])
    live = api_for(people.dev).get("/api/v1/apps/checkout/sync/").json()
    assert [(s["state"], s["zk_revision"]) for s in live] == [("synced", 2)]
