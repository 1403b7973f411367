"""Lifecycle applications over REST, without a worker: what the policy refuses and why (nothing is saved), the
diff an approver reads, the approval slots, one numbering across every kind and the lookup by number."""

from datetime import timedelta

import pytest
from django.utils import timezone

from apps.audit.models import AuditRecord
from apps.lifecycle import actions as lifecycle
from apps.lifecycle.models import LifecycleApplication
from apps.topics import actions as topic_actions
from apps.topics.models import Topic
from tests.governance.lifecycle_helpers import apply, bind

pytestmark = pytest.mark.django_db

TOPIC = "payments.order-paid@dev"


def test_a_topic_change_shows_its_diff_and_waits_for_the_owning_team(people, api_for, estate):
    e = estate()
    response = apply(api_for, people.dev, operation="change", topic=TOPIC,
                     changes={"message_types": ["created", "paid", "refunded"], "retention_hours": 96,
                              "max_message_bytes": 8192, "description": "Paid orders"})
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["reference"] == f"C-{body['number']}" and body["kind_label"] == "topic change"
    assert (body["state"], body["target_kind"], body["team"], body["base_revision"]) == ("pending", "topic",
                                                                                         "payments", 1)
    # max_message_bytes is the current value: not part of the change
    assert body["changes"] == {"message_types": ["created", "paid", "refunded"], "retention_hours": 96,
                               "description": "Paid orders"}
    assert [(r["field"], r["before"], r["after"]) for r in body["diff"]] == [
        ("message_types", ["created", "paid"], ["created", "paid", "refunded"]),
        ("retention_hours", 48, 96), ("description", "Orders that were paid", "Paid orders")]
    assert body["diff"][0]["added"] == ["refunded"] and body["diff"][0]["removed"] == []
    assert [s["slot"] for s in body["required_approvals"]] == ["owner"]
    assert {c["rule"] for c in body["policy"]["checks"]} >= {"types-in-use", "retention-ttl", "one-open"}
    # the inbox of the topic's approver lists it with the others, by number and kind
    queue = api_for(people.lead).get("/api/v1/approvals/").json()["results"]
    assert [(q["reference"], q["kind_label"]) for q in queue] == [(body["reference"], "topic change")]
    assert e.topic.revision == Topic.objects.get(pk=e.topic.pk).revision == 1  # nothing applied yet
    record = AuditRecord.objects.get(action="lifecycle_application.create")
    assert record.object_repr.startswith(body["reference"]) and record.after["number"] == body["number"]


def test_removing_a_type_a_binding_receives_is_refused_with_the_reason(people, api_for, estate):
    estate()  # binding shipping receives exactly "paid"
    before = AuditRecord.objects.count()
    response = apply(api_for, people.dev, operation="change", topic=TOPIC, changes={"message_types": ["created"]})
    assert response.status_code == 400
    assert response.json()["message_types"] == [
        "Message type paid cannot be removed: binding shipping (app shipping-worker, selector exact 'paid') receives "
        "paid. Change or remove those bindings first (a binding change or removal application), then remove the "
        "type."]
    assert LifecycleApplication.objects.count() == 0 and AuditRecord.objects.count() == before


def test_a_binding_receiving_every_type_does_not_hold_on_to_one(people, api_for, estate):
    e = estate()
    bind(people, e.topic, e.consumer, group="audit-all", selector_kind="wildcard", selector_pattern="*")
    refused = apply(api_for, people.dev, operation="change", topic=TOPIC, changes={"message_types": ["paid"]})
    assert refused.status_code == 201, refused.content  # "created" is received by the * binding only


