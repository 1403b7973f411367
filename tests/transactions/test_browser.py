"""Real browser: an unresolved prepared message (nobody answered its back-checks) on the governance view
with its alert and checks; an SRE re-drives dead letters through the form and watches the progress page."""

import pytest
from django.db import connection

from apps.transactions.models import PreparedMessage
from broker_core.client import Consumer, Message, Producer
from devstack.waiting import wait_for
from tests.broker.conftest import APP, SECRET, cluster, zk, zk_hosts  # noqa: F401  (the broker fixtures)
from tests.conftest import admin_token
from tests.support.browser import login
from tests.transactions.helpers import (
    control_plane_cluster,
    drive_sweeps,
    prepare_and_die,
    transactional_topic,
)

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def broker_cluster(cluster, people, celery_worker, settings):  # noqa: F811
    settings.SWITCHYARD_BROKER_ADMIN_TOKEN = admin_token()
    cluster.standard("orders")
    cp = control_plane_cluster(people.admin, cluster)
    yield cluster, cp
    connection.close()


def test_unresolved_message_is_shown_and_alerted(broker_cluster, people, page, live_server):
    bc, cp = broker_cluster
    transactional_topic(cp, bc, "orders", delay=1, interval=1, max_checks=2)
    bc.broker(admin_token=admin_token())
    [message_id] = prepare_and_die(bc, "orders", 1, APP, SECRET)
    drive_sweeps(lambda: PreparedMessage.objects.filter(message_id=message_id, state="unresolved").exists(), 60,
                 what="unresolved")

    login(page, live_server.url, people.lead.username)  # the owning team's approver
    page.goto(f"{live_server.url}/transactions/")
    assert "1 prepared message unresolved" in page.get_by_test_id("tx-alert").inner_text()
    row = page.locator('[data-testid=tx-row][data-topic="orders"]')
    assert row.get_by_test_id("tx-unresolved").inner_text() == "1"
    assert row.get_by_test_id("tx-checks").inner_text() == "2"
    page.get_by_test_id("tx-alert-link").click()
    card = page.locator(f'[data-testid=tx-message][data-message-id="{message_id}"]')
    assert card.get_by_test_id("tx-state").inner_text() == "unresolved"
    assert card.get_by_test_id("tx-check").count() == 2


def test_sre_redrives_through_the_form_and_sees_progress(broker_cluster, people, page, live_server):
    bc, cp = broker_cluster
    bc.pv.binding("orders", "billing", APP, delivery_limit=1)
    broker = bc.broker(admin_token=admin_token())
    refusing = {"on": True}
    after = []

    def handle(m):
        if refusing["on"]:
            raise RuntimeError("poison")
        after.append(m.id)

    consumer = Consumer("orders", "billing", handle, **bc.client_kwargs())
    consumer.start()
    try:
        with Producer(**bc.client_kwargs()) as producer:
            ids = producer.send_many("orders", [Message(b"x", message_type="paid") for _ in range(20)])
        wait_for(lambda: broker.group_stats("orders", "billing").get("dead_lettered") == 20, 30, "dead letters")
        refusing["on"] = False

        login(page, live_server.url, people.sre.username)
        page.goto(f"{live_server.url}/redrives/")
        page.select_option("#id_cluster", cp.name)
        page.fill("#id_topic", "orders")
        page.fill("#id_group", "billing")
        page.get_by_test_id("redrive-submit").click()
        page.wait_for_url("**/redrives/*/")
        wait_for(lambda: page.get_by_test_id("redrive-state").inner_text() == "succeeded", 30, interval=0.5,
                 what="the progress page to show succeeded (it refreshes itself)")
        assert page.get_by_test_id("redrive-done").inner_text() == "20"
        wait_for(lambda: sorted(after) == sorted(ids), 30, "re-delivered once each")
    finally:
        consumer.stop()
