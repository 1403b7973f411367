"""REST under /api/v1/traces/: the auditor's searches, a message's record, CSV; who may change what."""

import csv
import io
from datetime import timedelta
from unittest import mock

import pytest
from django.utils import timezone

from apps.audit.models import AuditRecord
from apps.tracing.actions import BUILD_TASK
from apps.tracing.models import IndexRun
from tests.tracing.factories import BASE_US, message
from tests.tracing.pages import RenderedLane, rendered_message

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def auditor_api(make_user, api_for):
    return api_for(make_user("aud-1", "auditor"))


@pytest.fixture
def indexed():
    message("m-1", business_id="order-1", key="cust-7", minutes=0, final_state="acked",
            steps=[(0, "published", None, None), (1, "stored", None, None), (5, "delivered", "billing", 1),
                   (6, "acked", "billing", 1)])
    message("m-2", business_id="order-2", key="cust-7", minutes=10, final_state="dead_lettered",
            groups=[{"group": "billing", "state": "dead_lettered", "attempts": 3, "deliveries": 3, "nacks": 2,
                     "timeouts": 1, "first_delivered_us": 1, "ended_us": 9, "latency_us": 8,
                     "last_consumer": "c1", "detail": "limit"}])
    message("m-3", topic="payments", business_id="order-3", minutes=20, final_state="acked")


def ids(response):
    assert response.status_code == 200, response.content
    return [m["message_id"] for m in response.json()["results"]]


def test_auditor_finds_messages_by_each_criterion(auditor_api, indexed):
    url = "/api/v1/traces/messages/"
    assert ids(auditor_api.get(url, {"message_id": "m-2"})) == ["m-2"]
    assert ids(auditor_api.get(url, {"business_id": "order-1"})) == ["m-1"]
    assert ids(auditor_api.get(url, {"key": "cust-7"})) == ["m-2", "m-1"]
    window = {"topic": "orders", "since": "2026-01-01T00:00:00Z", "until": "2026-01-01T00:30:00Z"}
    assert ids(auditor_api.get(url, window)) == ["m-2", "m-1"]
    assert ids(auditor_api.get(url, {**window, "state": "dead_lettered"})) == ["m-2"]
    assert ids(auditor_api.get(url, {**window, "until": "2026-01-01T00:05:00Z"})) == ["m-1"]
    assert ids(auditor_api.get(url, {"business_id": "nope"})) == []


def test_a_bad_filter_is_a_400_with_the_field_named(auditor_api, indexed):
    response = auditor_api.get("/api/v1/traces/messages/", {"state": "exploded", "since": "yesterday"})
    assert response.status_code == 400
    assert set(response.json()) == {"state", "since"}


def test_message_record_has_its_groups_and_timeline_in_order(auditor_api, indexed):
    body = auditor_api.get("/api/v1/traces/messages/m-1/").json()
    assert (body["business_id"], body["key"], body["final_state"]) == ("order-1", "cust-7", "acked")
    assert [(e["event"], e["group"], e["attempt"]) for e in body["timeline"]] == [
        ("published", None, None), ("stored", None, None), ("delivered", "billing", 1), ("acked", "billing", 1)]
    assert body["groups"][0]["group"] == "billing"
    assert auditor_api.get("/api/v1/traces/messages/nope/").status_code == 404