def test_bad_values_are_field_errors_and_change_nothing(people, api_for, estate):
    estate()
    response = apply(api_for, people.dev, operation="change", topic=TOPIC,
                     changes={"retention_hours": 0, "max_message_bytes": "big", "message_types": ["bad type!"]})
    assert response.status_code == 400
    errors = response.json()
    assert set(errors) == {"retention_hours", "max_message_bytes", "message_types"}
    assert "720" not in errors["retention_hours"][0] and "greater than or equal to 1" in errors["retention_hours"][0]
    unknown = apply(api_for, people.dev, operation="change", topic=TOPIC, changes={"name": "payments.other"})
    assert unknown.status_code == 400 and "name cannot be changed on a topic" in unknown.json()["changes"][0]
    same = apply(api_for, people.dev, operation="change", topic=TOPIC, changes={"retention_hours": 48})
    assert same.status_code == 400 and same.json()["changes"][0].startswith("Nothing would change")
    short = apply(api_for, people.dev, operation="change", topic=TOPIC, changes={"retention_hours": 0.5})
    assert short.status_code == 400
    ttl = apply(api_for, people.dev, operation="change", topic=TOPIC, changes={"retention_hours": 1} | {})
    assert ttl.status_code == 201  # TTL 3600 s fits a one-hour retention exactly
    assert LifecycleApplication.objects.count() == 1 and Topic.objects.get().retention_hours == 48


def test_a_retention_below_a_bindings_ttl_is_refused(people, api_for, estate):
    e = estate()
    bind(people, e.topic, e.consumer, group="slow", ttl_s=7200)
    response = apply(api_for, people.dev, operation="change", topic=TOPIC, changes={"retention_hours": 1})
    assert response.status_code == 400
    assert response.json()["retention_hours"][0].startswith("Binding slow keeps messages for delivery up to 7,200 s")


def test_one_open_application_per_object_and_only_the_owners_apply(people, api_for, estate):
    estate()
    first = apply(api_for, people.dev, operation="change", topic=TOPIC, changes={"retention_hours": 72}).json()
    second = apply(api_for, people.dev, operation="retire", topic=TOPIC)
    assert second.status_code == 400
    assert second.json()["topic"] == [f"Application {first['reference']} (topic change) is already pending for "
                                      "payments.order-paid@dev; wait for its decision or ask its applicant (dev-pay) "
                                      "to withdraw it."] or "already pending" in str(second.json())
    outsider = apply(api_for, people.consumer, operation="retire", topic=TOPIC)
    assert outsider.status_code == 400 and "payments" in outsider.json()["topic"][0]


def test_binding_change_removal_and_grant_revocation_name_their_target(people, api_for, estate):
    e = estate()
    change = apply(api_for, people.consumer, operation="change", binding=e.binding.pk,
                   changes={"selector_pattern": "created", "max_in_flight": 64})
    assert change.status_code == 201, change.content
    assert [(r["field"], r["before"], r["after"]) for r in change.json()["diff"]] == [
        ("selector_pattern", "paid", "created"), ("max_in_flight", 16, 64)]
    assert change.json()["team"] == "payments"  # the topic's owners approve changes of its bindings
    nothing = apply(api_for, people.consumer, operation="change", binding=e.binding.pk,
                    changes={"selector_pattern": "refunded"})
    assert nothing.status_code == 400 and "already pending" in str(nothing.json())
    revoke = apply(api_for, people.dev, operation="revoke", grant=e.grant.pk)  # the topic's side may revoke too
    assert revoke.status_code == 201 and revoke.json()["reference"].startswith("R-")
    wrong = apply(api_for, people.dev, operation="retire", binding=e.binding.pk)
    assert wrong.status_code == 400 and "operation" in wrong.json()
    missing = apply(api_for, people.dev, operation="remove")
    assert missing.status_code == 400 and "binding" in missing.json()


def test_a_production_change_needs_an_sre_too(people, api_for, estate):
    e = estate("prod")
    body = apply(api_for, people.dev, operation="change", topic="payments.order-paid@prod",
                 changes={"retention_hours": 96}).json()
    assert [s["slot"] for s in body["required_approvals"]] == ["owner", "sre"]
    url = f"/api/v1/lifecycle-applications/{body['id']}/approve/"
    assert api_for(people.lead).post(url, format="json").json()["state"] == "pending"
    assert Topic.objects.get(pk=e.topic.pk).retention_hours == 48
    approved = api_for(people.sre).post(url, format="json").json()
    assert approved["state"] in ("approved", "provisioning", "active") and approved["applied_revision"] == 2
    topic = Topic.objects.get(pk=e.topic.pk)
    assert (topic.retention_hours, topic.revision) == (96, 2)
    change = AuditRecord.objects.get(action="topic.change")
    assert (change.actor_name, change.before, change.after) == (
        "sre-1", {"retention_hours": 48, "revision": 1},
        {"retention_hours": 96, "revision": 2, "application": body["reference"]})


