"""Real browser (Chromium), real worker, real ZooKeeper: apply with a mistake, fix it, get approved, see
"synced" as read back from ZooKeeper — for a topic and for a binding; and no approve button for oneself."""

import pytest
from playwright.sync_api import Error as PlaywrightError

from apps.bindings.models import BindingApplication
from apps.topics.models import TopicApplication
from devstack.waiting import wait_for
from tests.governance.conftest import read_node
from tests.support.browser import login

pytestmark = pytest.mark.django_db(transaction=True)


def reload_until(page, selector: str, text: str, timeout: float = 40):
    """Reload the page until `selector` reads `text` (the page reads ZooKeeper on every load)."""

    def check():
        try:
            page.reload()
        except PlaywrightError:  # a navigation the last click started is still replacing the page
            page.wait_for_load_state()
            return False
        return text in page.locator(selector).all_inner_texts()

    wait_for(check, timeout=timeout, interval=0.5, what=f"{selector} to read {text!r}")


def log_out(page, live_server):
    page.context.clear_cookies()


def fill_topic_form(page, name: str):
    page.fill("#id_name", name)
    page.select_option("#id_team", label="payments")
    page.select_option("#id_environment", "dev")
    page.select_option("#id_cluster", label="dev-a (Development, local)")
    page.fill("#id_message_types", "created, paid")
    page.fill("#id_expected_peak_mps", "500")
    page.fill("#id_max_message_bytes", "8192")
    page.fill("#id_retention_hours", "48")
    page.select_option("#id_storage_level", "file")
    page.fill("#id_description", "Orders that were paid")
    page.fill("#id_reason", "Billing needs it")


def approve_from_queue(page, live_server, approver: str, comment: str):
    login(page, live_server.url, approver)
    page.click("[data-testid=nav-approvals]")
    page.click("[data-testid=queue-item]")
    page.fill("#id_comment", comment)
    page.click("[data-testid=approve]")


def test_topic_from_form_to_zookeeper(celery_worker, live_server, page, people, make_cluster, zk, zk_chroot):
    make_cluster("dev-a", "dev")
    login(page, live_server.url, "dev-pay")
    page.click("[data-testid=nav-new-topic]")
    assert "Topic naming" in page.locator("[data-testid=policy-rules]").inner_text()
    fill_topic_form(page, "payments order paid")
    page.click("[data-testid=submit]")
    assert "Use 2–120 letters, digits" in page.locator("[data-testid=error-name]").inner_text()
    assert TopicApplication.objects.count() == 0

    page.fill("#id_name", "orders.paid")  # the right shape, but the naming policy wants the team first
    page.click("[data-testid=submit]")
    assert "start with the owning team's name" in page.locator("[data-testid=error-name]").inner_text()
    assert TopicApplication.objects.count() == 0

    page.fill("#id_name", "payments.order-paid")
    page.click("[data-testid=submit]")
    page.wait_for_url("**/applications/topics/*/")
    assert page.locator("[data-testid=state]").inner_text() == "pending"
    assert page.locator("[data-testid=approve]").count() == 0  # the applicant gets no approve button
    log_out(page, live_server)

    approve_from_queue(page, live_server, "lead-pay", "Looks right")
    page.wait_for_url("**/applications/topics/*/")
    reload_until(page, "[data-testid=sync-topic]", "synced")
    # the node reads back synced a moment before the worker, having written the route too, marks it active
    reload_until(page, "[data-testid=state]", "active")
    assert "read from ZooKeeper just now" in page.locator("[data-testid=sync-row-topic]").inner_text()
    assert read_node(zk, f"{zk_chroot}/dev-a/topics/payments.order-paid") == {
        "name": "payments.order-paid", "message_types": ["created", "paid"], "ordered": False,
        "transactional": False, "retention_s": 172800, "storage": "file", "max_message_bytes": 8192,
        "tx_check": {"delay_s": 6, "interval_s": 30, "max_checks": 15}, "revision": 1}

    page.click("[data-testid=nav-topics]")
    assert "payments.order-paid" in page.locator("[data-testid=topics]").inner_text()


