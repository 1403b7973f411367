"""Issue 21 item 1, the binding's side: `on_failure` (block | dead_letter) is asked by a binding application through
REST and the form, kept on the binding and shown on its page; a bad value, or dead_letter on a topic that is not
ordered, is a field error and nothing is made."""

import pytest

from apps.bindings.models import Binding, BindingApplication
from apps.topics.models import App
from tests.governance.test_bindings_api import binding_body

pytestmark = pytest.mark.django_db

NOT_ORDERED = ("Topic payments.order-paid is not ordered: on failure dead-letter applies to ordered topics only; "
               "leave it at block.")


@pytest.fixture
def consumer_app(people):
    from apps.topics.actions import create_app

    app, _ = create_app(actor=people.consumer, app_id="shipping-worker", team=people.consumer.teams.get())
    return app


def test_dead_letter_on_an_ordered_topic_is_kept_listed_and_shown(people, api_for, client, make_cluster,
                                                                  approved_topic, consumer_app):
    approved_topic(make_cluster("dev-a", "dev"), ordered=True)
    created = api_for(people.consumer).post("/api/v1/binding-applications/", binding_body(on_failure="dead_letter"),
                                            format="json")
    assert created.status_code == 201, created.content
    assert created.json()["on_failure"] == "dead_letter"
    approved = api_for(people.lead).post(f"/api/v1/binding-applications/{created.json()['id']}/approve/",
                                         format="json")
    assert approved.status_code == 200, approved.content
    binding = Binding.objects.get()
    assert binding.on_failure == "dead_letter"
    listed = api_for(people.auditor).get("/api/v1/bindings/?topic=payments.order-paid").json()["results"]
    assert [(b["group"], b["on_failure"]) for b in listed] == [("shipping", "dead_letter")]
    client.force_login(people.consumer)
    page = client.get(f"/bindings/{binding.pk}/").content.decode()
    assert 'data-testid="on-failure">Dead-letter the message at the delivery limit and go on with the key' in page


def test_left_out_it_is_block(people, api_for, make_cluster, approved_topic, consumer_app):
    approved_topic(make_cluster("dev-a", "dev"))
    created = api_for(people.consumer).post("/api/v1/binding-applications/", binding_body(), format="json")
    assert created.status_code == 201 and created.json()["on_failure"] == "block"


@pytest.mark.parametrize("ordered, value, message", [
    (True, "skip", '"skip" is not a valid choice.'),
    (False, "dead_letter", NOT_ORDERED),
])
def test_a_bad_on_failure_is_a_field_error_and_nothing_is_made(people, api_for, make_cluster, approved_topic,
                                                               consumer_app, ordered, value, message):
    approved_topic(make_cluster("dev-a", "dev"), ordered=ordered)
    response = api_for(people.consumer).post("/api/v1/binding-applications/", binding_body(on_failure=value),
                                             format="json")
    assert response.status_code == 400
    assert response.json() == {"on_failure": [message]}
    assert not BindingApplication.objects.exists() and not Binding.objects.exists()


def test_the_form_asks_it_and_refuses_dead_letter_on_a_topic_not_ordered(people, client, make_cluster,
                                                                         approved_topic, consumer_app):
    topic = approved_topic(make_cluster("dev-a", "dev"))
    client.force_login(people.consumer)
    form = client.get(f"/applications/bindings/new/?topic={topic.pk}").content.decode()
    assert 'name="on_failure"' in form and "Dead-lettering is for ordered topics" in form
    fields = {"topic": topic.pk, "app": App.objects.get().pk, "group": "shipping", "selector_kind": "wildcard",
              "selector_pattern": "*", "mode": "clustering", "delivery_limit": 5, "ttl_s": 60,
              "backoff_initial_ms": 100, "backoff_max_ms": 1000, "backoff_multiplier": 2, "max_in_flight": 4,
              "reason": "ship", "intent": "submit"}
    for value, error in (("skip", "Select a valid choice. skip is not one of the available choices."),
                         ("dead_letter", NOT_ORDERED)):
        response = client.post("/applications/bindings/new/", {**fields, "on_failure": value})
        assert response.status_code == 400
        assert response.context["form"].errors == {"on_failure": [error]}
    assert not BindingApplication.objects.exists()


def test_a_binding_change_to_dead_letter_on_a_topic_not_ordered_is_refused(people, api_for, estate):
    from apps.lifecycle.models import LifecycleApplication
    from tests.governance.lifecycle_helpers import apply

    e = estate()  # payments.order-paid, not ordered, bound by group shipping
    for value, message in (("dead_letter", NOT_ORDERED), ("skip", "Value 'skip' is not a valid choice.")):
        response = apply(api_for, people.consumer, operation="change", binding=e.binding.pk,
                         changes={"on_failure": value})
        assert response.status_code == 400, response.content
        errors = response.json()
        assert errors == {"on_failure": [message]}, errors
    assert not LifecycleApplication.objects.exists()
    assert Binding.objects.get().on_failure == "block"
