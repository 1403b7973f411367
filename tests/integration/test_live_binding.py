"""A binding approved in the control plane (REST workflow → real Celery worker → ZooKeeper) is enforced by a
broker that is already running, within a second of its znode appearing, with no restart."""

from __future__ import annotations

import time

import pytest

from broker_core import protocol as p
from broker_core.client import BrokerError, Producer
from broker_core.layout import LAYOUT
from tests.broker.conftest import REPORTS
from tests.broker.conftest import wait_for as wait_closely  # polls every 20 ms
from tests.broker.helpers import RawConsumer
from tests.integration.conftest import CONSUMER_APP, TOPIC, binding_fields, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def creation_clock(zk, path: str) -> list[float]:
    """A ZooKeeper watch on `path`: the returned list gets the monotonic time at which the node appeared."""
    seen: list[float] = []

    def on_change(data, stat) -> bool:
        if stat is not None and not seen:
            seen.append(time.monotonic())
        return not seen  # keep watching until it exists

    zk.DataWatch(path, on_change)
    return seen


def test_a_binding_approved_through_rest_is_enforced_by_the_running_broker_within_a_second(governed, api_for):
    cluster, people = governed.cluster, governed.people
    broker = cluster.broker()
    pid, owner = broker.proc.pid, broker.owner()
    raw = RawConsumer(broker.address, CONSUMER_APP, governed.consumer_secret, TOPIC, "shipping-audit")
    try:
        with pytest.raises(BrokerError) as refused:
            raw.start()
        assert refused.value.code == p.E_NO_BINDING

        appeared = creation_clock(cluster.zk_client, cluster.chroot + LAYOUT.binding(TOPIC, "shipping-audit"))
        assert not appeared, "the binding's znode must not exist before the approval"
        created = api_for(people.consumer).post("/api/v1/binding-applications/",
                                                binding_fields(group="shipping-audit"), format="json")
        assert created.status_code == 201, created.content
        approved = api_for(people.lead).post(f"/api/v1/binding-applications/{created.json()['id']}/approve/",
                                             {"comment": "ok"}, format="json")
        assert approved.status_code == 200 and approved.json()["state"] == "approved", approved.content
        wait_for(lambda: appeared, 60, "the Celery worker to write the binding's znode", interval=0.005)

        def subscribed():
            try:
                return raw.request(lambda ref: p.Subscribe(ref, TOPIC, "shipping-audit", 10, 0))
            except BrokerError as exc:
                assert exc.code == p.E_NO_BINDING, exc
                return None

        answer = wait_closely(subscribed, 5, "the broker to accept the subscription")
        took = time.monotonic() - appeared[0]
        assert isinstance(answer, p.Subscribed)
        assert took < 1.0, f"the broker accepted the subscription {took:.2f}s after the binding's znode appeared"
        assert (broker.proc.pid, broker.proc.poll(), broker.owner()) == (pid, None, owner), \
            "the same broker process, never restarted nor re-registered"
        REPORTS.append(f"control-plane binding: enforced {took * 1000:.0f} ms after its znode appeared")

        raw.sub_id = answer.sub_id
        with Producer(**governed.producer) as producer:
            sent = producer.send(TOPIC, b"shipped", message_type="paid")
        wait_closely(lambda: raw.ids() == [sent], 5, "the delivery to the newly bound group")
        assert broker.group_stats(TOPIC, "shipping-audit")["consumers"] == 1
    finally:
        raw.close()
