"""Apps and their secrets, binding and producer-grant applications over REST, and the routes endpoint."""

import base64
import hashlib
import hmac

import pytest

from apps.audit.models import AuditRecord
from apps.bindings.models import Binding, BindingApplication, ProducerGrant
from apps.topics.models import App

pytestmark = pytest.mark.django_db


@pytest.fixture
def topic(make_cluster, approved_topic):
    return approved_topic(make_cluster("dev-a", "dev"))


@pytest.fixture
def consumer_app(people):
    from apps.topics.actions import create_app

    app, _ = create_app(actor=people.consumer, app_id="shipping-worker", team=people.consumer.teams.get())
    return app


def binding_body(**overrides):
    return {"topic": "payments.order-paid@dev", "app": "shipping-worker", "group": "shipping",
            "selector_kind": "wildcard", "selector_pattern": "pa*", "mode": "clustering", "delivery_limit": 5,
            "ttl_s": 3600, "backoff_initial_ms": 500, "backoff_max_ms": 30000, "backoff_multiplier": 2.0,
            "max_in_flight": 16, "reason": "Ship paid orders", **overrides}


def stdlib_verify(secret: str, stored: str) -> bool:
    """The stored form of docs/zookeeper-layout.md, checked with the standard library alone."""
    algorithm, salt, expected = stored.split("$", 2)
    digest = hmac.new(salt.encode(), secret.encode(), hashlib.sha256).digest()
    return algorithm == "hmac_sha256" and hmac.compare_digest(base64.b64encode(digest).decode(), expected)


def test_app_secret_is_shown_once_stored_hashed_and_rotated(people, api_for):
    api = api_for(people.consumer)
    response = api.post("/api/v1/apps/", {"app_id": "shipping-worker", "team": "logistics"}, format="json")
    assert response.status_code == 201, response.content
    secret = response.json()["secret"]
    app = App.objects.get(app_id="shipping-worker")
    algorithm, salt, digest = app.secret_hash.split("$")
    assert algorithm == "hmac_sha256" and len(base64.urlsafe_b64decode(salt + "==")) == 16
    assert len(base64.b64decode(digest)) == 32
    # 256 random bits: 43 URL-safe base64 characters after the prefix
    assert secret.startswith("sy_") and len(base64.urlsafe_b64decode(secret[3:] + "=")) == 32
    assert secret not in app.secret_hash and stdlib_verify(secret, app.secret_hash)
    assert "secret" not in api.get("/api/v1/apps/shipping-worker/").json()
    created = AuditRecord.objects.get(action="app.create")
    assert "secret_hash" not in created.after

    rotated = api.post("/api/v1/apps/shipping-worker/rotate-secret/", format="json").json()
    app.refresh_from_db()
    assert rotated["secret"] != secret and rotated["revision"] == 2
    assert stdlib_verify(rotated["secret"], app.secret_hash) and not stdlib_verify(secret, app.secret_hash)
    assert AuditRecord.objects.filter(action="app.rotate_secret").count() == 1
    # only the owning team rotates
    assert api_for(people.dev).post("/api/v1/apps/shipping-worker/rotate-secret/", format="json").status_code == 403
    assert api_for(people.auditor).post("/api/v1/apps/", {"app_id": "x-app", "team": "logistics"},
                                        format="json").status_code == 403


def test_app_for_a_team_one_is_not_in_is_a_field_error(people, api_for):
    response = api_for(people.consumer).post("/api/v1/apps/", {"app_id": "sneaky", "team": "payments"},
                                             format="json")
    assert response.status_code == 400 and response.json() == {"team": ["You are not a member of team payments."]}
    assert not App.objects.exists()


def test_binding_is_approved_by_the_topic_owners_team(people, api_for, topic, consumer_app):
    response = api_for(people.consumer).post("/api/v1/binding-applications/", binding_body(), format="json")
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["state"] == "pending" and body["topic"] == topic.pk
    selector = next(c for c in body["policy"]["checks"] if c["rule"] == "selector-matches")
    assert selector["message"] == "The selector receives paid."
    url = f"/api/v1/binding-applications/{body['id']}/approve/"
    # the consumer's own team lead does not approve access to someone else's topic
    assert api_for(people.lead_log).post(url, format="json").status_code == 403
    approved = api_for(people.lead).post(url, {"comment": "ok"}, format="json").json()
    assert approved["state"] == "approved"
    binding = Binding.objects.get()
    assert (binding.group, binding.app, binding.selector_pattern, binding.delivery_limit) == (
        "shipping", consumer_app, "pa*", 5)
    assert sorted(s["kind"] for s in approved["sync"]) == ["app", "binding"]
    listed = api_for(people.auditor).get("/api/v1/bindings/?topic=payments.order-paid").json()
    assert [b["group"] for b in listed["results"]] == ["shipping"]


