"""Issue 20, item 1, end to end: three real brokers hold a governed topic of 3 partitions × 2 replicas; a fourth
broker joins; an SRE previews the rebalance on the cluster page and starts it there, and the page follows it to
the end while a producer (min_insync 2: every acknowledgement needs two replicas) and a consumer keep running.
Every acknowledged message is consumed (0 lost), the new broker holds its share (in sync), the placement's epoch
went up once per write, and the audit log names the SRE and the worker. A developer sees no rebalance section."""

from __future__ import annotations

import json
import os

import pytest
from playwright.sync_api import expect

from broker_core.client import Consumer
from broker_core.layout import LAYOUT
from tests.broker.helpers import Received
from tests.integration.conftest import govern, wait_for
from tests.moves.helpers import SteadyProducer
from tests.support.browser import login

pytestmark = pytest.mark.django_db(transaction=True)

SECRET_VAR = "SWITCHYARD_BROKER_CLUSTER_SECRET_FILE"


def placement(cluster, topic: str) -> dict:
    return json.loads(cluster.zk_client.get(cluster.chroot + LAYOUT.placement(topic))[0])


def wait_done(pk: int, timeout: float = 30) -> None:
    from apps.rebalancing.models import Rebalance

    try:
        wait_for(lambda: Rebalance.objects.filter(pk=pk, state="succeeded").exists(), timeout,
                 f"rebalance #{pk} to succeed")
    except AssertionError as exc:
        row = Rebalance.objects.get(pk=pk)
        raise AssertionError(f"{exc}: {row.state} at step {row.position + 1} ({row.phase}): {row.summary} "
                             f"{row.progress} {row.error}") from None


def test_an_added_broker_gets_its_share_while_clients_run_and_nothing_is_lost(
        cluster, people, approved_topic, celery_worker, live_server, page):
    from apps.audit.models import AuditRecord
    from apps.clusters import actions as clusters
    from apps.rebalancing.models import Rebalance
    from tests.transactions.helpers import control_plane_cluster

    secret = cluster.state / "cluster-secret"
    secret.write_text(os.urandom(32).hex())
    secret.chmod(0o600)
    env = {SECRET_VAR: str(secret)}
    brokers = [cluster.broker(env=env) for _ in range(3)]
    cp = clusters.update_cluster(actor=people.admin, cluster=control_plane_cluster(people.admin, cluster),
                                 default_partitions=3, default_replication_factor=2, min_insync=2)
    g = govern(cluster, cp, people, approved_topic)
    name = g.topic.name
    before = placement(cluster, name)
    assert {len(p["replicas"]) for p in before["partitions"]} == {2}

    got = Received()
    consumer = Consumer(name, "shipping", got.handler("c"), **g.consumer).start()
    try:
        with SteadyProducer(name, 100, **g.producer) as producer:
            wait_for(lambda: got.count("c") >= 20, 20, "deliveries before the rebalance")
            new = cluster.broker(env=env)

            login(page, live_server.url, people.sre.username)
            page.goto(f"{live_server.url}/clusters/{cp.name}/")
            section = page.get_by_test_id("rebalance")
            expect(section.get_by_test_id("rebalance-none")).to_be_visible()
            expect(section.get_by_test_id("rebalance-plan-summary")).to_have_text(
                "1 replica move over 4 registered brokers.")
            load = section.locator(f"[data-testid=rebalance-load] tr[data-broker='{new.node_id}']")
            expect(load.locator("[data-figure=before]")).to_have_text("0")
            expect(load.locator("[data-figure=after]")).to_have_text("1")
            section.get_by_test_id("rebalance-start").click()
            expect(page.get_by_test_id("rebalance-state")).to_be_visible()
            wait_done(Rebalance.objects.get().pk)
            # the page refreshes itself while the rebalance runs: no reload by the test
            expect(page.get_by_test_id("rebalance-state")).to_have_text("Succeeded", timeout=10_000)
            expect(page.get_by_test_id("rebalance-progress")).to_have_text("1 of 1")
            expect(page.get_by_test_id("rebalance-steps").locator("[data-figure=state]")).to_have_text(["done"])
            expect(page.get_by_test_id("rebalance-plan-summary")).to_have_text("Balanced: nothing to move.")

            after = len(producer.acked)
            wait_for(lambda: len(producer.acked) >= after + 50, 20, "publishes after the rebalance")
        acked = set(producer.acked)
        assert producer.errors == [], producer.errors[:5]
        wait_for(lambda: acked <= set(got.ids("c")), 30, "every acknowledged message consumed")
    finally:
        consumer.stop()

    rebalance = Rebalance.objects.get()
    [step] = rebalance.steps
    assert (rebalance.state, rebalance.position, step["target"], step["leader"]) == ("succeeded", 1, new.node_id,
                                                                                      False)
    now = placement(cluster, name)
    moved = now["partitions"][step["partition"]]["replicas"]
    assert new.node_id in moved and step["source"] not in moved and len(moved) == 2
    assert moved[0] == before["partitions"][step["partition"]]["replicas"][0], "the leader stayed"
    assert now["epoch"] == before["epoch"] + 2, "one epoch for the add, one for the drop"
    leading = brokers[[b.node_id for b in brokers].index(moved[0])].stats()["topics"][name]["replication"]["leading"]
    assert leading[str(step["partition"])]["followers"][new.node_id]["in_sync"] is True
    records = list(AuditRecord.objects.filter(object_type="rebalancing.rebalance").order_by("id")
                   .values_list("action", "actor_name"))
    assert records == [("rebalance.started", people.sre.username), ("rebalance.step_done", "system:rebalance"),
                       ("rebalance.succeeded", "system:rebalance")]

    page.context.clear_cookies()
    login(page, live_server.url, people.dev.username)
    page.goto(f"{live_server.url}/clusters/{cp.name}/")
    expect(page.get_by_test_id("zk-health")).to_be_visible()
    expect(page.get_by_test_id("rebalance")).to_have_count(0)
