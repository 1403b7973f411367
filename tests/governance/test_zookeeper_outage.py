"""A real ZooKeeper of the test's own is stopped: the approval still commits, the sync state says pending
with the error, and once ZooKeeper is back the worker's retry lands the topic without anyone acting."""

import pytest

from apps.governance.workflow import State
from apps.provisioning.models import SyncState
from apps.topics.models import TopicApplication
from devstack.waiting import wait_for
from tests.support.stack import ports, state_dir

pytestmark = pytest.mark.django_db(transaction=True)

FLAKY_PORT = ports().base + 450


@pytest.fixture
def flaky_zookeeper():
    from devstack.zookeeper import start_zookeeper, stop_zookeeper

    state = state_dir() / "gov-flaky"
    start_zookeeper(state, FLAKY_PORT, name="zk-flaky")
    yield lambda: start_zookeeper(state, FLAKY_PORT, name="zk-flaky"), lambda: stop_zookeeper(state, "zk-flaky")
    stop_zookeeper(state, "zk-flaky")


def test_approval_commits_while_zookeeper_is_down_and_lands_when_it_returns(
        celery_worker, flaky_zookeeper, people, api_for, make_cluster, zk_chroot):
    from tests.governance.conftest import read_node
    from tests.support.stack import control_zk_client

    start, stop = flaky_zookeeper
    make_cluster("dev-a", "dev", connect=f"127.0.0.1:{FLAKY_PORT}")
    stop()

    body = {"name": "payments.order-paid", "team": "payments", "environment": "dev", "cluster": "dev-a",
            "message_types": ["paid"], "expected_peak_mps": 10, "max_message_bytes": 1024, "retention_hours": 24,
            "storage_level": "file", "transactional": False, "ordered": False, "reason": "outage test"}
    created = api_for(people.dev).post("/api/v1/topic-applications/", body, format="json").json()
    response = api_for(people.lead).post(f"/api/v1/topic-applications/{created['id']}/approve/", format="json")
    assert response.status_code == 200 and response.json()["state"] == "approved"

    state = wait_for(lambda: SyncState.objects.filter(kind="topic", attempts__gte=1).first(),
                     what="a failed provisioning attempt")
    assert state.state == "pending" and "did not answer" in state.error and state.landed_revision is None
    assert TopicApplication.objects.get().state == State.PROVISIONING
    topic_id = TopicApplication.objects.get().topic_id
    live = api_for(people.dev).get(f"/api/v1/topics/{topic_id}/sync/").json()
    assert [(s["state"], s["live"]) for s in live] == [("pending", False)]
    assert f"127.0.0.1:{FLAKY_PORT}" in live[0]["error"]

    start()  # nobody touches the platform: the worker's next retry must land it
    wait_for(lambda: TopicApplication.objects.get().state == State.ACTIVE, timeout=60, what="the retry to land")
    state.refresh_from_db()
    assert (state.state, state.landed_revision, state.error) == ("synced", 1, "")
    assert state.attempts >= 2
    client = control_zk_client(f"127.0.0.1:{FLAKY_PORT}", timeout=5)
    client.start(timeout=10)
    try:
        assert read_node(client, f"{zk_chroot}/dev-a/topics/payments.order-paid")["message_types"] == ["paid"]
    finally:
        client.stop()
        client.close()
    live = api_for(people.dev).get(f"/api/v1/topics/{topic_id}/sync/").json()
    assert [(s["state"], s["live"], s["zk_revision"]) for s in live] == [("synced", True, 1)]
