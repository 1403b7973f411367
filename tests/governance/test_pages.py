"""The web pages beyond the browser flows: who sees what, forms' errors, SRE-only drift controls."""

import pytest

from apps.audit.models import AuditRecord
from apps.provisioning.models import ReconcileRun
from apps.topics.models import App

pytestmark = pytest.mark.django_db


@pytest.fixture
def topic(make_cluster, approved_topic):
    return approved_topic(make_cluster("dev-a", "dev"))


def as_user(client, user):
    client.force_login(user)
    return client


def test_nav_links_follow_the_role(client, people):
    dev = as_user(client, people.dev).get("/").content.decode()
    assert all(f'data-testid="{t}"' in dev for t in ("nav-topics", "nav-my-applications", "nav-new-topic",
                                                     "nav-new-binding"))
    assert 'data-testid="nav-approvals"' not in dev
    client.logout()
    lead = as_user(client, people.lead).get("/").content.decode()
    assert 'data-testid="nav-approvals"' in lead and 'data-testid="nav-new-topic"' not in lead
    client.logout()
    auditor = as_user(client, people.auditor).get("/").content.decode()
    assert 'data-testid="nav-topics"' in auditor and 'data-testid="nav-approvals"' not in auditor


def test_topic_pages_show_route_and_zookeeper_as_read_now(client, people, topic, zk_chroot):
    as_user(client, people.auditor)
    listing = client.get("/topics/?environment=dev").content.decode()
    assert "payments.order-paid" in listing
    page = client.get(f"/topics/{topic.pk}/").content.decode()
    assert f"chroot <code>{zk_chroot}/dev-a</code>" in page
    # approved but never pushed (no worker here): ZooKeeper is read and the topic is not there yet
    assert 'data-testid="sync-topic">pending<' in page and "read from ZooKeeper just now" in page


def test_topic_page_shows_partitions_and_replicas_and_where_a_replicated_topics_delays_wait(client, people, topic):
    as_user(client, people.auditor)
    page = client.get(f"/topics/{topic.pk}/").content.decode()
    assert 'data-testid="placement-size">1 / 1' in page and 'data-testid="replicated-note"' not in page
    topic.replication_factor = 2
    topic.save()
    page = client.get(f"/topics/{topic.pk}/").content.decode()
    assert 'data-testid="placement-size">1 / 2' in page
    assert 'data-testid="replicated-note"' in page and "kept by the replicas of partition 0" in page


def test_auditor_gets_no_forms(client, people, topic):
    as_user(client, people.auditor)
    assert client.get("/applications/topics/new/").status_code == 403
    assert client.get("/applications/bindings/new/").status_code == 403
    assert client.get("/apps/new/").status_code == 403
    application = topic.application
    page = client.get(f"/applications/topics/{application.pk}/").content.decode()
    assert 'data-testid="state">approved<' in page and 'data-testid="approve"' not in page
    assert client.post(f"/applications/topics/{application.pk}/withdraw/").status_code == 403


def test_app_form_shows_the_secret_once_and_rotation_shows_a_new_one(client, people):
    as_user(client, people.consumer)
    bad = client.post("/apps/new/", {"app_id": "Bad Id", "team": people.consumer.teams.get().pk})
    assert bad.status_code == 400 and 'data-testid="error-app_id"' in bad.content.decode()
    response = client.post("/apps/new/", {"app_id": "shipping-worker", "team": people.consumer.teams.get().pk})
    secret = response.context["secret"]
    assert secret.startswith("sy_") and secret in response.content.decode()
    detail = client.get("/apps/shipping-worker/").content.decode()
    assert secret not in detail and 'data-testid="rotate"' in detail
    rotated = client.post("/apps/shipping-worker/rotate-secret/")
    assert rotated.context["secret"] != secret
    assert App.objects.get().revision == 2
    client.logout()
    assert as_user(client, people.dev).post("/apps/shipping-worker/rotate-secret/").status_code == 403


