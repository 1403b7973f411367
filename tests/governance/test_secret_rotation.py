"""Secret rotation end to end, on a real broker process fed by the real Celery worker.

- With no overlap (`old_secret_valid_for_s: 0`) the old secret works until the rotation is provisioned into
  the cluster's ZooKeeper, then only the new one.
- With an overlap, both work until the deadline chosen at rotation, then only the new one; a wrong secret
  never does. A bad deadline is refused and changes nothing."""

import time

import pytest

from apps.governance.workflow import State
from apps.provisioning.models import SyncState
from broker_core import protocol as p
from broker_core.client import AuthError, Producer
from devstack.waiting import wait_for
from tests.broker.conftest import cluster, zk, zk_hosts  # noqa: F401  (the broker fixtures)
from tests.governance.conftest import read_node

pytestmark = pytest.mark.django_db(transaction=True)


def publish(broker, secret: str):
    """One send on a fresh connection: the broker verifies the secret at hello."""
    with Producer(app_id="checkout", secret=secret, brokers=[broker.address], send_timeout=5) as producer:
        return producer.send("payments.order-paid", b"order 1", message_type="paid")


def refused(broker, secret: str) -> str | None:
    """The broker's auth_failed message for this secret, or None when the secret is accepted."""
    try:
        publish(broker, secret)
    except AuthError as err:
        assert err.code == p.E_AUTH_FAILED
        return err.message
    return None


def granted_checkout(people, api_for, cluster) -> str:  # noqa: F811
    """App `checkout` granted on a topic of a control-plane cluster over the broker test cluster; its secret."""
    from apps.clusters import actions

    cp = actions.create_cluster(actor=people.admin, name="dev-a", environment="dev", region="local",
                                zk_connect=cluster.zk_hosts, zk_chroot=cluster.chroot, storage_level="file")
    body = {"name": "payments.order-paid", "team": "payments", "environment": "dev", "cluster": cp.name,
            "message_types": ["paid"], "expected_peak_mps": 10, "max_message_bytes": 1024, "retention_hours": 24,
            "storage_level": "file", "transactional": False, "ordered": False, "reason": "rotation test"}
    topic = api_for(people.dev).post("/api/v1/topic-applications/", body, format="json").json()
    assert api_for(people.lead).post(f"/api/v1/topic-applications/{topic['id']}/approve/").status_code == 200
    created = api_for(people.dev).post("/api/v1/apps/", {"app_id": "checkout", "team": "payments"}, format="json")
    old_secret = created.json()["secret"]
    grant = api_for(people.dev).post("/api/v1/grant-applications/", {"topic": "payments.order-paid@dev",
                                                                     "app": "checkout", "reason": "publish"},
                                     format="json").json()
    assert api_for(people.lead).post(f"/api/v1/grant-applications/{grant['id']}/approve/").status_code == 200
    wait_for(lambda: api_for(people.dev).get(f"/api/v1/grant-applications/{grant['id']}/").json()["state"]
             == State.ACTIVE, what="the grant (app and grant) to be provisioned")
    return old_secret


def test_old_secret_works_until_the_rotation_lands_then_only_the_new_one(
        paused_worker, people, api_for, cluster):  # noqa: F811
    pause, resume = paused_worker
    old_secret = granted_checkout(people, api_for, cluster)
    broker = cluster.broker()
    assert publish(broker, old_secret)

    pause()  # the rotation commits; its push waits in the queue
    rotated = api_for(people.dev).post("/api/v1/apps/checkout/rotate-secret/", {"old_secret_valid_for_s": 0},
                                       format="json")
    assert rotated.status_code == 200
    new_secret = rotated.json()["secret"]
    assert new_secret != old_secret
    app_node = f"{cluster.chroot}/apps/checkout"
    assert read_node(cluster.zk_client, app_node)["revision"] == 1
    live = api_for(people.dev).get("/api/v1/apps/checkout/sync/").json()
    assert [(s["state"], s["desired_revision"], s["zk_revision"]) for s in live] == [("pending", 2, 1)]
    assert publish(broker, old_secret), "the old secret works while the rotation is not in ZooKeeper"
    assert refused(broker, new_secret) == "wrong secret for app 'checkout'"

    resume()
    wait_for(lambda: read_node(cluster.zk_client, app_node)["revision"] == 2, what="the rotation in ZooKeeper")
    wait_for(lambda: SyncState.objects.get(kind="app").state == "synced", what="the app's sync state")
    message = wait_for(lambda: refused(broker, old_secret), timeout=10, what="the broker to refuse the old secret")
    assert message == "wrong secret for app 'checkout'"
    assert publish(broker, new_secret)
    assert broker.stats()["auth_failures"] == 2
    live = api_for(people.dev).get("/api/v1/apps/checkout/sync/").json()
    assert [(s["state"], s["zk_revision"], s["live"]) for s in live] == [("synced", 2, True)]


def test_with_an_overlap_both_secrets_work_until_the_deadline_then_only_the_new_one(
        celery_worker, people, api_for, cluster):  # noqa: F811
    from apps.audit.models import AuditRecord
    from apps.topics.models import App

    old_secret = granted_checkout(people, api_for, cluster)
    broker = cluster.broker()
    assert publish(broker, old_secret)

    for bad in (-1, 7 * 24 * 3600 + 1, "soon", 1.5):
        response = api_for(people.dev).post("/api/v1/apps/checkout/rotate-secret/", {"old_secret_valid_for_s": bad},
                                            format="json")
        assert response.status_code == 400 and "old_secret_valid_for_s" in response.json(), response.content
    assert App.objects.get(app_id="checkout").revision == 1 and not AuditRecord.objects.filter(
        action="app.rotate_secret").exists()

    overlap_s = 8
    rotated = api_for(people.dev).post("/api/v1/apps/checkout/rotate-secret/", {"old_secret_valid_for_s": overlap_s},
                                       format="json")
    assert rotated.status_code == 200, rotated.content
    new_secret = rotated.json()["secret"]
    deadline = App.objects.get(app_id="checkout").previous_secret_valid_until.timestamp()
    app_node = f"{cluster.chroot}/apps/checkout"
    wait_for(lambda: read_node(cluster.zk_client, app_node)["revision"] == 2, what="the rotation in ZooKeeper")
    wait_for(lambda: refused(broker, new_secret) is None, timeout=10, what="the broker to accept the new secret")
    assert time.time() < deadline, "the checks below need the overlap still running"
    assert refused(broker, old_secret) is None, "the old secret works until its deadline"
    assert refused(broker, "sy_" + "x" * 43) == "wrong secret for app 'checkout'"

    message = wait_for(lambda: refused(broker, old_secret), timeout=overlap_s + 10,
                       what="the broker to refuse the old secret after its deadline")
    assert message == "wrong secret for app 'checkout'" and time.time() >= deadline
    assert refused(broker, new_secret) is None
