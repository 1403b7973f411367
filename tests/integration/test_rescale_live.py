"""Issue 21 item 2 with real brokers: an ordered topic rescaled through approved lifecycle changes. The control
plane writes the mapping and `/drained/<topic>/v<version>`; the brokers (their drain barrier, broker_core/node/
drain.py) write their markers under it with their own ZooKeeper identity once the group consumed what the old
partitions held; the control plane reads them back: REST and the topic page show what is owed, then the version
drained, and only then does the policy let the merge back through."""

from __future__ import annotations

import json

import pytest

from broker_core.client import Consumer, Message, Producer
from broker_core.layout import LAYOUT
from tests.broker.helpers import Received
from tests.integration.conftest import TOPIC, govern, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def _apply(api_for, people, partitions: int):
    return api_for(people.dev).post("/api/v1/lifecycle-applications/", {
        "operation": "change", "topic": f"{TOPIC}@dev", "changes": {"partitions": partitions}, "reason": "Rescale"},
        format="json")


def _change(api_for, people, partitions: int):
    body = _apply(api_for, people, partitions)
    assert body.status_code == 201, body.content
    approved = api_for(people.lead).post(f"/api/v1/lifecycle-applications/{body.json()['id']}/approve/",
                                         {"comment": "ok"}, format="json")
    assert approved.status_code == 200, approved.content


def test_the_brokers_mark_a_rescale_drained_and_the_control_plane_lets_the_next_one_through(
        cluster, people, approved_topic, celery_worker, api_for, client):
    from apps.clusters import actions as clusters
    from tests.transactions.helpers import control_plane_cluster

    for _ in range(2):
        cluster.broker()
    cp = clusters.update_cluster(actor=people.admin, cluster=control_plane_cluster(people.admin, cluster),
                                 default_partitions=2)
    governed = govern(cluster, cp, people, lambda c: approved_topic(c, ordered=True))

    def mapping():
        return api_for(people.auditor).get(f"/api/v1/topics/{governed.topic.pk}/mapping/").json()["mapping"]

    def placement():
        return json.loads(cluster.zk_client.get(cluster.chroot + LAYOUT.placement(TOPIC))[0])

    with Producer(**governed.producer) as producer:  # owed to group shipping on both old partitions
        producer.send_many(TOPIC, [Message(b"x", key=f"customer-{i}", message_type="paid") for i in range(20)])

    _change(api_for, people, 4)
    wait_for(lambda: placement().get("mapping") == {"version": 1, "partitions": 4, "previous": 2}, 30, "version 1")
    assert mapping()["groups"] == [{"group": "shipping", "drained": [], "owed": [0, 1]}]
    refused = _apply(api_for, people, 2)
    assert refused.status_code == 400 and "group shipping owes old partitions 0, 1" in refused.json()["partitions"][0]

    got = Received()
    with Consumer(TOPIC, "shipping", got.handler("c"), **governed.consumer):
        wait_for(lambda: len(got.ids("c")) == 20, 30, "the 20 messages consumed")
        state = wait_for(lambda: (m := mapping()) and m["drained"] and m, 30, "the brokers to mark version 1 drained")
    assert state["groups"] == [{"group": "shipping", "drained": [0, 1], "owed": []}]
    assert sorted(cluster.zk_client.get_children(cluster.chroot + LAYOUT.drained(TOPIC, 1))) == [
        "0-shipping", "1-shipping"], "written by the brokers leading the old partitions"
    client.force_login(people.auditor)
    page = client.get(f"/topics/{governed.topic.pk}/").content.decode()
    assert 'data-testid="rescale-drained">rescale drained<' in page

    _change(api_for, people, 2)  # the policy reads the markers: drained, so it passes
    wait_for(lambda: placement().get("mapping") == {"version": 2, "partitions": 2, "previous": 4}, 30, "version 2")
    assert len(placement()["partitions"]) == 4
    state = wait_for(lambda: (m := mapping()) and m["drained"] and m, 30, "the brokers to mark version 2 drained")
    assert (state["losing"], state["groups"]) == ([2, 3], [{"group": "shipping", "drained": [2, 3], "owed": []}])
