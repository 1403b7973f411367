"""Topic applications over REST: submit, policy refusal, approvals by slot, self-approval, roles."""

import pytest

from apps.audit.models import AuditRecord
from apps.governance.workflow import State
from apps.topics.models import Topic, TopicApplication

pytestmark = pytest.mark.django_db

BODY = {"name": "payments.order-paid", "team": "payments", "environment": "dev", "cluster": "dev-a",
        "message_types": ["created", "paid"], "expected_peak_mps": 500, "max_message_bytes": 8192,
        "retention_hours": 48, "storage_level": "file", "transactional": False, "ordered": False,
        "description": "Orders that were paid", "reason": "Billing needs it"}


@pytest.fixture
def dev_cluster(make_cluster):
    return make_cluster("dev-a", "dev")


@pytest.fixture
def prod_cluster(make_cluster):
    return make_cluster("prod-a", "prod")


def post(api, user, body=None, **overrides):
    return api(user).post("/api/v1/topic-applications/", {**(body or BODY), **overrides}, format="json")


def test_developer_submits_and_it_waits_for_the_owning_team(people, api_for, dev_cluster):
    response = post(api_for, people.dev)
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["state"] == "pending"
    assert body["applicant"] == "dev-pay"
    assert [s["slot"] for s in body["required_approvals"]] == ["owner"]
    assert body["policy"]["passed"] is True
    assert {c["rule"] for c in body["policy"]["checks"]} >= {"naming", "quota-topics", "quota-mps", "prod-approval"}
    record = AuditRecord.objects.get(action="topic_application.create")
    assert (record.actor_name, record.source, record.after["state"]) == ("dev-pay", "api", "pending")


def test_invalid_body_gets_field_errors_and_changes_nothing(people, api_for, dev_cluster):
    bad = {**BODY, "name": "bad name!", "expected_peak_mps": -3, "message_types": [], "storage_level": "tape",
           "cluster": "nowhere"}
    response = post(api_for, people.dev, bad)
    assert response.status_code == 400
    assert set(response.json()) == {"name", "expected_peak_mps", "message_types", "storage_level", "cluster"}
    assert TopicApplication.objects.count() == 0 and AuditRecord.objects.filter(
        action__startswith="topic_application").count() == 0


def test_policy_refusal_is_explained_per_field_and_changes_nothing(people, api_for, dev_cluster):
    response = post(api_for, people.dev, name="orders.paid", transactional=True, storage_level="memory")
    assert response.status_code == 400
    errors = response.json()
    assert errors["name"] == ["Topic names start with the owning team's name and a dot, then lowercase words "
                              "separated by '.' or '-', e.g. payments.order-created."]
    assert errors["transactional"] == ["A transactional topic needs file storage: half messages must survive a "
                                       "broker restart."]
    assert TopicApplication.objects.count() == 0


def test_nobody_approves_their_own_application(make_user, people, api_for, dev_cluster):
    lead_dev = make_user("lead-and-dev", "developer", "approver", team="payments")
    application_id = post(api_for, lead_dev).json()["id"]
    before = AuditRecord.objects.count()
    response = api_for(lead_dev).post(f"/api/v1/topic-applications/{application_id}/approve/", {"comment": "me"},
                                      format="json")
    assert response.status_code == 403
    assert response.json()["detail"] == "Nobody approves their own application."
    application = TopicApplication.objects.get(pk=application_id)
    assert application.state == State.PENDING and application.decisions.count() == 0
    assert Topic.objects.count() == 0 and AuditRecord.objects.count() == before
    # and the API tells them so in the application itself
    assert api_for(lead_dev).get(f"/api/v1/topic-applications/{application_id}/").json()["your_approval_slots"] == []