@pytest.mark.parametrize("overrides, field, message", [
    ({"mode": "broadcast"}, "mode", "Topic payments.order-paid is ordered: consume it in clustering mode."),
    ({"selector_kind": "exact", "selector_pattern": "refunded"}, "selector_pattern",
     "The selector matches none of payments.order-paid's message types (created, paid)."),
    ({"ttl_s": 100 * 3600}, "ttl_s",
     "The TTL (360000s) is longer than payments.order-paid keeps messages (172800s)."),
])
def test_binding_policy_refusals_are_explained(people, api_for, make_cluster, approved_topic, consumer_app,
                                               overrides, field, message):
    approved_topic(make_cluster("dev-a", "dev"), ordered=True)
    response = api_for(people.consumer).post("/api/v1/binding-applications/", binding_body(**overrides),
                                             format="json")
    assert response.status_code == 400
    assert response.json() == {field: [message]}
    assert not BindingApplication.objects.exists()


def test_binding_shape_errors(people, api_for, topic, consumer_app):
    bad = binding_body(selector_kind="regex", selector_pattern="(unclosed", group="Bad Group", delivery_limit=0,
                       backoff_initial_ms=5000, backoff_max_ms=1000)
    response = api_for(people.consumer).post("/api/v1/binding-applications/", bad, format="json")
    assert response.status_code == 400
    errors = response.json()
    assert set(errors) == {"group", "delivery_limit"}  # the serializer's own checks come first
    response = api_for(people.consumer).post("/api/v1/binding-applications/", binding_body(
        selector_kind="regex", selector_pattern="(unclosed", backoff_initial_ms=5000, backoff_max_ms=1000),
        format="json")
    errors = response.json()
    assert errors["selector_pattern"][0].startswith("Not a valid regular expression")
    assert errors["backoff_max_ms"] == ["The longest retry wait cannot be shorter than the first one."]
    assert not BindingApplication.objects.exists()


def test_group_belongs_to_the_app_that_first_used_it(people, api_for, topic, consumer_app):
    from apps.topics.actions import create_app

    first = api_for(people.consumer).post("/api/v1/binding-applications/", binding_body(), format="json").json()
    api_for(people.lead).post(f"/api/v1/binding-applications/{first['id']}/approve/", format="json")
    create_app(actor=people.consumer, app_id="other-worker", team=people.consumer.teams.get())
    response = api_for(people.consumer).post("/api/v1/binding-applications/",
                                             binding_body(app="other-worker"), format="json")
    assert response.status_code == 400
    assert response.json()["group"] == ["Group shipping is already bound to payments.order-paid.",
                                        "Group shipping belongs to app shipping-worker; choose another group name."]


def test_binding_with_another_teams_app_is_refused(people, api_for, topic, consumer_app):
    response = api_for(people.dev).post("/api/v1/binding-applications/", binding_body(), format="json")
    assert response.status_code == 400
    assert response.json() == {"app": ["You are not a member of team logistics."]}


def test_producer_grant_flow(people, api_for, topic):
    from apps.topics.actions import create_app

    create_app(actor=people.dev, app_id="checkout", team=people.dev.teams.get())
    api = api_for(people.dev)
    body = api.post("/api/v1/grant-applications/", {"topic": topic.pk, "app": "checkout", "reason": "publish"},
                    format="json").json()
    assert body["state"] == "pending"
    # the applicant cannot approve, even as a member of the owning team
    lead = api_for(people.lead)
    assert lead.post(f"/api/v1/grant-applications/{body['id']}/approve/", format="json").json()["state"] == "approved"
    grant = ProducerGrant.objects.get()
    assert (grant.topic, grant.app.app_id) == (topic, "checkout")
    again = api.post("/api/v1/grant-applications/", {"topic": topic.pk, "app": "checkout", "reason": "again"},
                     format="json")
    assert again.status_code == 400 and again.json() == {"app": ["App checkout may already publish on "
                                                                 "payments.order-paid."]}


def test_routes_answer_which_cluster_serves_a_topic(people, api_for, topic, zk_connect, zk_chroot):
    api = api_for(people.consumer)
    response = api.get("/api/v1/routes/payments.order-paid/?environment=dev")
    assert response.status_code == 200
    assert response.json() == {
        "topic": "payments.order-paid", "environment": "dev", "version": 1, "produce": "dev-a",
        "consume": ["dev-a"], "clusters": {"dev-a": f"{zk_connect}{zk_chroot}/dev-a"}, "status": "active",
        "cluster": "dev-a", "zk_connect": zk_connect,
        "zk_chroot": f"{zk_chroot}/dev-a", "zk_hosts": f"{zk_connect}{zk_chroot}/dev-a", "layout_version": 3,
        "revision": 1, "ordered": False, "transactional": False, "message_types": ["created", "paid"],
        "sync_state": "pending"}  # approved, not pushed yet: nothing has been read back from ZooKeeper
    missing_env = api.get("/api/v1/routes/payments.order-paid/")
    assert missing_env.status_code == 400 and "environment" in missing_env.json()
    assert api.get("/api/v1/routes/payments.order-paid/?environment=moon").status_code == 400
    assert api.get("/api/v1/routes/payments.order-paid/?environment=prod").status_code == 404
    assert [r["topic"] for r in api.get("/api/v1/routes/?environment=dev").json()] == ["payments.order-paid"]
    assert api_for(None).get("/api/v1/routes/payments.order-paid/?environment=dev").status_code == 401