def test_binding_from_form_to_zookeeper(celery_worker, live_server, page, people, make_cluster, approved_topic, zk,
                                        zk_chroot):
    approved_topic(make_cluster("dev-a", "dev"))
    login(page, live_server.url, "dev-log")
    page.goto(f"{live_server.url}/apps/new/")
    page.fill("#id_app_id", "shipping-worker")
    page.select_option("#id_team", label="logistics")
    page.click("main button[type=submit]")
    assert page.locator("[data-testid=secret]").inner_text().startswith("sy_")

    page.click("[data-testid=nav-new-binding]")
    page.select_option("#id_topic", label="payments.order-paid (Development, dev-a)")
    page.select_option("#id_app", label="shipping-worker (logistics)")
    page.fill("#id_group", "Shipping Team")
    page.select_option("#id_selector_kind", "exact")
    page.fill("#id_selector_pattern", "paid")
    page.fill("#id_delivery_limit", "5")
    page.fill("#id_ttl_s", "3600")
    page.fill("#id_reason", "Ship paid orders")
    page.click("[data-testid=submit]")
    assert "lowercase letters" in page.locator("[data-testid=error-group]").inner_text()
    assert BindingApplication.objects.count() == 0

    page.fill("#id_group", "shipping")
    page.click("[data-testid=submit]")
    page.wait_for_url("**/applications/bindings/*/")
    assert page.locator("[data-testid=state]").inner_text() == "pending"
    log_out(page, live_server)

    # the consumer's own lead may not open the topic to them: the topic owner's team decides
    login(page, live_server.url, "lead-log")
    page.click("[data-testid=nav-approvals]")
    assert page.locator("[data-testid=queue-item]").count() == 0
    log_out(page, live_server)

    approve_from_queue(page, live_server, "lead-pay", "Go ahead")
    page.wait_for_url("**/applications/bindings/*/")
    reload_until(page, "[data-testid=sync-binding]", "synced")
    reload_until(page, "[data-testid=sync-app]", "synced")
    node = read_node(zk, f"{zk_chroot}/dev-a/bindings/payments.order-paid/shipping")
    assert (node["app_id"], node["selector"], node["mode"], node["delivery_limit"], node["ttl_s"]) == (
        "shipping-worker", {"kind": "exact", "pattern": "paid"}, "clustering", 5, 3600)
    assert read_node(zk, f"{zk_chroot}/dev-a/apps/shipping-worker")["team"] == "logistics"


def test_no_approve_button_for_ones_own_application_and_none_for_an_auditor(live_server, page, make_user, people,
                                                                           make_cluster, topic_fields):
    from apps.topics.actions import create_topic_application

    lead_dev = make_user("lead-and-dev", "developer", "approver", team="payments")
    application = create_topic_application(actor=lead_dev, **topic_fields(make_cluster("dev-a", "dev")))
    login(page, live_server.url, "lead-and-dev")
    page.click("[data-testid=nav-approvals]")
    assert page.locator("[data-testid=queue-item]").count() == 0
    page.goto(f"{live_server.url}/applications/topics/{application.pk}/")
    assert page.locator("[data-testid=approve]").count() == 0
    assert page.locator("[data-testid=why-not]").inner_text() == "Nobody approves their own application."
    # a hand-made POST (with a valid CSRF token) is refused as well, and changes nothing
    token = page.locator("input[name=csrfmiddlewaretoken]").first.get_attribute("value")
    response = page.request.post(f"{live_server.url}/applications/topics/{application.pk}/approve/",
                                 form={"comment": "me", "csrfmiddlewaretoken": token},
                                 headers={"Referer": page.url})
    assert response.status == 403 and "Nobody approves their own application." in response.text()
    log_out(page, live_server)

    login(page, live_server.url, "audit-1")
    page.goto(f"{live_server.url}/applications/topics/{application.pk}/")
    assert page.locator("[data-testid=state]").inner_text() == "pending"
    assert page.locator("[data-testid=approve], [data-testid=withdraw], [data-testid=reject]").count() == 0
    application.refresh_from_db()
    assert application.state == "pending" and application.decisions.count() == 0
