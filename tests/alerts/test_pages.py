"""The alerts page's rule forms in a browser: a team's developer sets a threshold on the team's topic; a bad field
is shown on its field and nothing is saved; another team's developer is refused."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_developer_sets_a_threshold_on_the_teams_topic_in_the_form(page, live_server, people, make_cluster,
                                                                     approved_topic):
    from apps.alerts.models import AlertRule
    from apps.audit.models import AuditRecord
    from tests.support.browser import login

    cluster = make_cluster()
    topic = approved_topic(cluster)
    login(page, live_server.url, people.dev.username)
    page.goto(f"{live_server.url}/alerts/")
    page.get_by_test_id("rule-new").click()
    page.fill("#id_name", "order backlog")
    page.select_option("#id_kind", "backlog")
    page.select_option("#id_cluster", cluster.name)
    page.select_option("#id_topic", str(topic.pk))
    page.fill("#id_group", "billing")
    page.fill("#id_threshold", "500")
    page.fill("#id_webhook_urls", "ftp://hooks.example/a")
    page.get_by_test_id("rule-submit").click()
    assert "is not an http(s) URL" in page.get_by_test_id("error-webhook_urls").inner_text()
    assert AlertRule.objects.count() == 0

    page.fill("#id_webhook_urls", "https://hooks.example/a")
    page.get_by_test_id("rule-submit").click()
    page.wait_for_url(f"{live_server.url}/alerts/")
    row = page.get_by_test_id("alert-rules").locator("tbody tr", has_text="order backlog")
    assert "payments.order-paid / billing" in row.inner_text() and "https://hooks.example/a" in row.inner_text()
    rule = AlertRule.objects.get()
    assert (rule.threshold, rule.group, rule.topic_id, rule.webhook_urls) == (500, "billing", topic.pk,
                                                                             ["https://hooks.example/a"])
    assert AuditRecord.objects.filter(action="alert_rule.create", actor_name=people.dev.username).count() == 1

    # another team's developer may not change it
    page.context.clear_cookies()
    login(page, live_server.url, people.consumer.username)
    page.goto(f"{live_server.url}/alerts/rules/{rule.pk}/")
    page.fill("#id_threshold", "1")
    page.get_by_test_id("rule-submit").click()
    assert "not in team payments" in page.locator("form .errorlist").first.inner_text()
    rule.refresh_from_db()
    assert rule.threshold == 500
