"""Lifecycle applications end to end: applied for over REST, approved, pushed by the real Celery worker into the
real ZooKeeper (changed document, retired status, deleted node, inactive app), the application active once the
cluster holds the result, and every step in the audit log; and the end of a retired topic (the sweep)."""

from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone

from apps.audit.models import AuditRecord
from apps.bindings.models import Binding
from apps.lifecycle import actions as lifecycle
from apps.lifecycle import retirement
from apps.lifecycle.models import LifecycleApplication
from apps.provisioning import actions as provisioning
from apps.provisioning.desired import topic_units
from apps.provisioning.models import SyncState
from apps.topics.models import Topic
from control_plane import actors
from control_plane.errors import ActionError
from devstack.waiting import wait_for
from tests.governance.conftest import read_node
from tests.governance.lifecycle_helpers import apply, bind

pytestmark = pytest.mark.django_db(transaction=True)

TOPIC = "payments.order-paid"


@pytest.fixture
def landed(celery_worker, estate, zk, zk_chroot):
    """The estate, landed in dev-a's ZooKeeper; returns (estate, path(rel) → absolute node path)."""
    e = estate()
    root = f"{zk_chroot}/dev-a"
    wait_for(lambda: read_node(zk, f"{root}/grants/{TOPIC}/checkout"), what="the grant in ZooKeeper")
    wait_for(lambda: read_node(zk, f"{root}/bindings/{TOPIC}/shipping"), what="the binding in ZooKeeper")
    return e, lambda rel: f"{root}/{rel}"


def approve(api_for, user, body) -> dict:
    response = api_for(user).post(f"/api/v1/lifecycle-applications/{body['id']}/approve/", {"comment": "ok"},
                                  format="json")
    assert response.status_code == 200, response.content
    return response.json()


def wait_active(application_id: int) -> None:
    wait_for(lambda: LifecycleApplication.objects.get(pk=application_id).state == "active",
             what="the application to be active")


def trail(application_id: int) -> list[str]:
    application = LifecycleApplication.objects.get(pk=application_id)
    return list(AuditRecord.objects.filter(object_type="lifecycle.lifecycleapplication",
                                           object_id=str(application.pk)).order_by("id")
                .values_list("action", flat=True))


def test_a_topic_change_lands_in_zookeeper_as_a_new_revision(landed, people, api_for, zk):
    e, node = landed
    body = apply(api_for, people.dev, operation="change", topic=f"{TOPIC}@dev",
                 changes={"message_types": ["created", "paid", "refunded"], "retention_hours": 96,
                          "max_message_bytes": 16384}).json()
    approved = approve(api_for, people.lead, body)
    assert approved["applied_revision"] == 2
    doc = wait_for(lambda: (d := read_node(zk, node(f"topics/{TOPIC}"))) and d["revision"] == 2 and d,
                   what="revision 2 of the topic")
    assert (doc["message_types"], doc["retention_s"], doc["max_message_bytes"]) == (
        ["created", "paid", "refunded"], 96 * 3600, 16384)
    wait_active(body["id"])
    assert trail(body["id"]) == ["lifecycle_application.create", "lifecycle_application.approve",
                                 "lifecycle_application.active"]
    change = AuditRecord.objects.get(action="topic.change")
    assert (change.actor_name, change.before["message_types"], change.after["application"]) == (
        "lead-pay", ["created", "paid"], body["reference"])
    live = api_for(people.auditor).get(f"/api/v1/lifecycle-applications/{body['id']}/").json()
    assert [(s["kind"], s["state"], s["landed_revision"]) for s in live["sync"]] == [("topic", "synced", 2)]


def test_a_binding_change_lands_in_zookeeper(landed, people, api_for, zk):
    e, node = landed
    body = apply(api_for, people.consumer, operation="change", binding=e.binding.pk,
                 changes={"selector_kind": "wildcard", "selector_pattern": "*", "mode": "broadcast",
                          "delivery_limit": 9, "ttl_s": 600, "backoff_initial_ms": 100, "backoff_max_ms": 1000,
                          "backoff_multiplier": 3.0, "max_in_flight": 64}).json()
    assert len(body["diff"]) == 9
    approve(api_for, people.lead, body)
    doc = wait_for(lambda: (d := read_node(zk, node(f"bindings/{TOPIC}/shipping"))) and d["revision"] == 2 and d,
                   what="revision 2 of the binding")
    assert doc == {"topic": TOPIC, "group": "shipping", "app_id": "shipping-worker",
                   "selector": {"kind": "wildcard", "pattern": "*"}, "mode": "broadcast", "delivery_limit": 9,
                   "ttl_s": 600, "backoff": {"initial_ms": 100, "max_ms": 1000, "multiplier": 3.0},
                   "max_in_flight": 64, "revision": 2}
    wait_active(body["id"])


