"""The `failed` state: ZooKeeper refusing a write fails the object and the application at once; an ensemble
that never answers fails them after the configured number of attempts. Either way REST and the page say
failed with the error. The retry delay doubles from its base up to its cap."""

import pytest

from apps.audit.models import AuditRecord
from apps.governance.workflow import State
from apps.provisioning.models import SyncState
from apps.topics.models import TopicApplication
from devstack.waiting import wait_for
from tests.governance.conftest import read_node
from tests.support.stack import ports

BODY = {"name": "payments.order-paid", "team": "payments", "environment": "dev", "cluster": "dev-a",
        "message_types": ["paid"], "expected_peak_mps": 10, "max_message_bytes": 1024, "retention_hours": 24,
        "storage_level": "file", "transactional": False, "ordered": False, "reason": "failure test"}
SILENT_PORT = ports().base + 452  # nothing listens here


def apply_and_approve(api_for, people) -> dict:
    created = api_for(people.dev).post("/api/v1/topic-applications/", BODY, format="json").json()
    response = api_for(people.lead).post(f"/api/v1/topic-applications/{created['id']}/approve/", format="json")
    assert response.status_code == 200 and response.json()["state"] == "approved"
    return created


@pytest.mark.django_db(transaction=True)
def test_zookeeper_refusing_the_write_fails_the_application_with_the_error(
        celery_worker, people, api_for, make_cluster, zk, zk_chroot, client):
    from kazoo.security import OPEN_ACL_UNSAFE, make_acl

    make_cluster("dev-a", "dev")
    # The cluster's chroot exists but nobody may create under it: ZooKeeper answers NoAuth to every write.
    zk.ensure_path(zk_chroot)
    zk.create(f"{zk_chroot}/dev-a", b"", acl=[make_acl("world", "anyone", read=True, admin=True)])
    created = apply_and_approve(api_for, people)

    url = f"/api/v1/topic-applications/{created['id']}/"
    body = wait_for(lambda: (b := api_for(people.dev).get(url).json())["state"] == "failed" and b,
                    what="the application to fail")
    sync, route = body["sync"]  # the topic's node and its route node, refused alike
    assert (sync["kind"], sync["state"], sync["attempts"], sync["landed_revision"]) == ("topic", "failed", 1, None)
    assert (route["kind"], route["state"], route["error"]) == ("route", "failed", sync["error"])
    assert sync["error"].startswith("ZooKeeper refused the write: NoAuthError")
    failed = AuditRecord.objects.get(action="topic_application.failed")
    assert (failed.source, failed.after["error"]) == ("task", sync["error"])
    topic_id = TopicApplication.objects.get().topic_id
    live = api_for(people.auditor).get(f"/api/v1/topics/{topic_id}/sync/").json()
    assert [(s["state"], s["live"], s["problem"], s["error"]) for s in live] == [
        ("failed", True, "missing", sync["error"])]

    client.force_login(people.dev)
    page = client.get(f"/applications/topics/{created['id']}/").content.decode()
    assert 'data-testid="state">failed</span>' in page
    assert 'data-testid="sync-topic">failed</span>' in page
    assert "ZooKeeper refused the write: NoAuthError" in page

    # Once ZooKeeper lets the platform write, the sweep's re-drive lands it and the application is active.
    from datetime import timedelta

    from apps.provisioning import provision
    from apps.provisioning.reconcile import stale_units

    zk.set_acls(f"{zk_chroot}/dev-a", OPEN_ACL_UNSAFE)
    cluster = TopicApplication.objects.get().cluster
    provision.provision_objects(cluster.pk, stale_units(cluster, older_than=timedelta(0)))
    assert TopicApplication.objects.get().state == State.ACTIVE
    assert read_node(zk, f"{zk_chroot}/dev-a/topics/payments.order-paid")["revision"] == 1
    assert api_for(people.dev).get(url).json()["sync"][0]["state"] == "synced"


@pytest.mark.django_db
def test_an_unanswering_zookeeper_fails_it_after_the_configured_attempts(people, api_for, make_cluster, settings,
                                                                         monkeypatch):
    from celery.signals import task_retry

    from apps.provisioning.tasks import provision_application

    monkeypatch.setattr(provision_application, "max_retries", 2)  # SWITCHYARD_PROVISION_MAX_ATTEMPTS = 3
    settings.SWITCHYARD_ZK_TIMEOUT = 1
    make_cluster("dev-a", "dev", connect=f"127.0.0.1:{SILENT_PORT}")
    created = apply_and_approve(api_for, people)  # this test's transaction never commits: nothing is queued

    # The real task, run in this process: Celery re-applies it on each retry, counting the retries.
    countdowns = []

    def note(sender=None, einfo=None, **kwargs):
        countdowns.append(einfo.exception.exc.when)  # Celery's Retry, wrapped with its traceback

    task_retry.connect(note, weak=False)
    try:
        result = provision_application.apply(args=["topic", created["id"]])
    finally:
        task_retry.disconnect(note)
    assert result.get() == "failed"
    base, cap = settings.SWITCHYARD_PROVISION_BACKOFF_BASE, settings.SWITCHYARD_PROVISION_BACKOFF_MAX
    assert countdowns == [min(cap, base), min(cap, 2 * base)]
    record = SyncState.objects.get(kind="topic")
    assert (record.state, record.attempts) == ("failed", 3)
    assert record.error.startswith(f"ZooKeeper at 127.0.0.1:{SILENT_PORT} did not answer within 1s")
    body = api_for(people.dev).get(f"/api/v1/topic-applications/{created['id']}/").json()
    assert body["state"] == "failed"
    assert [(s["kind"], s["state"], s["attempts"], s["error"]) for s in body["sync"]] == [
        ("topic", "failed", 3, record.error), ("route", "failed", 3, record.error)]
    states = list(AuditRecord.objects.filter(action__startswith="topic_application.").order_by("id")
                  .values_list("action", flat=True))
    assert states == ["topic_application.create", "topic_application.approve", "topic_application.provisioning",
                      "topic_application.failed"]


def test_retry_backoff_doubles_from_the_base_up_to_the_cap(settings):
    from celery.utils.time import get_exponential_backoff_interval

    from apps.provisioning.tasks import provision_application, provision_objects

    for task in (provision_application, provision_objects):
        assert (task.retry_backoff, task.retry_backoff_max, task.retry_jitter, task.max_retries) == (
            settings.SWITCHYARD_PROVISION_BACKOFF_BASE, settings.SWITCHYARD_PROVISION_BACKOFF_MAX, False,
            settings.SWITCHYARD_PROVISION_MAX_ATTEMPTS - 1)

    def delays(base, cap, retries):  # what Celery waits before retry number r + 1, with these options
        return [get_exponential_backoff_interval(factor=base, retries=r, maximum=cap, full_jitter=False)
                for r in retries]

    assert delays(1, 60, range(9)) == [1, 2, 4, 8, 16, 32, 60, 60, 60]
    assert delays(1, 60, [500]) == [60]
    assert delays(2, 5, range(5)) == [2, 4, 5, 5, 5]
