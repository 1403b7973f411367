"""Real browser (Chromium), real worker, real ZooKeeper: a developer changes a topic through its pre-filled form
(a refused type removal first), the approver finds the change in the inbox with its diff, reads the diff on the
application page, approves, and the new revision lands in ZooKeeper."""

import pytest

from apps.lifecycle.models import LifecycleApplication
from devstack.waiting import wait_for
from tests.governance.conftest import read_node
from tests.governance.test_browser import reload_until
from tests.support.browser import login

pytestmark = pytest.mark.django_db(transaction=True)


def test_change_a_topic_from_the_form_through_the_inbox_to_zookeeper(celery_worker, live_server, page, people,
                                                                      estate, zk, zk_chroot):
    e = estate()
    path = f"{zk_chroot}/dev-a/topics/payments.order-paid"
    wait_for(lambda: read_node(zk, path), what="the topic in ZooKeeper")

    login(page, live_server.url, "dev-pay")
    page.goto(f"{live_server.url}/topics/{e.topic.pk}/")
    page.click("[data-testid=change-topic]")
    assert page.input_value("#id_message_types") == "created, paid"
    assert page.input_value("#id_retention_hours") == "48"
    page.fill("#id_message_types", "created, refunded")  # drops "paid", which binding shipping receives
    page.fill("#id_retention_hours", "96")
    page.fill("#id_reason", "Refunds arrive; keep four days")
    page.click("[data-testid=submit]")
    assert "binding shipping (app shipping-worker" in page.locator("[data-testid=error-message_types]").inner_text()
    assert LifecycleApplication.objects.count() == 0

    page.fill("#id_message_types", "created, paid, refunded")
    page.click("[data-testid=submit]")
    page.wait_for_url("**/applications/lifecycle/*/")
    reference = page.locator("[data-testid=reference]").inner_text()
    assert reference.startswith("C-") and page.locator("[data-testid=state]").inner_text() == "pending"
    assert page.locator("[data-testid=diff-retention_hours]").inner_text().split("\t")[1:] == ["48", "→", "96"]
    assert page.locator("[data-testid=approve]").count() == 0
    page.context.clear_cookies()

    login(page, live_server.url, "lead-pay")
    page.click("[data-testid=nav-approvals]")
    row = page.locator(f"[data-testid=queue-row-{reference}]")
    assert "topic change" in row.inner_text()
    assert row.locator("[data-testid=queue-diff]").inner_text() == (
        "message_types +refunded; retention_hours 48 → 96")
    row.locator("[data-testid=queue-item]").click()
    assert "created, paid, refunded" in page.locator("[data-testid=diff-message_types]").inner_text()
    page.fill("#id_comment", "Fine")
    with page.expect_navigation():  # the approval answers with the application page again
        page.click("[data-testid=approve]")
    reload_until(page, "[data-testid=state]", "active")
    assert page.locator("[data-testid=sync-topic]").inner_text() == "synced"
    node = read_node(zk, path)
    assert (node["revision"], node["message_types"], node["retention_s"]) == (2, ["created", "paid", "refunded"],
                                                                             96 * 3600)