def test_auditor_reads_applications_but_changes_none(people, api_for, dev_cluster):
    application_id = post(api_for, people.dev).json()["id"]
    auditor = api_for(people.auditor)
    assert auditor.get("/api/v1/topic-applications/").json()["count"] == 1
    assert auditor.get(f"/api/v1/topic-applications/{application_id}/").status_code == 200
    before = AuditRecord.objects.count()
    assert auditor.post("/api/v1/topic-applications/", {**BODY, "name": "payments.other"},
                        format="json").status_code == 403
    for verb in ("approve", "reject", "withdraw", "submit"):
        response = auditor.post(f"/api/v1/topic-applications/{application_id}/{verb}/", {"comment": "x"},
                                format="json")
        assert response.status_code == 403, (verb, response.content)
    assert auditor.patch(f"/api/v1/topic-applications/{application_id}/", {"reason": "x"},
                         format="json").status_code == 403
    assert TopicApplication.objects.get().state == State.PENDING
    assert AuditRecord.objects.count() == before


def test_approver_of_another_team_is_refused(people, api_for, dev_cluster):
    application_id = post(api_for, people.dev).json()["id"]
    response = api_for(people.lead_log).post(f"/api/v1/topic-applications/{application_id}/approve/", {},
                                             format="json")
    assert response.status_code == 403
    assert "an approver of team payments" in response.json()["detail"]


def test_owner_approval_creates_the_topic_and_audits_it(people, api_for, dev_cluster):
    application_id = post(api_for, people.dev).json()["id"]
    response = api_for(people.lead).post(f"/api/v1/topic-applications/{application_id}/approve/",
                                         {"comment": "fine"}, format="json")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["state"] == "approved" and body["topic"] == "payments.order-paid"
    assert body["decisions"][0]["by"] == "lead-pay" and body["decisions"][0]["comment"] == "fine"
    assert [(s["kind"], s["state"]) for s in body["sync"]] == [("topic", "pending"), ("route", "pending")]
    topic = Topic.objects.get()
    assert (topic.cluster.name, topic.message_types, topic.retention_s, topic.revision) == (
        "dev-a", ["created", "paid"], 48 * 3600, 1)
    actions = list(AuditRecord.objects.order_by("id").values_list("action", flat=True))
    assert actions[-3:] == ["topic_application.create", "topic.create", "topic_application.approve"]
    # approving again is a conflict, not a second topic
    again = api_for(people.lead).post(f"/api/v1/topic-applications/{application_id}/approve/", {}, format="json")
    assert again.status_code in (403, 409) and Topic.objects.count() == 1


def test_production_needs_an_sre_besides_the_owner(make_user, people, api_for, prod_cluster):
    response = post(api_for, people.dev, environment="prod", cluster="prod-a")
    application_id = response.json()["id"]
    assert [s["slot"] for s in response.json()["required_approvals"]] == ["owner", "sre"]
    url = f"/api/v1/topic-applications/{application_id}/approve/"
    assert api_for(people.lead).post(url, {}, format="json").json()["state"] == "pending"
    # one person fills one slot only
    lead_sre = make_user("lead-sre", "approver", "sre", team="payments")
    assert api_for(people.lead).post(url, {}, format="json").status_code == 403
    body = api_for(people.sre).post(url, {"comment": "capacity ok"}, format="json").json()
    assert body["state"] == "approved"
    assert [(s["slot"], s["by"]) for s in body["required_approvals"]] == [("owner", "lead-pay"), ("sre", "sre-1")]
    assert api_for(lead_sre).post(url, {}, format="json").status_code in (403, 409)


def test_reject_needs_a_comment(people, api_for, dev_cluster):
    application_id = post(api_for, people.dev).json()["id"]
    url = f"/api/v1/topic-applications/{application_id}/reject/"
    response = api_for(people.lead).post(url, {"comment": "  "}, format="json")
    assert response.status_code == 400 and "comment" in response.json()
    assert TopicApplication.objects.get().state == State.PENDING
    body = api_for(people.lead).post(url, {"comment": "use the existing orders topic"}, format="json").json()
    assert body["state"] == "rejected" and body["decisions"][0]["verdict"] == "reject"
    assert Topic.objects.count() == 0


def test_applicant_withdraws_while_pending_and_nobody_else_can(people, api_for, dev_cluster):
    application_id = post(api_for, people.dev).json()["id"]
    url = f"/api/v1/topic-applications/{application_id}/withdraw/"
    assert api_for(people.lead).post(url, format="json").status_code == 403
    assert api_for(people.dev).post(url, format="json").json()["state"] == "withdrawn"
    assert api_for(people.dev).post(url, format="json").status_code == 409
    approve = api_for(people.lead).post(f"/api/v1/topic-applications/{application_id}/approve/", format="json")
    assert approve.status_code == 409 and Topic.objects.count() == 0


