"""An SRE starts a move from the topic's page and follows it on the move's page, which refreshes itself
through every step until the move has succeeded; a developer sees the move but no form and no rollback."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from tests.support.browser import login

pytestmark = pytest.mark.django_db(transaction=True)


def test_sre_starts_a_move_on_the_topic_page_and_follows_it(moving, page, live_server):
    from apps.moves.models import TopicMove

    login(page, live_server.url, moving.people.sre.username)
    page.goto(f"{live_server.url}/topics/{moving.topic.pk}/")
    form = page.get_by_test_id("move-form")
    form.locator("select[name=target]").select_option(moving.cp_b.name)
    form.locator("input[name=dead_letters][value=discard]").check()
    form.locator("input[name=client_follow_s]").fill("1")
    form.get_by_test_id("move-submit").click()
    page.wait_for_url(re.compile(r"/moves/\d+/$"))
    move = TopicMove.objects.get()
    expect(page.get_by_test_id("move-clusters")).to_have_text(f"{moving.cp_a.name} → {moving.cp_b.name}")
    expect(page.get_by_test_id("step-state-checks")).to_have_text("Done")
    expect(page.get_by_test_id("move-rollback")).to_be_visible()
    # the page refreshes itself: no reload by the test
    expect(page.get_by_test_id("move-state")).to_have_text("Succeeded", timeout=90_000)
    expect(page.get_by_test_id("step-state-deprovision")).to_have_text("Done")
    expect(page.get_by_test_id("step-summary-provision")).to_contain_text("objects in ZooKeeper of")
    expect(page.get_by_test_id("drain-figures-drain")).to_contain_text("workers")
    expect(page.get_by_test_id("move-rollback")).to_have_count(0)
    assert TopicMove.objects.get(pk=move.pk).state == "succeeded"

    page.context.clear_cookies()
    login(page, live_server.url, moving.people.dev.username)
    page.goto(f"{live_server.url}/topics/{moving.topic.pk}/")
    expect(page.get_by_test_id("move-panel")).to_contain_text("No move under way")
    expect(page.get_by_test_id("move-form")).to_have_count(0)
    page.goto(f"{live_server.url}/moves/{move.pk}/")
    expect(page.get_by_test_id("move-state")).to_have_text("Succeeded")