def test_binding_form_is_prefilled_from_the_topic_and_explains_the_policy(client, people, topic):
    from apps.topics.actions import create_app

    create_app(actor=people.consumer, app_id="shipping-worker", team=people.consumer.teams.get())
    as_user(client, people.consumer)
    form = client.get(f"/applications/bindings/new/?topic={topic.pk}").content.decode()
    assert f'<option value="{topic.pk}" selected>' in form and "No broadcast on ordered topics" in form
    app = App.objects.get()
    response = client.post("/applications/bindings/new/", {
        "topic": topic.pk, "app": app.pk, "group": "shipping", "selector_kind": "exact",
        "selector_pattern": "refunded", "mode": "clustering", "delivery_limit": 5, "ttl_s": 60,
        "backoff_initial_ms": 100, "backoff_max_ms": 1000, "backoff_multiplier": 2, "max_in_flight": 4,
        "reason": "ship", "intent": "submit"})
    assert response.status_code == 400
    assert "matches none of payments.order-paid" in response.content.decode()
    saved = client.post("/applications/bindings/new/", {
        "topic": topic.pk, "app": app.pk, "group": "shipping", "selector_kind": "exact",
        "selector_pattern": "refunded", "mode": "clustering", "delivery_limit": 5, "ttl_s": 60,
        "backoff_initial_ms": 100, "backoff_max_ms": 1000, "backoff_multiplier": 2, "max_in_flight": 4,
        "reason": "ship", "intent": "draft"})
    assert saved.status_code == 302  # a draft is kept as it is; the policy runs when it is submitted
    detail = client.get(saved["Location"]).content.decode()
    assert 'data-testid="state">draft<' in detail and 'data-testid="submit"' in detail


def test_binding_form_gives_field_errors_and_policy_failures_in_one_round(client, people, topic):
    """A bad group name and a selector matching nothing: both said at once; the checks that read the bad field
    (group is free, group belongs to the app) wait for it; nothing is saved."""
    from apps.bindings.models import BindingApplication
    from apps.topics.actions import create_app

    create_app(actor=people.consumer, app_id="shipping-worker", team=people.consumer.teams.get())
    as_user(client, people.consumer)
    response = client.post("/applications/bindings/new/", {
        "topic": topic.pk, "app": App.objects.get().pk, "group": "Shipping Team", "selector_kind": "exact",
        "selector_pattern": "refunded", "mode": "clustering", "delivery_limit": 5, "ttl_s": 60,
        "backoff_initial_ms": 100, "backoff_max_ms": 1000, "backoff_multiplier": 2, "max_in_flight": 4,
        "reason": "ship", "intent": "submit"})
    assert response.status_code == 400
    errors = response.context["form"].errors
    assert set(errors) == {"group", "selector_pattern"}, errors
    assert len(errors["group"]) == 1 and "lowercase letters" in errors["group"][0]
    assert errors["selector_pattern"] == ["The selector matches none of payments.order-paid's message types "
                                          "(created, paid)."]
    assert BindingApplication.objects.count() == 0


def test_withdraw_from_the_page(client, people, make_cluster, topic_fields):
    from apps.topics.actions import create_topic_application

    application = create_topic_application(actor=people.dev, **topic_fields(make_cluster("dev-a", "dev")))
    as_user(client, people.dev)
    assert 'data-testid="withdraw"' in client.get(f"/applications/topics/{application.pk}/").content.decode()
    client.post(f"/applications/topics/{application.pk}/withdraw/")
    application.refresh_from_db()
    assert application.state == "withdrawn"
    mine = client.get("/applications/").content.decode()
    assert "withdrawn" in mine and f"/applications/topics/{application.pk}/" in mine


def test_drift_page_controls_are_for_sres(client, people, topic):
    as_user(client, people.auditor)
    page = client.get("/sync/").content.decode()
    assert "dev-a" in page and 'data-testid="repair-dev-a"' not in page
    assert client.post("/sync/dev-a/reconcile/", {"repair": "1"}).status_code == 403
    assert client.post("/sync/schedule/", {"every_seconds": 30, "enabled": "on"}).status_code == 403
    client.logout()

    as_user(client, people.sre)
    assert 'data-testid="repair-dev-a"' in client.get("/sync/").content.decode()
    response = client.post("/sync/dev-a/reconcile/", {"repair": "1"})
    run = ReconcileRun.objects.get()
    assert response["Location"] == f"/sync/runs/{run.pk}/"
    assert (run.missing, run.repaired, run.requested_by) == (3, 3, people.sre)  # /meta, the topic, its route
    assert "3 missing, 0 unexpected, 0 different; 3 repaired" in client.get(response["Location"]).content.decode()
    assert AuditRecord.objects.filter(action="zookeeper.repair").count() == 3
    bad = client.post("/sync/schedule/", {"every_seconds": 2, "enabled": "on"})
    assert bad.status_code == 400 and 'data-testid="error-every_seconds"' in bad.content.decode()
    assert client.post("/sync/schedule/", {"every_seconds": 30, "enabled": "on"}).status_code == 302
    from apps.provisioning.actions import reconcile_schedule

    assert reconcile_schedule().interval.every == 30
