"""Issue 21 item 2, the control plane's side: a topic's partition count changed by a lifecycle change application
(REST, approval, audit) is pushed by the real Celery worker into the real ZooKeeper as a rescale: a split adds
partitions, a merge keeps them placed, the key mapping's version goes up and `/drained/<topic>/v<version>` is made
for the brokers' markers, recording the groups bound then. An ordered topic's next version is refused by the policy,
and not written by a push, until each of those groups has its markers of the current one (this test writes them,
as the brokers would); a group bound later is not awaited; a topic that is not ordered does not wait. The topic page
and REST show the mapping and the drain progress; a bad count is a field error; the topic's end removes
`/drained/<topic>`."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from apps.audit.models import AuditRecord
from apps.clusters import actions as clusters
from apps.lifecycle import actions as lifecycle
from apps.lifecycle import retirement
from apps.lifecycle.models import LifecycleApplication
from apps.provisioning import actions as provisioning
from apps.provisioning.models import SyncState
from apps.provisioning.zk import Session
from apps.topics import actions as topic_actions
from apps.topics.models import Topic
from broker_core.layout import LAYOUT, encode
from control_plane import actors
from devstack.waiting import wait_for
from tests.governance.conftest import read_node
from tests.governance.lifecycle_helpers import apply, bind

pytestmark = pytest.mark.django_db(transaction=True)

TOPIC = "payments.order-paid"


@pytest.fixture
def placed(celery_worker, people, make_cluster, approved_topic, zk, zk_connect, zk_chroot):
    """placed(ordered) → (topic, binding, root): a topic of 2 partitions on dev-a (2 brokers registered), group
    shipping bound, landed in ZooKeeper."""

    def make(ordered: bool):
        cluster = make_cluster("dev-a", "dev")
        cluster = clusters.update_cluster(actor=people.admin, cluster=cluster, default_partitions=2)
        root = f"{zk_chroot}/dev-a"
        Session(zk_connect, root).ensure_skeleton()
        for node in ("b1", "b2"):  # registered brokers: the placement spreads over them
            zk.create(root + LAYOUT.broker(node), encode({"host": "127.0.0.1", "port": 1}), ephemeral=True)
        topic = approved_topic(cluster, ordered=ordered)
        consumer, _ = topic_actions.create_app(actor=people.consumer, app_id="shipping-worker",
                                               team=people.consumer.teams.get())
        binding = bind(people, topic, consumer)
        wait_for(lambda: read_node(zk, f"{root}/bindings/{TOPIC}/shipping"), what="the binding in ZooKeeper")
        assert len(read_node(zk, root + LAYOUT.placement(TOPIC))["partitions"]) == 2
        return topic, binding, root

    return make


def change_partitions(api_for, people, partitions) -> dict:
    body = apply(api_for, people.dev, operation="change", topic=f"{TOPIC}@dev", changes={"partitions": partitions})
    assert body.status_code == 201, body.content
    approved = api_for(people.lead).post(f"/api/v1/lifecycle-applications/{body.json()['id']}/approve/",
                                         {"comment": "ok"}, format="json")
    assert approved.status_code == 200, approved.content
    return body.json()


def mapping_landed(zk, root, mapping: dict) -> dict:
    return wait_for(lambda: (d := read_node(zk, root + LAYOUT.placement(TOPIC))) and d.get("mapping") == mapping and d,
                    what=f"the placement with mapping {mapping}")


def wait_active(application_id: int) -> None:
    wait_for(lambda: LifecycleApplication.objects.get(pk=application_id).state == "active",
             what="the application to be active")


def marker(zk, root, version: int, partition: int, group: str = "shipping") -> None:
    """What the broker leading `partition` writes once `group` finished it (layout.drain_marker)."""
    zk.create(f"{root}{LAYOUT.drained(TOPIC, version)}/{partition}-{group}", b"{}")


def shown(client, people, topic) -> tuple[str, dict]:
    client.force_login(people.auditor)
    page = client.get(f"/topics/{topic.pk}/").content.decode()
    from rest_framework.test import APIClient

    api = APIClient()
    api.force_authenticate(people.auditor)
    answer = api.get(f"/api/v1/topics/{topic.pk}/mapping/")
    assert answer.status_code == 200, answer.content
    return page, answer.json()["mapping"]


def test_an_ordered_topic_splits_then_merges_only_once_its_groups_drained(placed, people, api_for, zk, client):
    topic, binding, root = placed(ordered=True)

    split = change_partitions(api_for, people, 4)
    doc = mapping_landed(zk, root, {"version": 1, "partitions": 4, "previous": 2})
    assert len(doc["partitions"]) == 4
    assert zk.exists(root + LAYOUT.drained(TOPIC, 1)), "the node the brokers mark version 1's drain under"
    wait_active(split["id"])
    change = AuditRecord.objects.get(action="topic.change")
    assert (change.actor_name, change.before["partitions"], change.after["partitions"]) == ("lead-pay", 2, 4)
    assert Topic.objects.get(pk=topic.pk).partitions == 4

    page, rest = shown(client, people, topic)
    assert "Key mapping version 1: keys map to 4 of 4 placed partitions, before: 2." in page
    assert '<tr data-testid="drain-shipping"><td>shipping</td><td>—</td><td>0, 1</td></tr>' in page
    assert 'data-testid="rescale-draining"' in page
    assert (rest["version"], rest["partitions"], rest["previous"], rest["placed"], rest["drained"]) == (1, 4, 2, 4,
                                                                                                        False)
    assert rest["groups"] == [{"group": "shipping", "drained": [], "owed": [0, 1]}]

    refused = apply(api_for, people.dev, operation="change", topic=f"{TOPIC}@dev", changes={"partitions": 2})
    assert refused.status_code == 400, refused.content
    assert "has not drained on cluster dev-a: group shipping owes old partitions 0, 1" in refused.json()[
        "partitions"][0]
    assert LifecycleApplication.objects.filter(state="pending").count() == 0, "nothing saved"
    marker(zk, root, 1, 0)
    page, rest = shown(client, people, topic)
    assert '<tr data-testid="drain-shipping"><td>shipping</td><td>0</td><td>1</td></tr>' in page
    assert rest["groups"] == [{"group": "shipping", "drained": [0], "owed": [1]}]
    marker(zk, root, 1, 1)

    # a group bound after version 1 was written starts empty: version 1 does not wait for it
    bind(people, topic, binding.app, group="audit")
    wait_for(lambda: read_node(zk, f"{root}/bindings/{TOPIC}/audit"), what="group audit in ZooKeeper")
    page, rest = shown(client, people, topic)
    assert 'data-testid="rescale-drained">rescale drained<' in page
    assert rest["groups"] == [{"group": "shipping", "drained": [0, 1], "owed": []}] and rest["drained"]

    merge = change_partitions(api_for, people, 2)
    doc = mapping_landed(zk, root, {"version": 2, "partitions": 2, "previous": 4})
    assert len(doc["partitions"]) == 4, "merged-away partitions stay placed until they are empty"
    assert read_node(zk, root + LAYOUT.drained(TOPIC, 2)) == {"groups": ["audit", "shipping"]}
    wait_active(merge["id"])
    page, rest = shown(client, people, topic)
    assert "Key mapping version 2: keys map to 2 of 4 placed partitions, before: 4." in page
    assert "none: merged away" in page
    assert (rest["version"], rest["losing"], rest["drained"]) == (2, [2, 3], False)

    # provisioning is the last guard: a count decided without the policy seeing version 2 (two approvals racing;
    # set here in the database directly) is not written while version 2 drains
    Topic.objects.filter(pk=topic.pk).update(partitions=3, revision=F("revision") + 1)
    with transaction.atomic():
        provisioning.schedule_on_holders(topic, [("topic", topic.pk)])
    state = wait_for(lambda: (s := SyncState.objects.get(kind="topic", object_id=topic.pk)) and "draining" in s.error
                     and s, what="the push to wait for the drain")
    assert "group audit owes old partitions 2, 3; group shipping owes old partitions 2, 3" in state.error, state.error
    assert read_node(zk, root + LAYOUT.placement(TOPIC))["mapping"]["version"] == 2, "nothing written meanwhile"
    for group in ("shipping", "audit"):
        marker(zk, root, 2, 2, group)
        marker(zk, root, 2, 3, group)
    doc = mapping_landed(zk, root, {"version": 3, "partitions": 3, "previous": 2})
    assert len(doc["partitions"]) == 4
    wait_for(lambda: SyncState.objects.get(kind="topic", object_id=topic.pk).state == "synced",
             what="the topic synced")


def test_a_topic_that_is_not_ordered_rescales_without_waiting_and_its_end_removes_the_drain_nodes(
        placed, people, api_for, zk, client):
    topic, binding, root = placed(ordered=False)
    wait_active(change_partitions(api_for, people, 4)["id"])
    assert read_node(zk, root + LAYOUT.placement(TOPIC))["mapping"] == {"version": 1, "partitions": 4, "previous": 2}
    merge = change_partitions(api_for, people, 2)  # no marker written: nothing to wait for
    doc = mapping_landed(zk, root, {"version": 2, "partitions": 2, "previous": 4})
    assert len(doc["partitions"]) == 4
    wait_active(merge["id"])
    page, rest = shown(client, people, topic)
    assert 'data-testid="key-mapping"' in page and "keys map to 2 of 4 placed partitions, before: 4." in page
    assert 'data-testid="rescale-drain"' not in page, "no drain to show on a topic that is not ordered"
    assert (rest["version"], rest["ordered"], rest["groups"]) == (2, False, [])

    retire = apply(api_for, people.dev, operation="retire", topic=f"{TOPIC}@dev").json()
    api_for(people.lead).post(f"/api/v1/lifecycle-applications/{retire['id']}/approve/", {}, format="json")
    wait_active(retire["id"])
    lifecycle.drop_backlog(actor=people.sre, binding=binding, backlog=0, confirmed=0)
    assert retirement.sweep(actor=actors.RETIREMENT, now=timezone.now() + timedelta(hours=49))["topics_deleted"] == 1
    for path in (LAYOUT.placement(TOPIC), f"{LAYOUT.DRAINED}/{TOPIC}"):
        wait_for(lambda p=path: not zk.exists(root + p), what=f"{path} deleted")


@pytest.mark.parametrize("bad", [0, 65, None, "many"])
def test_a_bad_partition_count_is_a_field_error_and_nothing_is_saved(bad, people, make_cluster, approved_topic,
                                                                     api_for, client, celery_worker):
    topic = approved_topic(make_cluster("dev-a", "dev"))
    # the worker pushes the new topic: done before the test ends (its database is emptied then; a push still
    # writing deadlocked with that once)
    wait_for(lambda: SyncState.objects.filter(kind="topic", object_id=topic.pk, state="synced").exists(),
             what="the topic pushed")
    answer = apply(api_for, people.dev, operation="change", topic=f"{TOPIC}@dev", changes={"partitions": bad})
    assert answer.status_code == 400, answer.content
    assert answer.json() == {"partitions": [f"Give the number of partitions keys map to, a whole number from 1 to "
                                            f"64 (not {bad!r})."]}
    assert not LifecycleApplication.objects.exists()
    if bad is None:
        return  # the form takes an empty count as "unchanged"
    client.force_login(people.dev)
    url = f"/topics/{topic.pk}/change/"
    initial = {k: v for k, v in client.get(url).context["form"].initial.items() if v is not None}
    form = client.post(url, {**initial, "partitions": bad, "reason": "More"})
    assert form.status_code == 400 and list(form.context["form"].errors) == ["partitions"], form.context["form"].errors
    assert not LifecycleApplication.objects.exists() and Topic.objects.get(pk=topic.pk).revision == 1


def test_a_partition_change_of_an_ordered_topic_is_refused_while_zookeeper_cannot_be_read(people, make_cluster,
                                                                                         approved_topic, api_for):
    approved_topic(make_cluster("dev-a", "dev", connect="127.0.0.1:1"), ordered=True)  # nothing answers there
    answer = apply(api_for, people.dev, operation="change", topic=f"{TOPIC}@dev", changes={"partitions": 3})
    assert answer.status_code == 400, answer.content
    assert "cannot be read: the ZooKeeper of cluster dev-a does not answer" in answer.json()["partitions"][0]
    assert not LifecycleApplication.objects.exists()


def test_the_change_form_offers_the_partition_count_and_the_approver_sees_it_change(people, make_cluster,
                                                                                    approved_topic, client):
    topic = approved_topic(make_cluster("dev-a", "dev"))
    client.force_login(people.dev)
    url = f"/topics/{topic.pk}/change/"
    form = client.get(url)
    assert 'name="partitions" value="1"' in form.content.decode()
    initial = {k: v for k, v in form.context["form"].initial.items() if v is not None}
    response = client.post(url, {**initial, "message_types": "created, paid", "partitions": "3", "reason": "More"})
    assert response.status_code == 302, response.context["form"].errors
    application = LifecycleApplication.objects.get()
    assert application.changes == {"partitions": 3}
    client.force_login(people.lead)
    detail = client.get(f"/applications/lifecycle/{application.pk}/").content.decode()
    assert '<td class="before">1</td><td>→</td><td class="after">3</td>' in detail
