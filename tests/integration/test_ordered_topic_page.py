"""Issue 21 item 4: an ordered topic's page shows its mapping (1,024 logic partitions → its physical partitions, each
one's leader as placed) and, per group, which consumer holds each partition and under which generation, read live
from the brokers' /stats. The topic, its apps and its binding come through the workflow (`govern`)."""

from __future__ import annotations

import json
import re

import pytest

from broker_core.client import Message, Producer
from broker_core.layout import LAYOUT
from tests.broker.helpers import RawConsumer
from tests.integration.conftest import CONSUMER_APP, TOPIC, govern, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_topic_page_shows_the_mapping_and_who_holds_each_partition(cluster, people, approved_topic,
                                                                       celery_worker, client):
    from apps.clusters import actions as clusters
    from tests.transactions.helpers import control_plane_cluster

    brokers = [cluster.broker() for _ in range(2)]
    cp = clusters.update_cluster(actor=people.admin, cluster=control_plane_cluster(people.admin, cluster),
                                 default_partitions=2)
    governed = govern(cluster, cp, people, lambda c: approved_topic(c, ordered=True))
    placement = json.loads(cluster.zk_client.get(cluster.chroot + LAYOUT.placement(TOPIC))[0])
    leaders = {part["id"]: part["replicas"][0] for part in placement["partitions"]}
    assert sorted(leaders) == [0, 1] and set(leaders.values()) == {b.node_id for b in brokers}
    for b in brokers:
        wait_for(lambda b=b: b.stats()["topics"].get(TOPIC, {}).get("store", {}).get("partitions")
                 == [pid for pid, node in leaders.items() if node == b.node_id], 10, f"{b.node_id} to hold its part")

    consumers = [RawConsumer(f"127.0.0.1:{b.port}", CONSUMER_APP, governed.consumer_secret, TOPIC, "shipping")
                 for b in brokers]
    try:
        for raw in consumers:
            raw.start()
        with Producer(**governed.producer) as producer:  # keys of both partitions
            producer.send_many(TOPIC, [Message(b"x", key=f"customer-{i}", message_type="paid") for i in range(20)])
        wait_for(lambda: all(raw.deliveries for raw in consumers) and sum(len(raw.deliveries) for raw in consumers)
                 == 20, 10, "every key's first message delivered, on both partitions")

        client.force_login(people.auditor)
        page = client.get(f"/topics/{governed.topic.pk}/").content.decode()
    finally:
        for raw in consumers:
            raw.close()
    ordering = page[page.index('data-testid="ordering"'):]
    assert "1024 logic partitions → 2 physical partitions" in ordering
    for pid, leader in leaders.items():
        row = re.search(rf'data-testid="mapped-{pid}"><td>{pid}</td><td>512 \(<var>l</var> % 2 = {pid}\)</td>'
                        rf"<td>([^<]+)</td>", ordering)
        assert row and row.group(1) == leader, f"partition {pid}: leader {leader} expected"
        held = re.search(rf'data-testid="held-shipping-{pid}"><td>{pid}</td><td>(raw#\d+)</td><td>(\d+)</td>'
                         rf"<td>([^<]+)</td>", ordering)
        assert held, f"partition {pid}'s holder in group shipping is shown"
        assert held.group(3) == leader and int(held.group(2)) > 0
    assert re.search(r"Group shipping: \d+ keys? waiting, 20 out, 0 reassignments, 0 stale acks", ordering), ordering[:2000]