def test_a_retired_topics_name_is_taken_until_it_is_deleted(people, api_for, estate, topic_fields):
    e = estate()
    retire = apply(api_for, people.dev, operation="retire", topic=TOPIC).json()
    api_for(people.lead).post(f"/api/v1/lifecycle-applications/{retire['id']}/approve/", format="json")
    topic = Topic.objects.get(pk=e.topic.pk)
    assert topic.status == "retired" and topic.retired_at is not None
    body = {**{k: v for k, v in topic_fields(e.cluster).items() if k not in ("team", "cluster")},
            "team": "payments", "cluster": "dev-a"}
    refused = api_for(people.dev).post("/api/v1/topic-applications/", body, format="json")
    assert refused.status_code == 400
    message = refused.json()["name"][0]
    assert message.startswith(f"Topic payments.order-paid was retired on {topic.retired_at:%Y-%m-%d %H:%M} UTC; "
                              "its name is free again once its data is deleted")
    assert f"not before {topic.data_deleted_after:%Y-%m-%d %H:%M} UTC" in message and "1 binding drain" in message

    lifecycle.drop_backlog(actor=people.sre, binding=e.binding, backlog=0, confirmed=0)
    lifecycle.delete_topic(actor=people.sre, topic=topic, now=timezone.now() + timedelta(hours=49))
    assert Topic.objects.get(pk=topic.pk).status == "deleted"
    again = api_for(people.dev).post("/api/v1/topic-applications/", body, format="json")
    assert again.status_code == 201, again.content


def test_one_numbering_across_every_kind_and_lookup_by_number(people, api_for, estate, client):
    e = estate()
    app_off = apply(api_for, people.consumer, operation="deactivate", app="shipping-worker").json()
    numbers = [e.topic.application.number, e.binding.application.number, e.grant.application.number,
               app_off["number"]]
    assert len(set(numbers)) == 4 and numbers == sorted(numbers)
    assert [e.topic.application.reference, e.binding.application.reference, e.grant.application.reference,
            app_off["reference"]] == [f"T-{numbers[0]}", f"B-{numbers[1]}", f"G-{numbers[2]}", f"A-{numbers[3]}"]
    api = api_for(people.auditor)
    found = api.get(f"/api/v1/applications/B-{numbers[1]}/").json()
    assert (found["kind"], found["id"], found["url"].endswith(f"/binding-applications/{e.binding.application.pk}/")
            ) == ("binding", e.binding.application.pk, True)
    assert api.get(f"/api/v1/applications/{numbers[3]}/").json()["kind_label"] == "app deactivation"
    assert api.get(f"/api/v1/applications/T-{numbers[1]}/").status_code == 404  # B-n is no topic application
    assert api_for(None).get(f"/api/v1/applications/{numbers[0]}/").status_code in (401, 403)
    client.force_login(people.auditor)
    page = client.get(f"/applications/a-{numbers[3]}/")
    assert page.status_code == 302 and page.url == f"/applications/lifecycle/{app_off['id']}/"


def test_deactivating_an_app_goes_through_its_teams_approver(people, api_for, estate):
    e = estate()
    body = apply(api_for, people.consumer, operation="deactivate", app="shipping-worker").json()
    assert (body["team"], body["kind_label"]) == ("logistics", "app deactivation")
    assert api_for(people.lead).post(f"/api/v1/lifecycle-applications/{body['id']}/approve/",
                                     format="json").status_code == 403  # payments' approver: not their app
    approved = api_for(people.lead_log).post(f"/api/v1/lifecycle-applications/{body['id']}/approve/", format="json")
    assert approved.status_code == 200, approved.content
    e.consumer.refresh_from_db()
    assert (e.consumer.active, e.consumer.revision) == (False, 2)
    again = apply(api_for, people.consumer, operation="deactivate", app="shipping-worker")
    assert again.status_code == 400 and "is deactivated" in again.json()["app"][0]
    back = apply(api_for, people.consumer, operation="activate", app="shipping-worker")
    assert back.status_code == 201 and back.json()["kind_label"] == "app reactivation"
    assert topic_actions.rotate_app_secret  # the secret stays rotatable without an application
