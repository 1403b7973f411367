"""The approval queue and the application lists: who waits for whom is decided in SQL, the queue is
paginated, and neither the queue nor a list costs a query per application."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from apps.governance.queue import awaiting

pytestmark = pytest.mark.django_db

TOPIC = {"team": "payments", "message_types": ["paid"], "expected_peak_mps": 10, "max_message_bytes": 1024,
         "retention_hours": 24, "storage_level": "file", "transactional": False, "ordered": False,
         "reason": "queue test"}


def apply(api, name: str, cluster: str, environment: str = "dev") -> int:
    response = api.post("/api/v1/topic-applications/", {**TOPIC, "name": name, "cluster": cluster,
                                                        "environment": environment}, format="json")
    assert response.status_code == 201, response.content
    return response.json()["id"]


def queue_of(api) -> list[tuple[str, int, list[str]]]:
    body = api.get("/api/v1/approvals/").json()
    return [(i["kind"], i["id"], i["your_approval_slots"]) for i in body["results"]]


def test_each_person_sees_what_they_may_decide(people, api_for, make_cluster, approved_topic):
    from apps.topics.actions import create_app

    dev_cluster, _ = make_cluster("dev-a", "dev"), make_cluster("prod-a", "prod")
    approved_topic(dev_cluster)  # payments.order-paid, for the binding below
    dev_topic = apply(api_for(people.dev), "payments.refunds", "dev-a")
    prod_topic = apply(api_for(people.dev), "payments.invoices", "prod-a", "prod")
    draft = api_for(people.dev).post("/api/v1/topic-applications/", {
        **TOPIC, "name": "payments.drafts", "cluster": "dev-a", "environment": "dev", "submit": False},
        format="json").json()["id"]
    create_app(actor=people.consumer, app_id="shipping-worker", team=people.consumer.teams.get())
    binding = api_for(people.consumer).post("/api/v1/binding-applications/", {
        "topic": "payments.order-paid@dev", "app": "shipping-worker", "group": "shipping", "selector_kind": "exact",
        "selector_pattern": "paid", "mode": "clustering", "delivery_limit": 5, "ttl_s": 3600,
        "backoff_initial_ms": 500, "backoff_max_ms": 30000, "backoff_multiplier": 2.0, "max_in_flight": 16,
        "reason": "ship"}, format="json").json()["id"]
    assert draft not in (dev_topic, prod_topic)

    # oldest first; the binding is approved by the topic's team (payments), not the app's
    assert queue_of(api_for(people.lead)) == [("topic", dev_topic, ["owner"]), ("topic", prod_topic, ["owner"]),
                                              ("binding", binding, ["owner"])]
    assert queue_of(api_for(people.sre)) == [("topic", prod_topic, ["sre"])]
    assert queue_of(api_for(people.admin)) == [("topic", dev_topic, ["owner"]),
                                               ("topic", prod_topic, ["owner", "sre"]),
                                               ("binding", binding, ["owner"])]
    assert queue_of(api_for(people.lead_log)) == []
    assert queue_of(api_for(people.dev)) == []  # a developer approves nothing, and never their own
    assert queue_of(api_for(people.consumer)) == []

    # the lead fills the owner slot of the production topic: it leaves their queue, the SRE's slot stays open
    assert api_for(people.lead).post(f"/api/v1/topic-applications/{prod_topic}/approve/").status_code == 200
    assert queue_of(api_for(people.lead)) == [("topic", dev_topic, ["owner"]), ("binding", binding, ["owner"])]
    assert queue_of(api_for(people.sre)) == [("topic", prod_topic, ["sre"])]
    assert queue_of(api_for(people.admin)) == [("topic", dev_topic, ["owner"]), ("topic", prod_topic, ["sre"]),
                                               ("binding", binding, ["owner"])]
    mine = api_for(people.sre).get("/api/v1/topic-applications/?awaiting_me=true").json()
    assert [a["id"] for a in mine["results"]] == [prod_topic]
    mine = api_for(people.lead).get("/api/v1/binding-applications/?awaiting_me=true").json()
    assert [a["id"] for a in mine["results"]] == [binding]


def test_the_queue_is_paginated_and_costs_the_same_queries_however_long(people, api_for, make_cluster, settings):
    settings.SWITCHYARD_POLICY = {"topics_per_team": 100}
    make_cluster("dev-a", "dev")
    ids = [apply(api_for(people.dev), f"payments.t{n}", "dev-a") for n in range(3)]
    with CaptureQueriesContext(connection) as few:
        assert [a.pk for a in awaiting(people.lead)] == ids
    ids += [apply(api_for(people.dev), f"payments.t{n}", "dev-a") for n in range(3, 51)]
    with CaptureQueriesContext(connection) as many:
        assert [a.pk for a in awaiting(people.lead)] == ids
    assert len(many.captured_queries) == len(few.captured_queries)

    first = api_for(people.lead).get("/api/v1/approvals/").json()
    assert (first["count"], len(first["results"]), first["previous"]) == (51, 50, None)
    assert [i["id"] for i in first["results"]] == ids[:50]
    second = api_for(people.lead).get(first["next"]).json()
    assert (second["count"], [i["id"] for i in second["results"]], second["next"]) == (51, [ids[50]], None)


def test_the_queue_page_is_paginated(client, people, api_for, make_cluster, settings):
    settings.SWITCHYARD_POLICY = {"topics_per_team": 100}
    make_cluster("dev-a", "dev")
    ids = [apply(api_for(people.dev), f"payments.t{n}", "dev-a") for n in range(51)]
    client.force_login(people.lead)
    first = client.get("/approvals/").content.decode()
    assert first.count('data-testid="queue-item"') == 50 and "page 1 of 2" in first
    second = client.get("/approvals/?page=2").content.decode()
    assert second.count('data-testid="queue-item"') == 1 and f"/applications/topics/{ids[50]}/" in second


def test_listing_applications_reads_their_sync_records_in_one_query(people, api_for, make_cluster,
                                                                   approved_topic):
    from apps.topics.models import TopicApplication

    cluster = make_cluster("dev-a", "dev")

    def list_queries() -> tuple[int, list]:
        api = api_for(people.auditor)
        api.get("/api/v1/topic-applications/")  # the token and permission look-ups, once
        with CaptureQueriesContext(connection) as queries:
            body = api.get("/api/v1/topic-applications/").json()
        return len(queries.captured_queries), [(a["name"], [s["state"] for s in a["sync"]]) for a in body["results"]]

    approved_topic(cluster, name="payments.t0")
    approved_topic(cluster, name="payments.t1")
    few, rows = list_queries()
    assert rows == [("payments.t1", ["pending", "pending"]), ("payments.t0", ["pending", "pending"])]  # topic, route
    for n in range(2, 8):
        approved_topic(cluster, name=f"payments.t{n}")
    many, rows = list_queries()
    assert len(rows) == TopicApplication.objects.count() == 8
    assert all(states == ["pending", "pending"] for _, states in rows)
    assert many == few


@pytest.mark.parametrize("who", ["lead", "admin", "sre"])
def test_your_approval_slots_cost_no_query_per_row(people, api_for, make_cluster, settings, who):
    """The queue and an application list say which slots the caller may fill on every row, from the caller's
    roles and teams read once."""
    settings.SWITCHYARD_POLICY = {"topics_per_team": 100}
    make_cluster("dev-a", "dev")
    make_cluster("prod-a", "prod")
    api = api_for(getattr(people, who))

    def read(url: str) -> tuple[int, list]:
        api.get(url)  # the token and permission look-ups, once
        with CaptureQueriesContext(connection) as queries:
            body = api.get(url).json()
        return len(queries.captured_queries), [(i["id"], i["your_approval_slots"]) for i in body["results"]]

    for n in range(2):
        apply(api_for(people.dev), f"payments.t{n}", "prod-a", "prod")
    few_queue, rows = read("/api/v1/approvals/")
    few_list, listed = read("/api/v1/topic-applications/?state=pending")
    slots = {"lead": ["owner"], "admin": ["owner", "sre"], "sre": ["sre"]}[who]
    assert [s for _, s in rows] == [slots] * 2 and sorted(listed) == sorted(rows)
    for n in range(2, 12):
        apply(api_for(people.dev), f"payments.t{n}", "prod-a", "prod")
    many_queue, rows = read("/api/v1/approvals/")
    many_list, listed = read("/api/v1/topic-applications/?state=pending")
    assert [s for _, s in rows] == [slots] * 12 and sorted(listed) == sorted(rows)
    assert (many_queue, many_list) == (few_queue, few_list)


def test_the_openapi_schema_describes_the_queue_as_a_page(people, api_for):
    schema = api_for(people.lead).get("/api/v1/schema/?format=json").json()
    get = schema["paths"]["/api/v1/approvals/"]["get"]
    assert "page" in [p["name"] for p in get["parameters"]]
    ref = get["responses"]["200"]["content"]["application/json"]["schema"]["$ref"]
    page = schema["components"]["schemas"][ref.rsplit("/", 1)[1]]
    assert set(page["properties"]) == {"count", "next", "previous", "results"}
    item = schema["components"]["schemas"][page["properties"]["results"]["items"]["$ref"].rsplit("/", 1)[1]]
    assert set(item["properties"]) == {"kind", "kind_label", "id", "number", "reference", "title", "applicant",
                                       "state", "submitted_at", "your_approval_slots", "url"}
    assert item["properties"]["your_approval_slots"] == {"type": "array", "items": {"type": "string"},
                                                         "readOnly": True}