def test_draft_edit_then_submit(people, api_for, dev_cluster):
    response = post(api_for, people.dev, submit=False, name="orders")
    assert response.status_code == 201 and response.json()["state"] == "draft"  # drafts skip the policy
    application_id = response.json()["id"]
    url = f"/api/v1/topic-applications/{application_id}/"
    assert api_for(people.dev).post(url + "submit/", format="json").status_code == 400  # the naming rule
    assert api_for(people.dev).patch(url, {"name": "payments.orders"}, format="json").status_code == 200
    assert api_for(people.consumer).patch(url, {"reason": "mine"}, format="json").status_code == 403
    assert api_for(people.dev).post(url + "submit/", format="json").json()["state"] == "pending"
    assert api_for(people.dev).patch(url, {"reason": "late"}, format="json").status_code == 409


def test_approval_queue_lists_what_waits_for_me(people, api_for, dev_cluster):
    application_id = post(api_for, people.dev).json()["id"]
    queue = api_for(people.lead).get("/api/v1/approvals/").json()
    assert [(i["kind"], i["id"], i["your_approval_slots"]) for i in queue["results"]] == [
        ("topic", application_id, ["owner"])]
    assert api_for(people.lead_log).get("/api/v1/approvals/").json()["results"] == []
    assert api_for(people.dev).get("/api/v1/approvals/").json()["results"] == []
    mine = api_for(people.lead).get("/api/v1/topic-applications/?awaiting_me=true").json()
    assert [a["id"] for a in mine["results"]] == [application_id]


def test_dry_run_says_why_not_and_changes_nothing(people, api_for, dev_cluster, settings):
    settings.SWITCHYARD_POLICY = {"team_peak_mps_per_cluster": 1000}
    ok = api_for(people.dev).post("/api/v1/topic-applications/dry-run/", BODY, format="json").json()
    assert ok["passed"] is True and ok["field_errors"] == {}
    response = api_for(people.dev).post("/api/v1/topic-applications/dry-run/",
                                        {**BODY, "expected_peak_mps": 1500, "ordered": True}, format="json")
    assert response.status_code == 200
    body = response.json()
    assert body["passed"] is False
    assert body["field_errors"] == {"expected_peak_mps": [
        "Team payments would expect 1,500 messages/s at peak on dev-a (0 already); the limit is 1,000."]}
    failed = [c["rule"] for c in body["checks"] if not c["passed"]]
    assert failed == ["quota-mps"]
    shape = api_for(people.dev).post("/api/v1/topic-applications/dry-run/", {**BODY, "retention_hours": 0},
                                     format="json").json()
    assert shape["passed"] is False and "retention_hours" in shape["field_errors"]
    assert TopicApplication.objects.count() == 0
    rules = api_for(people.dev).get("/api/v1/topic-applications/rules/").json()
    assert "naming" in [r["rule"] for r in rules]


def test_dry_run_gives_field_errors_and_policy_failures_together(people, api_for, dev_cluster):
    """A body with a bad field is still checked against the policy on the fields that are right: one answer."""
    body = {**BODY, "name": "Payments Order Paid", "environment": "prod", "message_types": []}
    answer = api_for(people.dev).post("/api/v1/topic-applications/dry-run/", body, format="json")
    assert answer.status_code == 200
    result = answer.json()
    assert result["passed"] is False
    assert set(result["field_errors"]) == {"name", "message_types", "cluster"}, result
    assert result["field_errors"]["cluster"] == ["Cluster dev-a serves Development, not Production."]
    checked = {c["rule"]: c["passed"] for c in result["checks"]}
    # the rules that read the refused name wait for it; the others answer
    assert "naming" not in checked and "unique-name" not in checked
    assert checked["cluster"] is False and checked["team-member"] is True and checked["quota-mps"] is True
    assert TopicApplication.objects.count() == 0


