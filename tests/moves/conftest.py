"""Fixtures of the topic-move tests: two broker clusters with one broker each (started once per module, on
their own ZooKeeper chroots), their control-plane twins, and per test a topic approved on the first with a
producer grant and a binding, provisioned by the real Celery worker."""

from __future__ import annotations

import shutil
import uuid
from types import SimpleNamespace

import pytest

from tests.broker.conftest import STATE, zk, zk_hosts  # noqa: F401  (the broker fixtures)
from tests.broker.conftest import Cluster as BrokerCluster
from tests.governance.conftest import (  # noqa: F401  (fixtures)
    approved_topic,
    paused_worker,
    people,
    topic_fields,
)
from tests.integration.conftest import binding_fields, wait_active

GROUP = "workers"


def _broker_cluster(zk_hosts, zk, name: str) -> BrokerCluster:  # noqa: F811
    state = STATE / "moves" / name
    shutil.rmtree(state, ignore_errors=True)
    state.mkdir(parents=True)
    cluster = BrokerCluster(zk_hosts, zk, name, state)
    cluster.broker()
    return cluster


@pytest.fixture(scope="module")
def broker_pair(zk_hosts, zk):  # noqa: F811
    """Clusters `a` and `b`, each one running broker, for every test of the module (tests use topics and apps
    of their own)."""
    suffix = uuid.uuid4().hex[:6]
    a = _broker_cluster(zk_hosts, zk, f"mv-a-{suffix}")
    b = _broker_cluster(zk_hosts, zk, f"mv-b-{suffix}")
    yield a, b
    for cluster in (a, b):
        cluster.teardown()
        shutil.rmtree(cluster.state, ignore_errors=True)


def twin(admin, broker_cluster, **fields):
    """The control plane's record of a broker cluster (same ZooKeeper chroot)."""
    from apps.clusters import actions

    defaults = {"environment": "dev", "region": "local", "storage_level": "file", "backcheck_allow_private": True}
    return actions.create_cluster(actor=admin, name=broker_cluster.name, zk_connect=broker_cluster.zk_hosts,
                                  zk_chroot=broker_cluster.chroot, **{**defaults, **fields})


@pytest.fixture
def moving(request, broker_pair, people, approved_topic, celery_worker):  # noqa: F811
    """A topic of its own on cluster a (app `p-…` granted to publish, app `c-…` bound in group `workers`),
    approved through the actions and provisioned by the worker; `b` and its twin are the move's target.
    Indirect parameters: more fields of the topic (e.g. transactional)."""
    from apps.accounts.models import Team
    from apps.bindings import actions as bindings
    from apps.topics import actions as topics
    from apps.topics.models import TopicApplication

    a, b = broker_pair
    tag = uuid.uuid4().hex[:8]
    cp_a, cp_b = twin(people.admin, a), twin(people.admin, b)
    topic = approved_topic(cp_a, name=f"payments.mv-{tag}", **getattr(request, "param", {}))
    producer, producer_secret = topics.create_app(actor=people.dev, app_id=f"p-{tag}",
                                                  team=Team.objects.get(name="payments"))
    consumer, consumer_secret = topics.create_app(actor=people.consumer, app_id=f"c-{tag}",
                                                  team=Team.objects.get(name="logistics"))
    grant = bindings.create_grant_application(actor=people.dev, topic=topic, app=producer, reason="publish")
    bindings.approve_grant_application(actor=people.lead, application=grant)
    fields = {**binding_fields(group=GROUP, delivery_limit=2, backoff_initial_ms=100, backoff_max_ms=200),
              "topic": topic, "app": consumer}
    binding = bindings.create_binding_application(actor=people.consumer, **fields)
    bindings.approve_binding_application(actor=people.lead, application=binding)
    wait_active(TopicApplication.objects.get(topic=topic), "the topic")
    wait_active(grant, "the grant")
    wait_active(binding, "the binding")
    return SimpleNamespace(a=a, b=b, cp_a=cp_a, cp_b=cp_b, topic=topic, name=topic.name, people=people,
                           producer_app=producer, producer_secret=producer_secret,
                           producer=a.client_kwargs(app=producer.app_id, secret=producer_secret),
                           consumer=a.client_kwargs(app=consumer.app_id, secret=consumer_secret))
