"""Reading the audit log (issue 19): each record's before → after as a diff of the changed fields (record page,
list, REST), and the sweeps' routine events hidden by default, shown as counted groups, listed with the filter."""

from __future__ import annotations

import pytest
from django.utils import timezone

from apps.audit.diff import changes, summary
from apps.audit.models import AuditRecord
from apps.audit.recorder import verify_chain
from apps.clusters import actions as clusters
from apps.transactions.actions import CheckRound, Outcome, apply_check_outcomes
from apps.transactions.models import PreparedMessage
from control_plane import actors
from tests.governance.lifecycle_helpers import apply
from tests.support.browser import login

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_record_page_list_and_rest_show_a_changed_topics_diff(live_server, page, people, api_for, estate):
    e = estate()
    body = apply(api_for, people.dev, operation="change", topic="payments.order-paid@dev",
                 changes={"message_types": ["created", "paid", "refunded"], "retention_hours": 96}).json()
    approved = api_for(people.lead).post(f"/api/v1/lifecycle-applications/{body['id']}/approve/", format="json")
    assert approved.status_code == 200, approved.content
    record = AuditRecord.objects.get(action="topic.change", object_id=str(e.topic.pk))

    login(page, live_server.url, people.auditor.username)
    page.goto(f"{live_server.url}/audit/?action=topic.change")
    row = page.locator(f"tr[data-record='{record.pk}']")
    summary = row.locator("[data-testid=diff-summary]").inner_text()
    assert summary == (f'application = {body["reference"]}; message_types ["created", "paid"] → '
                       '["created", "paid", "refunded"]; retention_hours 48 → 96; +1 more')
    with page.expect_navigation():
        row.locator("a").first.click()
    diff = page.locator("[data-testid=audit-diff] tbody tr")
    shown = [(diff.nth(i).get_attribute("data-field"), diff.nth(i).get_attribute("data-kind"),
              diff.nth(i).locator("[data-testid=before]").inner_text(),
              diff.nth(i).locator("[data-testid=after]").inner_text()) for i in range(diff.count())]
    assert shown == [
        ("application", "added", "—", body["reference"]),
        ("message_types", "changed", '["created", "paid"]', '["created", "paid", "refunded"] (+refunded)'),
        ("retention_hours", "changed", "48", "96"),
        ("revision", "changed", "1", "2"),
    ]

    # a record of whole snapshots shows only the fields that differ
    cluster = clusters.update_cluster(actor=people.sre, cluster=e.cluster, description="moved to rack 4")
    update = AuditRecord.objects.filter(action="cluster.update").last()
    assert set(update.before) == set(update.after) and len(update.after) > 10  # every field, twice
    listed = api_for(people.auditor).get(f"/api/v1/audit-records/{update.pk}/").json()["changes"]
    assert [(c["field"], c["kind"], c["before"], c["after"]) for c in listed] == [
        ("description", "changed", "", "moved to rack 4"),
        ("updated_at", "changed", update.before["updated_at"], cluster.updated_at.isoformat())]
    rest = api_for(people.auditor).get(f"/api/v1/audit-records/{record.pk}/").json()["changes"]
    assert rest[1] == {"field": "message_types", "kind": "changed", "before": ["created", "paid"],
                       "after": ["created", "paid", "refunded"], "added": ["refunded"], "removed": []}


def backcheck_rounds(cluster, count: int, start: int) -> None:
    """`count` rounds of the back-check sweep, each resolving one prepared message: one tx.resolve record each,
    written by the sweep's own action as its system actor."""
    for i in range(start, start + count):
        prepared = PreparedMessage.objects.create(cluster=cluster, broker="b1", message_id=f"m-{i}", topic="orders",
                                                  app_id="shop", prepared_at=timezone.now())
        outcome = Outcome(prepared.pk, state="committed", checks_done=1, resolution="commit",
                          resolution_source="check")
        assert apply_check_outcomes(actor=actors.TX_BACKCHECK, round=CheckRound(cluster.name, [outcome])) == 1


