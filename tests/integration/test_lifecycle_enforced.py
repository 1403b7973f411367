"""Lifecycle applications enforced by a broker that is already running: each approved over REST, written into
ZooKeeper by the real Celery worker, and applied by the broker with no restart — a topic edit (a new message
type, a smaller size limit), a binding edit (its selector), a grant revocation, a binding removal, an app
deactivation; and a retired topic: publishes refused at once, its binding kept while the brokers report a
backlog, then gone with the topic once consumed and past retention (the sweep reads the real /admin/drain)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from apps.audit.models import AuditRecord
from apps.bindings.models import Binding
from apps.lifecycle import retirement
from apps.lifecycle.models import LifecycleApplication
from apps.topics.models import Topic
from broker_core import protocol as p
from broker_core.client import BrokerError, ConnectionLost, Consumer, Message, Producer
from control_plane import actors
from devstack.waiting import holds_within
from tests.broker.conftest import wait_for as wait_closely  # polls every 20 ms
from tests.broker.helpers import RawConsumer, Received
from tests.broker.tx_helpers import drain
from tests.governance.lifecycle_helpers import bind
from tests.integration.conftest import CONSUMER_APP, TOPIC, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def start_broker(governed):
    """A broker of the governed cluster under the control plane's name for it (the /meta the control plane
    writes names it so): a broker deletes data only of its own cluster."""
    return governed.cluster.broker("--cluster", governed.cp.name)


def approved(api_for, governed, approver, applicant, **body) -> dict:
    created = api_for(applicant).post("/api/v1/lifecycle-applications/", {"reason": "test", **body}, format="json")
    assert created.status_code == 201, created.content
    answer = api_for(approver).post(f"/api/v1/lifecycle-applications/{created.json()['id']}/approve/",
                                    {"comment": "ok"}, format="json")
    assert answer.status_code == 200, answer.content
    return answer.json()


def refusal(call) -> str | None:
    """The error code `call` raises (None when it goes through; "connection_lost" when the broker closed the
    connection under it, as it does to an app's connections the moment the app is deactivated)."""
    try:
        call()
    except BrokerError as exc:
        return exc.code
    except ConnectionLost:
        return "connection_lost"
    return None


def test_edits_revocation_removal_and_deactivation_are_enforced_by_the_running_broker(governed, api_for):
    people = governed.people
    broker = start_broker(governed)
    pid = broker.proc.pid
    raw = RawConsumer(broker.address, CONSUMER_APP, governed.consumer_secret, TOPIC, "shipping")
    raw.start()
    try:
        with Producer(**governed.producer) as producer:
            assert refusal(lambda: producer.send(TOPIC, b"r", message_type="refunded")) == p.E_INVALID
            approved(api_for, governed, people.lead, people.dev, operation="change", topic=f"{TOPIC}@dev",
                     changes={"message_types": ["created", "paid", "refunded"], "max_message_bytes": 1024})
            wait_closely(lambda: refusal(lambda: producer.send(TOPIC, b"r", message_type="refunded")) is None, 60,
                         "the broker to take the new message type")
            assert refusal(lambda: producer.send(TOPIC, b"x" * 2000, message_type="paid")) == p.E_INVALID

            # the binding's selector pa* gets paid only; changed to *, the group gets created too
            before = len(raw.deliveries)
            approved(api_for, governed, people.lead, people.consumer, operation="change",
                     binding=Binding.objects.get(group="shipping").pk,
                     changes={"selector_kind": "wildcard", "selector_pattern": "*"})

            def created_delivered() -> bool:
                sent = producer.send(TOPIC, b"c", message_type="created")
                return _within(lambda: sent in raw.ids(), 1.0)

            wait_for(created_delivered, 60, "the group to receive created messages")
            assert len(raw.deliveries) > before

            grant = governed.topic.grants.get()
            approved(api_for, governed, people.lead, people.dev, operation="revoke", grant=grant.pk)
            # checkout publishes nowhere else: its app node goes with the grant, so it is refused either way
            wait_closely(lambda: refusal(lambda: producer.send(TOPIC, b"p", message_type="paid")) in (
                p.E_NOT_GRANTED, p.E_AUTH_FAILED), 60, "the broker to refuse the revoked producer")

        # a second group keeps the consumer app in use on the cluster: removing shipping leaves the app there
        bind(people, governed.topic, Binding.objects.get(group="shipping").app, group="audit")
        wait_closely(lambda: bound(broker, "audit"), 60, "the broker to know group audit")
        approved(api_for, governed, people.lead, people.consumer, operation="remove",
                 binding=Binding.objects.get(group="shipping").pk)
        wait_closely(lambda: not bound(broker), 60, "the broker to drop the group's binding")
        again = RawConsumer(broker.address, CONSUMER_APP, governed.consumer_secret, TOPIC, "shipping")
        try:
            assert refusal(again.start) == p.E_NO_BINDING
        finally:
            again.close()

        approved(api_for, governed, people.lead_log, people.consumer, operation="deactivate", app=CONSUMER_APP)

        def consumer_refused():
            c = RawConsumer(broker.address, CONSUMER_APP, governed.consumer_secret, TOPIC, "audit")
            try:
                return refusal(c.start) == p.E_AUTH_FAILED
            finally:
                c.close()

        wait_closely(consumer_refused, 60, "the broker to refuse the deactivated app")
    finally:
        raw.close()
    assert (broker.proc.pid, broker.proc.poll()) == (pid, None), "the same broker process, never restarted"
    for application in LifecycleApplication.objects.all():
        wait_closely(lambda a=application: LifecycleApplication.objects.get(pk=a.pk).state == "active", 60,
                     f"{application} to be active")
    assert {"topic.change", "binding.change", "grant.revoke", "binding.remove", "app.deactivate"} <= set(
        AuditRecord.objects.values_list("action", flat=True))


def bound(broker, group: str = "shipping") -> bool:
    """Whether the broker has the group's binding (from its view of ZooKeeper)."""
    return bool(drain(broker, TOPIC)["groups"].get(group, {}).get("bound"))


def _within(predicate, seconds: float) -> bool:
    """Whether `predicate` holds within `seconds` (polled every 20 ms)."""
    return holds_within(predicate, seconds)


def test_a_retired_topic_refuses_publishes_drains_its_binding_then_is_deleted(governed, api_for):
    people = governed.people
    broker = start_broker(governed)
    with Producer(**governed.producer) as producer:
        sent = producer.send_many(TOPIC, [Message(b, message_type="paid") for b in (b"1", b"2", b"3")])
        approved(api_for, governed, people.lead, people.dev, operation="retire", topic=f"{TOPIC}@dev")
        # probes of type created: group shipping (selector pa*) does not receive them
        late = lambda: producer.send(TOPIC, b"late", message_type="created")  # noqa: E731
        wait_closely(lambda: refusal(late) == p.E_TOPIC_RETIRED, 60, "the broker to refuse new messages")
    assert drain(broker, TOPIC)["groups"]["shipping"]["backlog"] == 3

    later = timezone.now() + timedelta(hours=49)
    assert retirement.sweep(actor=actors.RETIREMENT, now=later) == {
        "topics": 1, "bindings_retired": 0, "topics_deleted": 0, "unread": []}
    assert Binding.objects.get(group="shipping").status == "active"  # it still holds 3 messages

    got = Received()
    with Consumer(TOPIC, "shipping", got.handler("c"), **governed.consumer):
        wait_closely(lambda: sorted(got.ids("c")) == sorted(sent), 20, "the backlog to be consumed")
        wait_closely(lambda: drain(broker, TOPIC)["groups"]["shipping"]["backlog"] == 0, 10, "the acks")
    summary = retirement.sweep(actor=actors.RETIREMENT, now=later)
    assert (summary["bindings_retired"], summary["topics_deleted"]) == (1, 1)
    assert Topic.objects.get(pk=governed.topic.pk).status == "deleted"
    wait_closely(lambda: not drain(broker, TOPIC)["held"], 60, "the broker to delete the topic's data")
    drained = AuditRecord.objects.get(action="binding.drained")
    assert drained.actor_name == "system:retirement" and drained.after["figures"]["backlog"] == 0


def test_an_sre_drops_a_backlog_naming_its_size(governed, api_for, client):
    people = governed.people
    broker = start_broker(governed)
    with Producer(**governed.producer) as producer:
        producer.send_many(TOPIC, [Message(b, message_type="paid") for b in (b"1", b"2")])
    approved(api_for, governed, people.lead, people.dev, operation="retire", topic=f"{TOPIC}@dev")
    binding = Binding.objects.get(group="shipping")
    client.force_login(people.sre)
    url = f"/bindings/{binding.pk}/drop-backlog/"
    page = client.get(url).content.decode()
    assert 'data-testid="backlog-count">2<' in page
    refused = client.post(url, {"confirm_backlog": "1"})
    assert refused.status_code == 400 and "holds 2 messages now" in refused.content.decode()
    assert client.post(url, {"confirm_backlog": "2"}).status_code == 302
    assert Binding.objects.get(pk=binding.pk).status == "retired"
    wait_closely(lambda: "shipping" not in drain(broker, TOPIC)["groups"], 60, "the group and its backlog dropped")
    dropped = AuditRecord.objects.get(action="binding.drop_backlog")
    assert (dropped.actor_name, dropped.after["backlog"], dropped.after["confirmed"]) == ("sre-1", 2, 2)
