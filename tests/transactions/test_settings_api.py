"""Back-check settings on topic applications and topics, the app's HTTP check URL, and the role and
bad-input rules of the transactions REST API (no broker needed)."""

import pytest

from apps.audit.models import AuditRecord
from apps.provisioning.desired import topic_doc
from apps.topics.models import App, TopicApplication
from apps.transactions.models import Redrive

pytestmark = pytest.mark.django_db

BODY = {"name": "payments.order-paid", "team": "payments", "environment": "dev", "cluster": "dev-a",
        "message_types": ["created", "paid"], "expected_peak_mps": 500, "max_message_bytes": 8192,
        "retention_hours": 48, "storage_level": "file", "transactional": True, "ordered": False,
        "description": "Orders that were paid", "reason": "Billing needs it"}


@pytest.fixture
def dev_cluster(make_cluster):
    return make_cluster("dev-a", "dev")


def test_back_check_defaults_are_rocketmqs_and_reach_the_zookeeper_document(people, api_for, dev_cluster):
    response = api_for(people.dev).post("/api/v1/topic-applications/", BODY, format="json")
    assert response.status_code == 201, response.content
    body = response.json()
    assert (body["tx_check_delay_s"], body["tx_check_interval_s"], body["tx_check_max"]) == (6, 30, 15)
    assert "tx-check" in {c["rule"] for c in body["policy"]["checks"]}
    approved = api_for(people.lead).post(f"/api/v1/topic-applications/{body['id']}/approve/", {}, format="json")
    assert approved.status_code == 200, approved.content
    application = TopicApplication.objects.get(pk=body["id"])
    assert topic_doc(application.topic)["tx_check"] == {"delay_s": 6, "interval_s": 30, "max_checks": 15}


def test_per_topic_values_are_kept_and_provisioned(people, api_for, dev_cluster):
    response = api_for(people.dev).post("/api/v1/topic-applications/", {
        **BODY, "tx_check_delay_s": 1, "tx_check_interval_s": 2, "tx_check_max": 3}, format="json")
    assert response.status_code == 201, response.content
    api_for(people.lead).post(f"/api/v1/topic-applications/{response.json()['id']}/approve/", {}, format="json")
    topic = TopicApplication.objects.get(pk=response.json()["id"]).topic
    assert topic_doc(topic)["tx_check"] == {"delay_s": 1, "interval_s": 2, "max_checks": 3}
    listed = api_for(people.auditor).get(f"/api/v1/topics/{topic.pk}/").json()
    assert (listed["tx_check_delay_s"], listed["tx_check_interval_s"], listed["tx_check_max"]) == (1, 2, 3)


def test_bad_back_check_values_are_field_errors_and_change_nothing(people, api_for, dev_cluster):
    response = api_for(people.dev).post("/api/v1/topic-applications/", {
        **BODY, "tx_check_delay_s": 0, "tx_check_interval_s": -1, "tx_check_max": 1000}, format="json")
    assert response.status_code == 400
    assert set(response.json()) == {"tx_check_delay_s", "tx_check_interval_s", "tx_check_max"}
    # checks that outlast the retention: the policy says why, on the field
    response = api_for(people.dev).post("/api/v1/topic-applications/", {
        **BODY, "retention_hours": 1, "tx_check_interval_s": 3600, "tx_check_max": 15}, format="json")
    assert response.status_code == 400
    assert "longer than the topic keeps it (3,600 s)" in response.json()["tx_check_max"][0]
    assert TopicApplication.objects.count() == 0