def test_removing_a_binding_and_revoking_a_grant_delete_their_nodes(landed, people, api_for, zk):
    e, node = landed
    removal = apply(api_for, people.consumer, operation="remove", binding=e.binding.pk).json()
    revocation = apply(api_for, people.dev, operation="revoke", grant=e.grant.pk).json()
    approve(api_for, people.lead, removal)
    approve(api_for, people.lead, revocation)
    for rel in (f"bindings/{TOPIC}/shipping", f"grants/{TOPIC}/checkout", "apps/shipping-worker", "apps/checkout"):
        wait_for(lambda r=rel: read_node(zk, node(r)) is None, what=f"{rel} deleted")
    assert read_node(zk, node(f"topics/{TOPIC}"))["revision"] == 1  # the topic stays
    wait_active(removal["id"])
    wait_active(revocation["id"])
    assert set(AuditRecord.objects.filter(action__in=["binding.remove", "grant.revoke", "binding.deprovisioned",
                                                      "grant.deprovisioned"]).values_list("action", flat=True)) == {
        "binding.remove", "grant.revoke", "binding.deprovisioned", "grant.deprovisioned"}


def test_deactivating_an_app_writes_it_inactive(landed, people, api_for, zk):
    e, node = landed
    body = apply(api_for, people.consumer, operation="deactivate", app="shipping-worker").json()
    approve(api_for, people.lead_log, body)
    doc = wait_for(lambda: (d := read_node(zk, node("apps/shipping-worker"))) and d["revision"] == 2 and d,
                   what="the app's revision 2")
    assert doc["active"] is False
    wait_active(body["id"])
    assert AuditRecord.objects.get(action="app.deactivate").after == {
        "active": False, "revision": 2, "application": body["reference"]}


def test_a_retired_topic_drains_then_goes(landed, people, api_for, zk):
    e, node = landed
    body = apply(api_for, people.dev, operation="retire", topic=f"{TOPIC}@dev").json()
    approve(api_for, people.lead, body)
    doc = wait_for(lambda: (d := read_node(zk, node(f"topics/{TOPIC}"))) and d["revision"] == 2 and d,
                   what="the retired topic's document")
    assert doc["status"] == "retired"
    wait_active(body["id"])

    # its binding stays while the brokers' backlog cannot be read (no broker runs on dev-a here)
    later = timezone.now() + timedelta(hours=49)
    summary = retirement.sweep(actor=actors.RETIREMENT, now=later)
    assert summary == {"topics": 1, "bindings_retired": 0, "topics_deleted": 0, "unread": [TOPIC]}
    assert Topic.objects.get(pk=e.topic.pk).status == "retired"
    assert read_node(zk, node(f"bindings/{TOPIC}/shipping")) is not None

    # an SRE drops it (the backlog figure comes from the brokers; here none holds anything)
    lifecycle.drop_backlog(actor=people.sre, binding=e.binding, backlog=0, confirmed=0)
    with pytest.raises(ActionError):  # retention not passed yet
        lifecycle.delete_topic(actor=actors.RETIREMENT, topic=e.topic)
    assert retirement.sweep(actor=actors.RETIREMENT)["topics_deleted"] == 0
    assert retirement.sweep(actor=actors.RETIREMENT, now=later)["topics_deleted"] == 1
    topic = Topic.objects.get(pk=e.topic.pk)
    assert (topic.status, topic.grants.get().status) == ("deleted", "retired")
    for rel in (f"topics/{TOPIC}", f"routes/{TOPIC}", f"bindings/{TOPIC}", f"grants/{TOPIC}", "apps/checkout",
                "apps/shipping-worker"):
        wait_for(lambda r=rel: not zk.exists(node(r)), what=f"{rel} deleted")
    deleted = AuditRecord.objects.get(action="topic.delete")
    assert (deleted.actor_name, deleted.after["grants_retired"]) == ("system:retirement", ["checkout"])
    dropped = AuditRecord.objects.get(action="binding.drop_backlog")
    assert (dropped.actor_name, dropped.after["backlog"]) == ("sre-1", 0)


def test_a_group_bound_again_keeps_its_node_when_the_removed_binding_is_pushed_again(landed, people, api_for, zk):
    e, node = landed
    removal = apply(api_for, people.consumer, operation="remove", binding=e.binding.pk).json()
    approve(api_for, people.lead, removal)
    wait_active(removal["id"])
    again = bind(people, e.topic, e.consumer)  # the same group, a new binding (the removed one's row stays)
    path = node(f"bindings/{TOPIC}/shipping")
    wait_for(lambda: read_node(zk, path) and SyncState.objects.filter(kind="binding", object_id=again.pk,
                                                                      state="synced").exists(),
             what="the new binding in ZooKeeper")
    attempts = SyncState.objects.get(kind="binding", object_id=again.pk).attempts
    with transaction.atomic():  # every object of the topic again, the removed binding among them (as a move does)
        provisioning.schedule_on_holders(e.topic, topic_units(e.topic))
    wait_for(lambda: SyncState.objects.get(kind="binding", object_id=again.pk).attempts > attempts,
             what="the push of every object of the topic")
    assert read_node(zk, path)["revision"] == 1 and Binding.objects.get(pk=e.binding.pk).status == "retired"
