"""Real browser (Chromium), real worker, real ZooKeeper (issue 21 item 2): a developer splits an ordered topic from 2
to 4 partitions through its change form, the approver approves it from the application page, and the topic page
shows the new key mapping and its drain — group shipping owing old partitions 0 and 1 — until the brokers' markers
are there (this test writes them, as the brokers would): then "rescale drained"."""

import pytest

from broker_core.layout import LAYOUT, drain_marker
from tests.governance.test_browser import reload_until
from tests.governance.test_rescale import TOPIC, placed  # noqa: F401  (the fixture)
from tests.support.browser import login

pytestmark = pytest.mark.django_db(transaction=True)


def test_split_an_ordered_topic_from_its_form_and_follow_the_drain_on_its_page(placed, live_server, page, zk):  # noqa: F811
    topic, _, root = placed(ordered=True)
    login(page, live_server.url, "dev-pay")
    page.goto(f"{live_server.url}/topics/{topic.pk}/")
    page.click("[data-testid=change-topic]")
    assert page.input_value("#id_partitions") == "2"
    page.fill("#id_partitions", "4")
    page.fill("#id_reason", "More consumers for the peak")
    page.click("[data-testid=submit]")
    page.wait_for_url("**/applications/lifecycle/*/")
    assert page.locator("[data-testid=diff-partitions]").inner_text().split("\t")[1:] == ["2", "→", "4"]
    page.context.clear_cookies()

    login(page, live_server.url, "lead-pay")
    page.click("[data-testid=nav-approvals]")
    page.locator("[data-testid=queue-item]").first.click()
    page.fill("#id_comment", "Fine")
    with page.expect_navigation():
        page.click("[data-testid=approve]")
    reload_until(page, "[data-testid=state]", "active")

    page.goto(f"{live_server.url}/topics/{topic.pk}/")
    reload_until(page, "[data-testid=rescale-mapping]",
                 "Key mapping version 1: keys map to 4 of 4 placed partitions, before: 2.")
    assert page.locator("[data-testid=rescale-draining]").count() == 1
    row = page.locator("[data-testid=drain-shipping]").inner_text().split("\t")
    assert row == ["shipping", "—", "0, 1"], row

    for old in (0, 1):  # the brokers' markers: group shipping finished what partitions 0 and 1 held
        zk.create(f"{root}{LAYOUT.drained(TOPIC, 1)}/{drain_marker(old, 'shipping')}", b"{}")
    reload_until(page, "[data-testid=rescale-drained]", "rescale drained")
    assert page.locator("[data-testid=drain-shipping]").inner_text().split("\t") == ["shipping", "0, 1", "—"]
