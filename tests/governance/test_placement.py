"""Placements: a topic held by two clusters while it moves, its route in ZooKeeper and REST, and the nodes a
cluster no longer holds deleted from its ZooKeeper (real Celery worker, real ZooKeeper)."""

import pytest
from django.core.exceptions import PermissionDenied

from apps.audit.models import AuditRecord
from apps.bindings import actions as bindings
from apps.provisioning import placement
from apps.provisioning.models import SyncState
from apps.topics import actions as topics
from control_plane.errors import ActionError
from devstack.waiting import wait_for
from tests.governance.conftest import read_node

pytestmark = pytest.mark.django_db(transaction=True)


def _route(zk, chroot, cluster, topic):
    return read_node(zk, f"{chroot}/{cluster}/routes/{topic}")


@pytest.fixture
def moving(celery_worker, people, make_cluster, approved_topic, zk, zk_chroot):
    """A topic on dev-a with a binding and a grant, landed; dev-b is empty."""
    a, b = make_cluster("dev-a", "dev"), make_cluster("dev-b", "dev")
    topic = approved_topic(a)
    consumer, _ = topics.create_app(actor=people.consumer, app_id="shipping-worker",
                                    team=people.consumer.teams.first())
    binding = bindings.create_binding_application(actor=people.consumer, topic=topic, app=consumer,
                                                  group="shipping", reason="ship")
    bindings.approve_binding_application(actor=people.lead, application=binding, comment="ok")
    producer, _ = topics.create_app(actor=people.dev, app_id="orders-svc", team=topic.team)
    grant = bindings.create_grant_application(actor=people.dev, topic=topic, app=producer, reason="publish")
    bindings.approve_grant_application(actor=people.lead, application=grant, comment="ok")
    name = topic.name
    wait_for(lambda: read_node(zk, f"{zk_chroot}/dev-a/grants/{name}/orders-svc"), what="the grant on dev-a")
    return a, b, topic


def test_a_moving_topic_is_held_by_both_clusters_and_its_route_follows(moving, people, api_for, zk, zk_chroot):
    a, b, topic = moving
    name = topic.name
    assert _route(zk, zk_chroot, "dev-a", name) == {
        "topic": name, "environment": "dev", "version": 1, "produce": "dev-a", "consume": ["dev-a"],
        "clusters": {"dev-a": a.zk_hosts}}

    topic = placement.place(actor=people.sre, topic=topic, cluster=b)
    for path in (f"topics/{name}", f"bindings/{name}/shipping", f"grants/{name}/orders-svc", "apps/orders-svc",
                 "apps/shipping-worker"):
        wait_for(lambda p=path: read_node(zk, f"{zk_chroot}/dev-b/{p}"), what=f"{path} on dev-b")
    wait_for(lambda: (_route(zk, zk_chroot, "dev-b", name) or {}).get("version") == 2, what="route v2 on dev-b")
    assert _route(zk, zk_chroot, "dev-a", name)["consume"] == ["dev-a"]

    placement.place(actor=people.sre, topic=topic, cluster=b, consume=True)
    topic = placement.serve_from(actor=people.sre, topic=topic, cluster=b)
    want = {"topic": name, "environment": "dev", "version": 4, "produce": "dev-b", "consume": ["dev-b", "dev-a"],
            "clusters": {"dev-a": a.zk_hosts, "dev-b": b.zk_hosts}}
    wait_for(lambda: _route(zk, zk_chroot, "dev-a", name) == want, what="route v4 on dev-a")
    wait_for(lambda: _route(zk, zk_chroot, "dev-b", name) == want, what="route v4 on dev-b")

    client = api_for(people.dev)
    answer = client.get(f"/api/v1/routes/{name}/?environment=dev")
    assert answer.status_code == 200
    assert {k: answer.json()[k] for k in want} == want
    assert (answer.json()["cluster"], answer.json()["zk_hosts"]) == ("dev-b", b.zk_hosts)
    etag = answer.headers["ETag"]
    assert client.get(f"/api/v1/routes/{name}/?environment=dev", HTTP_IF_NONE_MATCH=etag).status_code == 304

    placement.unplace(actor=people.sre, topic=topic, cluster=a)
    for path in (f"topics/{name}", f"bindings/{name}/shipping", f"bindings/{name}", f"grants/{name}",
                 f"routes/{name}", "apps/orders-svc", "apps/shipping-worker"):
        wait_for(lambda p=path: zk.exists(f"{zk_chroot}/dev-a/{p}") is None, what=f"{path} gone from dev-a")
    assert read_node(zk, f"{zk_chroot}/dev-b/topics/{name}")["name"] == name
    # the worker records the removals (sync state gone, audit) in one transaction after deleting the nodes
    wait_for(lambda: not SyncState.objects.filter(cluster=a).exists(), what="dev-a's sync state removed")
    assert client.get(f"/api/v1/routes/{name}/?environment=dev", HTTP_IF_NONE_MATCH=etag).status_code == 200
    assert list(AuditRecord.objects.filter(action__in=["topic.placed", "topic.served_from", "topic.unplaced"])
                .order_by("id").values_list("action", "actor_name")) == [
        ("topic.placed", "sre-1"), ("topic.placed", "sre-1"), ("topic.served_from", "sre-1"),
        ("topic.unplaced", "sre-1")]
    deprovisioned = set(AuditRecord.objects.filter(action__endswith=".deprovisioned")
                        .values_list("action", "object_repr"))
    assert ("topic.deprovisioned", f"dev-a:/topics/{name}") in deprovisioned
    assert ("route.deprovisioned", f"dev-a:/routes/{name}") in deprovisioned


def test_placements_refuse_what_cannot_be(moving, people, make_cluster):
    a, b, topic = moving
    prod = make_cluster("prod-a", "prod")
    with pytest.raises(ActionError, match="environment"):
        placement.place(actor=people.sre, topic=topic, cluster=prod)
    with pytest.raises(ActionError, match="already serves"):
        placement.place(actor=people.sre, topic=topic, cluster=a)
    with pytest.raises(ActionError, match="serves topic"):
        placement.unplace(actor=people.sre, topic=topic, cluster=a)
    with pytest.raises(PermissionDenied):
        placement.place(actor=people.dev, topic=topic, cluster=b)
    topic.refresh_from_db()
    assert (topic.route_version, topic.cluster_id, topic.placements.count()) == (1, a.pk, 0)