def test_check_url_is_set_through_an_audited_action(people, api_for):
    from apps.topics import actions

    app, _ = actions.create_app(actor=people.dev, app_id="pay-worker", team=people.dev.teams.get())
    url = "/api/v1/apps/pay-worker/check-url/"
    assert api_for(people.auditor).post(url, {"check_url": "http://x.example/check"}, format="json") \
        .status_code == 403
    assert api_for(people.consumer).post(url, {"check_url": "http://x.example/check"}, format="json") \
        .status_code == 403  # another team's developer
    bad = api_for(people.dev).post(url, {"check_url": "not a url"}, format="json")
    assert bad.status_code == 400 and set(bad.json()) == {"check_url"}
    # a host no approver allowed is refused, and nothing changes
    unlisted = api_for(people.dev).post(url, {"check_url": "http://127.0.0.1:9/check"}, format="json")
    assert unlisted.status_code == 400 and "ask an approver" in unlisted.json()["check_url"][0]
    assert App.objects.get(app_id="pay-worker").check_url == ""
    scheme = api_for(people.dev).post(url, {"check_url": "ftp://127.0.0.1:9/check"}, format="json")
    assert scheme.status_code == 400 and set(scheme.json()) == {"check_url"}
    # only approvers set the allow-list (the app's own developer may not)
    hosts = f"/api/v1/apps/{app.app_id}/check-hosts/"
    assert api_for(people.dev).post(hosts, {"check_hosts": ["127.0.0.1:9"]}, format="json").status_code == 403
    assert api_for(people.lead).post(hosts, {"check_hosts": ["not a host!"]}, format="json").status_code == 400
    allowed = api_for(people.lead).post(hosts, {"check_hosts": ["127.0.0.1:9"]}, format="json")
    assert allowed.status_code == 200 and allowed.json()["check_hosts"] == ["127.0.0.1:9"]
    assert AuditRecord.objects.get(action="app.set_check_hosts").after["check_hosts"] == ["127.0.0.1:9"]
    ok = api_for(people.dev).post(url, {"check_url": "http://127.0.0.1:9/check"}, format="json")
    assert ok.status_code == 200 and ok.json()["check_url"] == "http://127.0.0.1:9/check"
    assert App.objects.get(app_id="pay-worker").check_url == "http://127.0.0.1:9/check"
    record = AuditRecord.objects.get(action="app.set_check_url")
    assert (record.actor_name, record.before["check_url"], record.after["check_url"]) == (
        "dev-pay", "", "http://127.0.0.1:9/check")


def test_redrive_roles_and_bad_input(people, api_for, dev_cluster):
    body = {"cluster": "dev-a", "topic": "payments.order-paid", "group": "billing"}
    assert api_for(people.dev).post("/api/v1/redrives/", body, format="json").status_code == 403
    assert api_for(people.auditor).post("/api/v1/redrives/", body, format="json").status_code == 403
    assert api_for(people.auditor).get("/api/v1/redrives/").status_code == 200
    assert api_for(people.dev).get("/api/v1/redrives/").status_code == 200
    both = api_for(people.sre).post("/api/v1/redrives/", {**body, "message_ids": ["a"],
                                                          "since": "2025-01-01T00:00:00Z"}, format="json")
    assert both.status_code == 400 and set(both.json()) == {"message_ids"}
    backwards = api_for(people.sre).post("/api/v1/redrives/", {**body, "since": "2025-01-02T00:00:00Z",
                                                               "until": "2025-01-01T00:00:00Z"}, format="json")
    assert backwards.status_code == 400 and set(backwards.json()) == {"until"}
    shape = api_for(people.sre).post("/api/v1/redrives/", {"cluster": "nowhere", "topic": "", "since": "yesterday"},
                                     format="json")
    assert shape.status_code == 400 and set(shape.json()) == {"cluster", "topic", "group", "since"}
    assert Redrive.objects.count() == 0
    assert not AuditRecord.objects.filter(action__startswith="dlq.").exists()


def test_transaction_view_reads_by_role(people, api_for, client):
    for user in (people.sre, people.auditor, people.dev, people.lead):
        assert api_for(user).get("/api/v1/tx/messages/summary/").status_code == 200
    assert api_for(None).get("/api/v1/tx/messages/summary/").status_code in (401, 403)
    client.force_login(people.dev)
    assert client.get("/transactions/").status_code == 200
    assert client.get("/redrives/").status_code == 200
    assert b"redrive-form" not in client.get("/redrives/").content
    assert client.post("/redrives/", {"cluster": "dev-a", "topic": "t", "group": "g"}).status_code == 403