def test_routine_events_are_hidden_by_default_grouped_with_counts_and_shown_with_the_filter(
        live_server, page, people, api_for):
    east = clusters.create_cluster(actor=people.sre, name="east", environment="dev", region="local",
                                   zk_connect="127.0.0.1:1", zk_chroot="/sy/east")
    backcheck_rounds(east, 7, 0)
    first = clusters.update_cluster(actor=people.sre, cluster=east, description="first")
    backcheck_rounds(east, 3, 7)
    clusters.update_cluster(actor=people.sre, cluster=first, description="second")
    backcheck_rounds(east, 2, 10)
    assert AuditRecord.objects.filter(action="tx.resolve", actor_name="system:tx-backcheck").count() == 12
    assert verify_chain().ok  # reading changes nothing of what is recorded

    api = api_for(people.auditor)
    listed = api.get("/api/v1/audit-records/").json()["results"]
    assert [r["action"] for r in listed] == ["cluster.update", "cluster.update", "cluster.create"]
    shown = api.get("/api/v1/audit-records/", {"show_routine": "true"}).json()["results"]
    assert [r["action"] for r in shown] == ["tx.resolve"] * 2 + ["cluster.update"] + ["tx.resolve"] * 3 + [
        "cluster.update"] + ["tx.resolve"] * 7 + ["cluster.create"]
    assert all(r["routine"] == (r["action"] == "tx.resolve") for r in shown)
    groups = api.get("/api/v1/audit-records/routine/").json()
    assert [(g["actor"], g["action"], g["count"]) for g in groups] == [("system:tx-backcheck", "tx.resolve", 12)]
    assert api.get("/api/v1/audit-records/routine/", {"actor": "sre-1"}).json() == []

    login(page, live_server.url, people.auditor.username)
    page.goto(f"{live_server.url}/audit/")
    rows = page.locator("[data-testid=audit-results] tbody tr")
    layout = [(rows.nth(i).get_attribute("data-testid") or "record", rows.nth(i).get_attribute("data-action"),
               rows.nth(i).get_attribute("data-count")) for i in range(rows.count())]
    assert layout == [("routine-group", "tx.resolve", "2"), ("record", "cluster.update", None),
                      ("routine-group", "tx.resolve", "3"), ("record", "cluster.update", None),
                      ("routine-group", "tx.resolve", "7"), ("record", "cluster.create", None)]
    assert "tx.resolve × 3 by system:tx-backcheck between" in rows.nth(2).inner_text()
    assert page.locator("[data-testid=routine-hidden]").inner_text().startswith("12 routine events")

    page.check("#id_show_routine")
    with page.expect_navigation():
        page.click("[data-testid=audit-search] button[type=submit]")
    assert page.locator("[data-testid=routine-group]").count() == 0
    assert page.locator("[data-testid=audit-results] tbody tr[data-action='tx.resolve']").count() == 12

    # a group's link lists exactly its records
    page.goto(f"{live_server.url}/audit/")
    with page.expect_navigation():
        page.locator("[data-testid=routine-group]").nth(2).locator("a").click()
    listed = page.locator("[data-testid=audit-results] tbody tr[data-record]")
    ids = [int(listed.nth(i).get_attribute("data-record")) for i in range(listed.count())]
    assert ids == list(AuditRecord.objects.filter(action="tx.resolve").order_by("-id").values_list("pk", flat=True))[5:]


def test_a_removed_field_and_a_record_that_is_no_object_read_as_changes():
    assert [(c.field, c.kind, c.before_text, c.after_text) for c in changes(
        {"grants": ["a", "b"], "ttl_s": 60}, {"grants": ["b", "c"]})] == [
        ("grants", "changed", '["a", "b"]', '["b", "c"]'), ("ttl_s", "removed", "60", "—")]
    assert changes({"grants": ["a", "b"]}, {"grants": ["b", "c"]})[0].added == ["c"]
    assert summary({"ttl_s": 60, "x": 1}, {"x": 1}) == "ttl_s (was 60)"
    assert [(c.field, c.kind) for c in changes(None, "retired")] == [("value", "added")]
    assert changes({"a": 1}, {"a": 1}) == [] and summary(None, None) == ""
