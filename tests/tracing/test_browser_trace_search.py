"""Real browser: a developer traces their team's messages (indexed by the real Spark job from broker trace files)
and is refused another team's; the cluster column and filter; an auditor pages through every match."""

from datetime import timedelta

import pytest

from apps.tracing.models import TracedMessage
from apps.tracing.runner import jdbc_password, jdbc_url
from spark_jobs import trace_index
from tests.support.browser import login
from tests.tracing.conftest import TraceBatch
from tests.tracing.factories import BASE, cluster, message, topic

pytestmark = [pytest.mark.django_db(transaction=True),
              pytest.mark.usefixtures("request_threads_close_their_connections")]


def rows(page) -> list[tuple[str, str]]:
    table = page.locator("[data-testid=trace-results] tbody tr[data-message]")
    return [(table.nth(i).get_attribute("data-message"), table.nth(i).locator("[data-testid=cluster]").inner_text())
            for i in range(table.count())]


def test_a_developer_traces_their_teams_message_and_is_refused_another_teams(live_server, page, make_user, spark,
                                                                             tmp_path):
    prod_a, prod_b = cluster("prod-a", "prod"), cluster("prod-b", "prod")
    topic("orders", "payments", prod_a)
    topic("shipments", "logistics", prod_a)
    brokers = tmp_path / "brokers"
    a = TraceBatch(brokers / "node-1" / "trace", node="node-1", cluster=prod_a.name)
    a.emit("published", "m-ord", 0, topic="orders", app_id="shop", key="cust-1", business_id="order-1")
    a.emit("stored", "m-ord", 1, topic="orders")
    a.emit("published", "m-ship", 5, topic="shipments", app_id="depot", key="cust-1", business_id="order-1")
    a.close()
    b = TraceBatch(brokers / "node-2" / "trace", node="node-2", cluster=prod_b.name)
    b.emit("published", "m-ord-b", 10, topic="orders", app_id="shop", key="cust-1", business_id="order-2")
    b.close()
    result = trace_index.run(spark, [str(brokers)], str(tmp_path / "index"), jdbc_url=jdbc_url(),
                             jdbc_password=jdbc_password(), progress=lambda *a, **k: None)
    assert result["messages"] == 3 and TracedMessage.objects.count() == 3

    make_user("dev-pay", "developer", team="payments")
    login(page, live_server.url, "dev-pay")
    page.click("[data-testid=nav-tracing]")
    assert page.locator("[data-testid=team-scope]").count() == 1
    page.fill("#id_key", "cust-1")
    with page.expect_navigation():
        page.click("[data-testid=trace-search] button[type=submit]")
    assert rows(page) == [("m-ord-b", "prod-b"), ("m-ord", "prod-a")]  # never m-ship, logistics' message
    page.select_option("#id_cluster", "prod-a")
    with page.expect_navigation():
        page.click("[data-testid=trace-search] button[type=submit]")
    assert rows(page) == [("m-ord", "prod-a")]
    page.click("[data-testid=trace-results] a")
    page.wait_for_url(f"{live_server.url}/tracing/messages/m-ord/")
    assert page.locator("[data-testid=final-state]").inner_text() == "stored"

    response = page.goto(f"{live_server.url}/tracing/messages/m-ship/")
    assert response.status == 403
    assert "none of your teams owns" in page.locator("[data-testid=forbidden]").inner_text()
    page.goto(f"{live_server.url}/tracing/?business_id=order-1")
    assert rows(page) == [("m-ord", "prod-a")]


def test_an_auditor_pages_through_every_match_on_the_search_page(live_server, page, make_user):
    cluster("prod-a", "prod")
    made = [(BASE + timedelta(seconds=i // 4), f"m-{i:03d}") for i in range(120)]  # runs of 4 share a time
    for at, message_id in made:
        message(message_id, topic="orders", key="cust-1", at=at)
    message("m-other", topic="orders", key="cust-2")
    expected = [message_id for _, message_id in sorted(made, reverse=True)]

    make_user("aud-web", "auditor")
    login(page, live_server.url, "aud-web")
    page.goto(f"{live_server.url}/tracing/?key=cust-1")
    pages = [[m for m, _ in rows(page)]]
    while page.locator("[data-testid=older]").count():
        with page.expect_navigation():
            page.click("[data-testid=older]")
        pages.append([m for m, _ in rows(page)])
        assert len(pages) < 10, "the older links never end"
    assert [len(p) for p in pages] == [50, 50, 20]
    assert [m for p in pages for m in p] == expected
    # and back: the newer links give the same pages
    with page.expect_navigation():
        page.click("[data-testid=newer]")
    assert [m for m, _ in rows(page)] == pages[1]
    with page.expect_navigation():
        page.click("[data-testid=newer]")
    assert [m for m, _ in rows(page)] == pages[0] and page.locator("[data-testid=newer]").count() == 0
