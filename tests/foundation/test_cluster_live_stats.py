"""The cluster page and REST show the live brokers of a cluster and their figures per topic and group,
read from real broker processes registered in a real ZooKeeper."""

import json

import pytest

from apps.clusters import actions
from broker_core.client import Consumer, Producer
from broker_core.layout import LAYOUT
from tests.broker.conftest import APP, cluster, wait_for, zk, zk_hosts  # noqa: F401  (the broker fixtures)
from tests.broker.helpers import Received
from tests.support.browser import login

pytestmark = pytest.mark.django_db(transaction=True)


def _traffic(cluster):  # noqa: F811
    """orders: 7 published; billing acks all but the poisoned one (delivery limit 1 → dead-lettered)."""
    cluster.standard("orders")
    cluster.pv.binding("orders", "billing", APP, delivery_limit=1)
    broker = cluster.broker()
    got = Received()
    consumer = Consumer("orders", "billing", got.handler("billing", fail=lambda m: m.business_id == "poison"),
                        **cluster.client_kwargs())
    consumer.start()
    with Producer(**cluster.client_kwargs()) as producer:
        for i in range(6):
            producer.send("orders", b"x" * 100, business_id=f"ok-{i}")
        producer.send("orders", b"bad", business_id="poison")
    wait_for(lambda: broker.group_stats("orders", "billing").get("acked") == 6
             and broker.group_stats("orders", "billing").get("dead_lettered") == 1, 20, "the traffic to settle")
    return broker, consumer


def _register_silent_broker(cluster):  # noqa: F811
    """A second node registered in ZooKeeper whose metrics port answers nothing (a hung broker)."""
    cluster.zk_client.create(cluster.chroot + LAYOUT.broker("hung-b9"), json.dumps(
        {"node_id": "hung-b9", "host": "127.0.0.1", "port": 1, "metrics_port": 1, "started_at": "x",
         "version": "0"}).encode(), ephemeral=True, makepath=True)


def test_cluster_page_shows_live_brokers_and_group_figures(cluster, live_server, page, make_user, settings):  # noqa: F811
    admin = make_user("root", "admin", superuser=True)
    actions.create_cluster(actor=admin, name="live-a", environment="dev", region="local",
                           zk_connect=cluster.zk_hosts, zk_chroot=cluster.chroot, storage_level="file")
    broker, consumer = _traffic(cluster)
    _register_silent_broker(cluster)
    try:
        make_user("sre-live", "sre")
        login(page, live_server.url, "sre-live")
        page.goto(f"{live_server.url}/clusters/live-a/")

        nodes = page.locator("[data-testid=brokers] tbody tr")
        assert sorted(nodes.nth(i).get_attribute("data-node") for i in range(nodes.count())) == sorted(
            [broker.node_id, "hung-b9"])
        hung = page.locator("[data-testid=brokers] tr[data-node='hung-b9']")
        assert "no stats" in hung.inner_text() and "did not answer" in hung.inner_text()

        topic = page.locator("[data-testid=topic-stats] tr[data-topic=orders]")
        assert topic.locator("[data-figure=published]").inner_text() == "7"
        group = page.locator("[data-testid=group-stats] tr[data-topic=orders][data-group=billing]")
        figures = {name: group.locator(f"[data-figure={name}]").inner_text()
                   for name in ("depth", "in_flight", "acked", "dead_lettered", "dead_letter_queue", "consumers")}
        assert figures == {"depth": "0", "in_flight": "0", "acked": "6", "dead_lettered": "1",
                           "dead_letter_queue": "1", "consumers": "1"}
    finally:
        consumer.stop()


def test_cluster_stats_over_rest(cluster, make_user, api_for):  # noqa: F811
    admin = make_user("root", "admin", superuser=True)
    actions.create_cluster(actor=admin, name="live-b", environment="dev", region="local",
                           zk_connect=cluster.zk_hosts, zk_chroot=cluster.chroot, storage_level="file")
    broker, consumer = _traffic(cluster)
    consumer.stop()
    wait_for(lambda: broker.group_stats("orders", "billing").get("consumers") == 0, 10, "the consumer to leave")
    _register_silent_broker(cluster)

    assert api_for(None).get("/api/v1/clusters/live-b/stats/").status_code == 401
    response = api_for(make_user("dev-live", "developer")).get("/api/v1/clusters/live-b/stats/")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["reachable"] is True and body["answered"] == 1
    by_node = {n["node_id"]: n for n in body["nodes"]}
    assert by_node[broker.node_id]["ok"] is True and by_node["hung-b9"]["ok"] is False
    assert "did not answer" in by_node["hung-b9"]["error"]
    assert body["topics"] == [{"topic": "orders", "figures": {"published": 7, "published_bytes": 603,
                                                              "publish_failures": 0, "scheduled": 0}}]
    [group] = body["groups"]
    assert (group["topic"], group["group"], group["mode"], group["bound"]) == ("orders", "billing", "clustering", True)
    assert {k: group["figures"][k] for k in ("acked", "dead_lettered", "dead_letter_queue", "depth", "consumers")} == {
        "acked": 6, "dead_lettered": 1, "dead_letter_queue": 1, "depth": 0, "consumers": 0}


def test_topic_page_shows_the_scheduled_messages_read_live_from_the_brokers(cluster, live_server, page, make_user):  # noqa: F811
    """Delayed messages not due yet are counted on the topic page (and the cluster page), read from the broker now."""
    from apps.accounts.models import Team
    from apps.provisioning.models import SyncState
    from apps.topics.models import Topic

    admin = make_user("root", "admin", superuser=True)
    cp = actions.create_cluster(actor=admin, name="live-c", environment="dev", region="local",
                                zk_connect=cluster.zk_hosts, zk_chroot=cluster.chroot, storage_level="file")
    cluster.standard("orders")
    cluster.pv.binding("orders", "billing", APP)
    cluster.broker()
    team = Team.objects.create(name="scheduling")
    topic = Topic.objects.create(name="orders", team=team, environment="dev", cluster=cp, message_types=["default"],
                                 expected_peak_mps=10, retention_hours=24, storage_level="file")
    SyncState.objects.create(cluster=cp, kind="topic", object_id=topic.pk, path="/topics/orders", desired_revision=1,
                             state="synced", zk_revision=1, landed_revision=1)
    with Producer(**cluster.client_kwargs()) as producer:
        producer.send("orders", b"now")
        for i in range(3):
            producer.send("orders", f"later {i}".encode(), delay=600 + i)

    make_user("sre-live", "sre")
    login(page, live_server.url, "sre-live")
    page.goto(f"{live_server.url}/topics/{topic.pk}/")
    live = page.locator("[data-testid=topic-live]")
    assert live.locator("[data-figure=scheduled]").inner_text() == "3"
    assert live.locator("[data-figure=published]").inner_text() == "1"
    page.goto(f"{live_server.url}/clusters/live-c/")
    row = page.locator("[data-testid=topic-stats] tr[data-topic=orders]")
    assert row.locator("[data-figure=scheduled]").inner_text() == "3"
