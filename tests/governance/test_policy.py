"""Policy refusals through REST and the dry run, each with the words the applicant reads: the topics-per-team
and bindings-per-topic quotas, the cluster rule (wrong environment, maintenance) and the storage rule."""

import pytest

from apps.bindings.models import BindingApplication
from apps.topics.models import TopicApplication

pytestmark = pytest.mark.django_db

TOPIC = {"name": "payments.refunds", "team": "payments", "environment": "dev", "cluster": "dev-a",
         "message_types": ["refunded"], "expected_peak_mps": 10, "max_message_bytes": 1024, "retention_hours": 24,
         "storage_level": "file", "transactional": False, "ordered": False, "reason": "policy test"}


def binding(group: str) -> dict:
    return {"topic": "payments.order-paid@dev", "app": "shipping-worker", "group": group, "selector_kind": "exact",
            "selector_pattern": "paid", "mode": "clustering", "delivery_limit": 5, "ttl_s": 3600,
            "backoff_initial_ms": 500, "backoff_max_ms": 30000, "backoff_multiplier": 2.0, "max_in_flight": 16,
            "reason": "policy test"}


def refused(api, url: str, body: dict) -> tuple[dict, dict]:
    """POST the body for real and as a dry run: (the 400's errors, the dry run's answer)."""
    response = api.post(url, body, format="json")
    assert response.status_code == 400, response.content
    dry = api.post(f"{url}dry-run/", body, format="json")
    assert dry.status_code == 200
    return response.json(), dry.json()


def failed_rules(dry: dict) -> list[str]:
    return [c["rule"] for c in dry["checks"] if not c["passed"]]


def test_a_team_over_its_topic_quota_is_refused(people, api_for, make_cluster, approved_topic, settings):
    settings.SWITCHYARD_POLICY = {"topics_per_team": 2}
    approved_topic(make_cluster("dev-a", "dev"))  # one topic
    api = api_for(people.dev)
    assert api.post("/api/v1/topic-applications/", {**TOPIC, "name": "payments.chargebacks"},
                    format="json").status_code == 201  # and one requested
    errors, dry = refused(api, "/api/v1/topic-applications/", TOPIC)
    message = "Team payments already has 2 topics (requested ones included); the limit is 2."
    assert errors == {"non_field_errors": [message]}
    assert (dry["passed"], dry["field_errors"], failed_rules(dry)) == (
        False, {"non_field_errors": [message]}, ["quota-topics"])
    assert not TopicApplication.objects.filter(name="payments.refunds").exists()


def test_a_topic_over_its_binding_quota_is_refused(people, api_for, make_cluster, approved_topic, settings):
    from apps.topics.actions import create_app

    settings.SWITCHYARD_POLICY = {"bindings_per_topic": 1}
    approved_topic(make_cluster("dev-a", "dev"))
    create_app(actor=people.consumer, app_id="shipping-worker", team=people.consumer.teams.get())
    api = api_for(people.consumer)
    assert api.post("/api/v1/binding-applications/", binding("shipping"), format="json").status_code == 201
    errors, dry = refused(api, "/api/v1/binding-applications/", binding("audit"))
    message = "payments.order-paid has 1 bindings (requested ones included); the limit is 1."
    assert errors == {"topic": [message]}
    assert (dry["passed"], dry["field_errors"], failed_rules(dry)) == (False, {"topic": [message]},
                                                                       ["quota-bindings"])
    assert list(BindingApplication.objects.values_list("group", flat=True)) == ["shipping"]


@pytest.mark.parametrize("cluster, body, field, message", [
    ({"environment": "dev"}, {"environment": "prod"}, "cluster",
     "Cluster dev-a serves Development, not Production."),
    ({"environment": "dev", "status": "maintenance"}, {}, "cluster",
     "Cluster dev-a is in maintenance; choose an active cluster."),
    ({"environment": "dev", "status": "retired"}, {}, "cluster",
     "Cluster dev-a is retired; choose an active cluster."),
    ({"environment": "dev", "storage_level": "memory"}, {}, "storage_level",
     "Cluster dev-a keeps messages in memory only; choose memory storage or a file-storage cluster."),
], ids=["wrong-environment", "maintenance", "retired", "memory-only-cluster"])
def test_cluster_and_storage_rules_refuse_with_their_reason(people, api_for, make_cluster, cluster, body, field,
                                                            message):
    from apps.clusters.actions import update_cluster

    status = cluster.pop("status", None)
    made = make_cluster("dev-a", **cluster)
    if status:
        update_cluster(actor=people.admin, cluster=made, status=status)
    errors, dry = refused(api_for(people.dev), "/api/v1/topic-applications/", {**TOPIC, **body})
    assert errors == {field: [message]}
    assert (dry["passed"], dry["field_errors"]) == (False, {field: [message]})
    assert failed_rules(dry) == ["cluster" if field == "cluster" else "storage"]
    assert TopicApplication.objects.count() == 0


def test_the_same_body_passes_on_a_fitting_cluster(people, api_for, make_cluster):
    make_cluster("dev-a", "dev", storage_level="memory")
    dry = api_for(people.dev).post("/api/v1/topic-applications/dry-run/", {**TOPIC, "storage_level": "memory"},
                                   format="json").json()
    assert (dry["passed"], dry["field_errors"]) == (True, {})
    checks = {c["rule"]: c["message"] for c in dry["checks"]}
    assert checks["cluster"] == "Cluster dev-a serves Development and is active."
    assert checks["storage"] == "The cluster offers this storage level."


def test_a_transactional_topic_passes_on_a_cluster_that_replicates_topics(people, api_for, make_cluster):
    """Transaction messages are replicated like any message (tests/broker/test_tx_replication.py): a
    transactional topic on a cluster whose topics get two replicas passes the policy."""
    from apps.clusters.actions import update_cluster

    made = make_cluster("dev-a")
    update_cluster(actor=people.admin, cluster=made, default_replication_factor=2)
    dry = api_for(people.dev).post("/api/v1/topic-applications/dry-run/", {**TOPIC, "transactional": True},
                                   format="json").json()
    assert (dry["passed"], dry["field_errors"]) == (True, {})
