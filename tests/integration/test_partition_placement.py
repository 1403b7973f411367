"""Issue 20, item 1, end to end: a topic approved on a cluster whose default is 3 partitions is placed by the
control plane (its Celery worker's push) over the brokers registered in ZooKeeper; the brokers hold the
partitions placed on them, the SDK sends each batch to its partition's leader and a consumer gets everything."""

from __future__ import annotations

import json
import re
from collections import Counter

import pytest

from broker_core.client import Consumer, Message, Producer
from broker_core.layout import LAYOUT
from tests.broker.helpers import Received
from tests.integration.conftest import CONSUMER_APP, PRODUCER_APP, binding_fields, wait_active, wait_for
from tests.support.browser import login

pytestmark = pytest.mark.django_db(transaction=True)


def under_replicated_metric(cluster_name: str) -> float:
    from django.test import Client

    from tests.support.stack import monitoring_token

    body = Client().get("/metrics", HTTP_AUTHORIZATION=f"Bearer {monitoring_token()}").content.decode()
    found = re.search(rf'^switchyard_under_replicated_partitions{{cluster="{re.escape(cluster_name)}"}} (\S+)$',
                      body, re.M)
    assert found, f"no under-replicated figure for {cluster_name} in /metrics:\n{body}"
    return float(found.group(1))


def test_an_approved_topic_is_placed_on_the_registered_brokers_and_serves_from_every_leader(
        cluster, people, approved_topic, celery_worker, live_server, page):
    from apps.accounts.models import Team
    from apps.bindings import actions as bindings
    from apps.clusters import actions as clusters
    from apps.topics import actions as topics
    from apps.topics.models import Topic, TopicApplication
    from tests.transactions.helpers import control_plane_cluster

    brokers = [cluster.broker() for _ in range(3)]
    cp = control_plane_cluster(people.admin, cluster)
    refused = None
    try:
        clusters.update_cluster(actor=people.admin, cluster=cp, default_partitions=65)
    except Exception as exc:  # noqa: BLE001  (the validation error is what is checked)
        refused = exc
    assert refused is not None and "default_partitions" in str(refused)
    cp = clusters.update_cluster(actor=people.admin, cluster=cp, default_partitions=3)
    topic = approved_topic(cp)
    wait_active(TopicApplication.objects.get(topic=topic), "the topic")

    data, _ = cluster.zk_client.get(cluster.chroot + LAYOUT.placement(topic.name))
    placement = json.loads(data)
    leaders = {part["id"]: part["replicas"][0] for part in placement["partitions"]}
    assert sorted(leaders) == [0, 1, 2] and placement["epoch"] == 1
    assert Counter(leaders.values()) == {b.node_id: 1 for b in brokers}, "one partition led by each broker"
    doc = json.loads(cluster.zk_client.get(cluster.chroot + LAYOUT.topic(topic.name))[0])
    assert (doc["partitions"], doc["replication_factor"]) == (3, 1)
    meta = json.loads(cluster.zk_client.get(cluster.chroot + LAYOUT.META)[0])
    assert (meta["layout_version"], meta["default_partitions"], meta["min_insync"]) == (3, 3, 1)

    # an app granted to publish and one bound to consume, through the workflow as the `governed` fixture does
    producer_app, producer_secret = topics.create_app(actor=people.dev, app_id=PRODUCER_APP,
                                                      team=Team.objects.get(name="payments"))
    consumer_app, consumer_secret = topics.create_app(actor=people.consumer, app_id=CONSUMER_APP,
                                                      team=Team.objects.get(name="logistics"))
    grant = bindings.create_grant_application(actor=people.dev, topic=topic, app=producer_app, reason="publish")
    bindings.approve_grant_application(actor=people.lead, application=grant)
    binding = bindings.create_binding_application(actor=people.consumer, **{**binding_fields(), "topic": topic,
                                                                            "app": consumer_app})
    bindings.approve_binding_application(actor=people.lead, application=binding)
    wait_active(grant, "the grant")
    wait_active(binding, "the binding")

    with Producer(**cluster.client_kwargs(app=PRODUCER_APP, secret=producer_secret)) as producer:
        sent = []
        for _ in range(9):
            sent += producer.send_many(topic.name, [Message(b"x", message_type="paid") for _ in range(10)])
        assert next(iter(producer.stats().values()))["not_leader"] == 0
    published = {b.node_id: b.stats()["topics"][topic.name]["published"] for b in brokers}
    assert sum(published.values()) == 90 and all(published.values()), published
    got = Received()
    with Consumer(topic.name, "shipping", got.handler("c"),
                  **cluster.client_kwargs(app=CONSUMER_APP, secret=consumer_secret)):
        wait_for(lambda: set(got.ids("c")) >= set(sent), 20, "every message from the three leaders")
    assert Topic.objects.get(pk=topic.pk).partition_count == 3

    # the cluster page shows each partition's leader, replicas and ISR; a leader gone is a warning there and a
    # figure on /metrics
    login(page, live_server.url, people.sre.username)
    page.goto(f"{live_server.url}/clusters/{cp.name}/")
    rows = page.locator(f"[data-testid=partitions] tr[data-topic='{topic.name}']")
    assert rows.count() == 3 and page.locator("[data-testid=under-replicated-alert]").count() == 0
    for pid, leader in leaders.items():
        row = page.locator(f"[data-testid=partitions] tr[data-topic='{topic.name}'][data-partition='{pid}']")
        assert row.locator("[data-figure=leader]").inner_text() == leader
        assert row.locator("[data-figure=isr]").inner_text() == leader
        assert row.locator("[data-figure=state]").inner_text() == "in sync"
    assert under_replicated_metric(cp.name) == 0
    gone = brokers[1]
    gone.kill()
    wait_for(lambda: not gone.registered(), 20, "the killed broker's registration to expire")
    page.goto(f"{live_server.url}/clusters/{cp.name}/")
    alert = page.locator("[data-testid=under-replicated-alert]")
    assert alert.locator("[data-figure=under_replicated]").inner_text() == "1"
    [lost] = [pid for pid, leader in leaders.items() if leader == gone.node_id]
    row = page.locator(f"[data-testid=partitions] tr[data-partition='{lost}']")
    assert row.locator("[data-figure=state]").inner_text() == "offline"
    assert under_replicated_metric(cp.name) == 1