def test_steps_of_the_same_microsecond_are_in_attempt_order(auditor_api, client, make_user):
    """Attempt n's outcome before attempt n+1's delivery, a re-drive before the fresh delivery it causes;
    the event ids run against that order, so they cannot be what sorts it."""
    rows = [  # (event id, µs after BASE, event, rank of its kind, attempt)
        ("e99", 0, "published", 0, None), ("e98", 0, "stored", 2, None),
        ("e97", 0, "delivered", 5, 1), ("e96", 0, "nacked", 6, 1), ("e95", 0, "delivered", 5, 2),
        ("e94", 0, "timed_out", 7, 2), ("e93", 0, "delivered", 5, 3), ("e92", 0, "nacked", 6, 3),
        ("e91", 0, "dead_lettered", 9, 3),
        ("e90", 1000, "redriven", 11, None), ("e89", 1000, "delivered", 5, 1), ("e88", 1000, "acked", 8, 1),
    ]
    timeline = []
    for event_id, us, event, rank, attempt in reversed(rows):
        e = {"event_id": event_id, "ts_us": BASE_US + us, "rank": rank, "event": event,
             "group": "billing" if rank >= 5 else None, "attempt": attempt,
             "consumer": "c1" if event in ("delivered", "nacked", "timed_out", "acked") else None}
        timeline.append({k: v for k, v in e.items() if v is not None})
    message("m-tie", timeline=timeline, groups=[{"group": "billing", "state": "acked", "attempts": 4, "deliveries": 4,
                                                 "nacks": 2, "timeouts": 1, "first_delivered_us": None,
                                                 "ended_us": None, "latency_us": None, "last_consumer": "c1",
                                                 "detail": None}])
    expected = [("published", None, None), ("stored", None, None),
                ("delivered", "billing", 1), ("nacked", "billing", 1),
                ("delivered", "billing", 2), ("timed_out", "billing", 2),
                ("delivered", "billing", 3), ("nacked", "billing", 3), ("dead_lettered", "billing", 3),
                ("redriven", "billing", None), ("delivered", "billing", 1), ("acked", "billing", 1)]
    body = auditor_api.get("/api/v1/traces/messages/m-tie/").json()
    assert [(e["event"], e["group"], e["attempt"]) for e in body["timeline"]] == expected

    client.force_login(make_user("aud-web", "auditor"))
    shown = rendered_message(client.get("/tracing/messages/m-tie/").content.decode())
    assert shown.steps == expected
    assert shown.lanes[1] == RenderedLane("billing", "acked",
                                          [("1", "nacked"), ("2", "timed_out"), ("3", "nacked"), ("1", "acked")],
                                          ["dead_lettered", "redriven", "acked"])


def test_csv_export_has_the_search_results(auditor_api, indexed):
    response = auditor_api.get("/api/v1/traces/messages/export/", {"key": "cust-7"})
    assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert [(r["message_id"], r["final_state"], r["group_states"]) for r in rows] == [
        ("m-2", "dead_lettered", "billing=dead_lettered"), ("m-1", "acked", "billing=acked")]


def test_auditor_reads_and_changes_nothing(auditor_api, indexed):
    assert auditor_api.post("/api/v1/traces/messages/", {"message_id": "x"}).status_code in (403, 405)
    assert auditor_api.delete("/api/v1/traces/messages/m-1/").status_code in (403, 405)
    assert auditor_api.patch("/api/v1/traces/messages/m-1/", {"final_state": "acked"}).status_code in (403, 405)
    assert auditor_api.post("/api/v1/traces/index-runs/").status_code == 403
    assert auditor_api.put("/api/v1/traces/schedule/", {"every_minutes": 1, "enabled": True}).status_code == 403
    assert auditor_api.get("/api/v1/traces/schedule/").status_code == 200
    assert auditor_api.post("/api/v1/audit-records/", {"action": "x"}).status_code in (403, 405)
    assert IndexRun.objects.count() == 0 and AuditRecord.objects.count() == 0


def test_people_without_a_tracing_role_see_no_trace(make_user, api_for, indexed):
    nobody = api_for(make_user("no-role-1"))
    assert nobody.get("/api/v1/traces/messages/", {"message_id": "m-1"}).status_code == 403
    assert nobody.get("/api/v1/traces/messages/m-1/").status_code == 403
    assert api_for(None).get("/api/v1/traces/messages/m-1/").status_code in (401, 403)


def test_a_developer_of_no_team_finds_nothing_and_is_refused_each_message(make_user, api_for, indexed):
    developer = api_for(make_user("dev-1", "developer"))
    assert ids(developer.get("/api/v1/traces/messages/", {"key": "cust-7"})) == []
    refused = developer.get("/api/v1/traces/messages/m-1/")
    assert refused.status_code == 403 and "none of your teams owns" in refused.json()["detail"]


def test_rebuild_now_is_refused_while_a_run_is_under_way_and_a_stale_run_does_not_block(make_user, api_for):
    sre = api_for(make_user("sre-2", "sre"))
    running = IndexRun.objects.create(trigger="schedule", state="running")
    refused = sre.post("/api/v1/traces/index-runs/")
    assert refused.status_code == 409 and f"#{running.pk}" in refused.json()["detail"]
    IndexRun.objects.filter(pk=running.pk).update(created_at=timezone.now() - timedelta(hours=4))
    with mock.patch("apps.tracing.actions.app.send_task") as send_task:  # queued on commit, by the task's name
        accepted = sre.post("/api/v1/traces/index-runs/")
    assert accepted.status_code == 202 and accepted.json()["state"] == "queued"
    send_task.assert_called_once_with(BUILD_TASK, args=[accepted.json()["id"]])
    running.refresh_from_db()
    assert (running.state, running.stage) == ("failed", "abandoned")
    assert AuditRecord.objects.filter(action="trace_index.build", actor_name="sre-2").count() == 1
