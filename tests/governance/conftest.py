"""Fixtures of the governance tests: a team with its people, clusters on the test ZooKeeper, a real
Celery worker process on the test database, and helpers to read ZooKeeper and wait for a state."""

from __future__ import annotations

import pytest


@pytest.fixture
def people(make_user):
    """The cast: payments owns topics; logistics consumes them."""
    from types import SimpleNamespace

    return SimpleNamespace(
        dev=make_user("dev-pay", "developer", team="payments"),
        lead=make_user("lead-pay", "approver", team="payments"),
        sre=make_user("sre-1", "sre"),
        auditor=make_user("audit-1", "auditor"),
        consumer=make_user("dev-log", "developer", team="logistics"),
        lead_log=make_user("lead-log", "approver", team="logistics"),
        admin=make_user("root", "admin", superuser=True),
    )


@pytest.fixture
def zk(zk_connect):
    """A client authenticated as the control plane (it may read /apps, which brokers and it alone may)."""
    from tests.support.stack import control_zk_client

    client = control_zk_client(zk_connect, timeout=5)
    client.start(timeout=5)
    yield client
    client.stop()
    client.close()


def read_node(zk, path: str):
    import json

    from kazoo.exceptions import NoNodeError

    try:
        data, _ = zk.get(path)
    except NoNodeError:
        return None
    return json.loads(data)


@pytest.fixture
def make_cluster(people, zk_connect, zk_chroot):
    from apps.clusters import actions

    def make(name="dev-a", environment="dev", chroot_suffix=None, connect=None, storage_level="file"):
        return actions.create_cluster(actor=people.admin, name=name, environment=environment, region="local",
                                      zk_connect=connect or zk_connect,
                                      zk_chroot=f"{zk_chroot}/{chroot_suffix or name}",
                                      storage_level=storage_level)

    return make


TOPIC = {
    "name": "payments.order-paid", "environment": "dev", "message_types": ["created", "paid"],
    "expected_peak_mps": 500, "max_message_bytes": 8192, "retention_hours": 48, "storage_level": "file",
    "transactional": False, "ordered": False, "description": "Orders that were paid", "reason": "Billing needs it",
}


@pytest.fixture
def topic_fields(people):
    """make(cluster, **overrides) → keyword arguments for create_topic_application."""
    from apps.accounts.models import Team

    def make(cluster, **overrides):
        return {**TOPIC, "team": Team.objects.get(name="payments"), "cluster": cluster,
                "environment": cluster.environment, **overrides}

    return make


@pytest.fixture
def approved_topic(people, topic_fields):
    """An approved, provisioned-or-not topic on the given cluster (through the actions)."""
    from apps.topics import actions

    def make(cluster, **overrides):
        application = actions.create_topic_application(actor=people.dev, **topic_fields(cluster, **overrides))
        application = actions.approve_topic_application(actor=people.lead, application=application, comment="ok")
        if cluster.environment == "prod":
            application = actions.approve_topic_application(actor=people.sre, application=application)
        return application.topic

    return make


QUEUE = "celery"  # the default queue the provisioning tasks go to


@pytest.fixture
def paused_worker(celery_worker):
    """pause() stops the worker taking tasks (they wait in Redis); resume() lets it go on."""
    from control_plane.celery import app

    names = [name for reply in app.control.ping(timeout=2) for name in reply]
    paused = []

    def pause():
        app.control.cancel_consumer(QUEUE, destination=names, reply=True, timeout=5)
        paused.append(True)

    def resume():
        app.control.add_consumer(QUEUE, destination=names, reply=True, timeout=5)
        paused.clear()

    yield pause, resume
    if paused:
        resume()


@pytest.fixture
def estate(people, make_cluster, approved_topic):
    """estate(environment="dev", **topic overrides): a topic with a binding and a grant (lifecycle_helpers)."""
    from tests.governance.lifecycle_helpers import make_estate

    return lambda environment="dev", **overrides: make_estate(people, make_cluster, approved_topic, environment,
                                                              **overrides)