@pytest.mark.parametrize("body", [{}, {"operation": "retire"}, {"target_kind": "topic", "operation": "teleport"}])
def test_a_lifecycle_dry_run_without_a_valid_kind_gives_field_errors_not_a_server_error(people, api_for, dev_cluster,
                                                                                      body):
    """The rule set depends on the kind; while the fields naming it are refused there is none to run yet."""
    answer = api_for(people.dev).post("/api/v1/lifecycle-applications/dry-run/", body, format="json")
    assert answer.status_code == 200, answer.content
    result = answer.json()
    assert result["passed"] is False and result["field_errors"] and result["checks"] == []


def test_anonymous_gets_401(api_for, dev_cluster):
    assert api_for(None).get("/api/v1/topic-applications/").status_code == 401
    assert api_for(None).post("/api/v1/topic-applications/", BODY, format="json").status_code == 401


@pytest.mark.parametrize("method, url, body", [
    ("post", "/api/v1/topic-applications/", ["not", "an", "object"]),
    ("post", "/api/v1/topic-applications/", {**BODY, "message_types": "created,paid", "team": "nobody",
                                             "expected_peak_mps": "lots", "transactional": "perhaps"}),
    ("post", "/api/v1/topic-applications/", {**BODY, "cluster": None, "retention_hours": 10**12}),
    ("post", "/api/v1/topic-applications/dry-run/", "garbage"),
    ("post", "/api/v1/binding-applications/", {"topic": "nope@dev", "app": {"x": 1}, "group": 5,
                                               "backoff_multiplier": "x", "reason": ""}),
    ("post", "/api/v1/binding-applications/", {"topic": [1], "app": None}),
    ("post", "/api/v1/grant-applications/", {"topic": 999999, "app": "ghost", "reason": "r"}),
    ("post", "/api/v1/apps/", {"app_id": "../etc", "team": "payments"}),
    ("post", "/api/v1/topic-applications/999999/approve/", {}),
    ("post", "/api/v1/reconcile-runs/", {"cluster": ["dev-a"], "repair": "sometimes"}),
    ("put", "/api/v1/reconcile-runs/schedule/", [1, 2]),
    ("get", "/api/v1/routes/no.such-topic/?environment=dev", None),
    ("get", "/api/v1/topic-applications/?state=unknown&mine=maybe", None),
])
def test_bad_input_is_a_4xx_and_changes_nothing(people, api_for, dev_cluster, method, url, body):
    before = AuditRecord.objects.count()
    response = getattr(api_for(people.dev), method)(url, body, format="json")
    assert 400 <= response.status_code < 500, response.content
    assert response["Content-Type"].startswith("application/json")
    assert AuditRecord.objects.count() == before and TopicApplication.objects.count() == 0


def test_a_decision_body_that_is_not_an_object_is_a_400(people, api_for, dev_cluster):
    application_id = post(api_for, people.dev).json()["id"]
    response = api_for(people.lead).post(f"/api/v1/topic-applications/{application_id}/approve/", ["yes"],
                                         format="json")
    assert response.status_code == 400 and "comment" in response.json()
    assert TopicApplication.objects.get().state == State.PENDING


def test_workflow_fields_in_a_body_are_ignored_never_a_500(people, api_for, dev_cluster):
    """state, submitted_at and decided_at are the workflow's: writing them on create or update changes nothing."""
    forged = {"state": "approved", "submitted_at": "2020-01-01T00:00:00Z", "decided_at": "2020-01-02T00:00:00Z"}
    response = post(api_for, people.dev, submit=False, name="payments.forged", **forged)
    assert response.status_code == 201, response.content
    body = response.json()
    assert (body["state"], body["submitted_at"], body["decided_at"]) == ("draft", None, None)
    url = f"/api/v1/topic-applications/{body['id']}/"
    patched = api_for(people.dev).patch(url, {**forged, "reason": "still a draft"}, format="json")
    assert patched.status_code == 200, patched.content
    row = TopicApplication.objects.get(pk=body["id"])
    assert (row.state, row.submitted_at, row.decided_at, row.reason) == ("draft", None, None, "still a draft")
