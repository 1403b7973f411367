"""Fixtures of the tests that run the control plane and real brokers together: a broker test cluster whose
topic, apps, grant and first binding came through the governance workflow and were written into its
ZooKeeper by the real Celery worker (the control plane's provisioning code), not by a test helper."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from devstack.waiting import wait_for  # noqa: F401  (the integration tests import it from here)
from tests.broker.conftest import cluster, zk, zk_hosts  # noqa: F401  (the broker fixtures)
from tests.governance.conftest import (  # noqa: F401  (fixtures)
    approved_topic,
    people,
    topic_fields,
)

TOPIC = "payments.order-paid"  # tests.governance.conftest.TOPIC's name: message types created and paid
PRODUCER_APP = "checkout"
CONSUMER_APP = "shipping-worker"


def binding_fields(**overrides) -> dict:
    """A binding application of the consumer app (REST body shape; `topic` as name@environment)."""
    return {"topic": f"{TOPIC}@dev", "app": CONSUMER_APP, "group": "shipping", "selector_kind": "wildcard",
            "selector_pattern": "pa*", "mode": "clustering", "delivery_limit": 5, "ttl_s": 3600,
            "backoff_initial_ms": 500, "backoff_max_ms": 30000, "backoff_multiplier": 2.0, "max_in_flight": 16,
            "reason": "Ship paid orders", **overrides}


def wait_active(application, what: str) -> None:
    from apps.governance.workflow import State

    wait_for(lambda: type(application).objects.get(pk=application.pk).state == State.ACTIVE, 60,
             f"{what} to be provisioned (application active)")


@pytest.fixture
def governed(cluster, people, approved_topic, celery_worker):  # noqa: F811
    """The broker cluster `cluster` (no broker started yet) and its control-plane twin, holding: the topic
    (payments'), app `checkout` (payments) granted to publish on it, app `shipping-worker` (logistics)
    bound in group `shipping` — each approved through the actions and provisioned by the Celery worker."""
    from tests.transactions.helpers import control_plane_cluster

    return govern(cluster, control_plane_cluster(people.admin, cluster), people, approved_topic)


def govern(cluster, cp, people, approved_topic):  # noqa: F811
    """`governed` on the control-plane cluster `cp` (set up by the caller: its partition defaults, say)."""
    from apps.accounts.models import Team
    from apps.bindings import actions as bindings
    from apps.topics import actions as topics
    from apps.topics.models import TopicApplication

    topic = approved_topic(cp)
    producer, producer_secret = topics.create_app(actor=people.dev, app_id=PRODUCER_APP,
                                                  team=Team.objects.get(name="payments"))
    consumer, consumer_secret = topics.create_app(actor=people.consumer, app_id=CONSUMER_APP,
                                                  team=Team.objects.get(name="logistics"))
    grant = bindings.create_grant_application(actor=people.dev, topic=topic, app=producer, reason="publish")
    bindings.approve_grant_application(actor=people.lead, application=grant)
    fields = {**binding_fields(), "topic": topic, "app": consumer}
    binding = bindings.create_binding_application(actor=people.consumer, **fields)
    bindings.approve_binding_application(actor=people.lead, application=binding)
    # the writes above race the worker's provisioning of each earlier approval (see docs/governance.md, lock order)
    wait_active(TopicApplication.objects.get(topic=topic), "the topic")
    wait_active(grant, "the grant")
    wait_active(binding, "the binding")
    return SimpleNamespace(cluster=cluster, cp=cp, topic=topic, people=people,
                           producer=cluster.client_kwargs(app=PRODUCER_APP, secret=producer_secret),
                           consumer=cluster.client_kwargs(app=CONSUMER_APP, secret=consumer_secret),
                           consumer_secret=consumer_secret)
