"""A move refuses up front what it cannot do safely: each refusal says why under the field concerned, and
nothing changes (no move, no placement, no route change, no audit record, nothing in the target's ZooKeeper)."""

from __future__ import annotations

import socket
import uuid

import pytest
from django.core.exceptions import ValidationError

from broker_core.layout import LAYOUT
from tests.broker.conftest import Cluster as BrokerCluster
from tests.moves.conftest import twin

pytestmark = pytest.mark.django_db(transaction=True)


def snapshot(topic):
    from apps.audit.models import AuditRecord
    from apps.moves.models import TopicMove
    from apps.provisioning.models import Placement
    from apps.topics.models import Topic

    fresh = Topic.objects.get(pk=topic.pk)
    return (TopicMove.objects.count(), Placement.objects.count(), fresh.route_version, fresh.cluster_id,
            AuditRecord.objects.count())


def refusal(actor, topic, target, **kwargs) -> dict[str, list[str]]:
    from apps.moves import actions

    with pytest.raises(ValidationError) as refused:
        actions.start_move(actor=actor, topic=topic, target=target, **kwargs)
    return refused.value.message_dict


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_each_refusal_says_why_and_changes_nothing(moving, approved_topic, zk, zk_hosts, settings):
    from apps.clusters import actions as clusters
    from apps.topics.models import Topic

    settings.SWITCHYARD_ZK_TIMEOUT = 1
    sre, topic, admin = moving.people.sre, moving.topic, moving.people.admin
    before = snapshot(topic)
    tag = uuid.uuid4().hex[:6]

    said = refusal(sre, topic, moving.cp_a)
    assert "already serves" in said["target"][0]

    other_env = clusters.create_cluster(
        actor=admin, name=f"mv-test-{tag}", environment="test", region="local", zk_connect=zk_hosts,
        zk_chroot=f"/sy-moves-tests/test-{tag}")
    assert "within its environment" in refusal(sre, topic, other_env)["target"][0]

    memory = clusters.create_cluster(actor=admin, name=f"mv-mem-{tag}", environment="dev", region="local",
                                     zk_connect=zk_hosts, zk_chroot=f"/sy-moves-tests/mem-{tag}",
                                     storage_level="memory")
    assert "memory only" in refusal(sre, topic, memory)["target"][0]

    unreachable = clusters.create_cluster(actor=admin, name=f"mv-gone-{tag}", environment="dev", region="local",
                                          zk_connect=f"127.0.0.1:{closed_port()}", zk_chroot="/nowhere")
    said = refusal(sre, topic, unreachable)["target"][0]
    assert "unreachable" in said and unreachable.name in said

    empty = BrokerCluster(zk_hosts, zk, f"mv-empty-{tag}", moving.a.state)  # a chroot where no broker registered
    try:
        no_broker = twin(admin, empty)
        assert "No broker of the target cluster" in refusal(sre, topic, no_broker)["target"][0]
    finally:
        empty.teardown()

    assert "move or discard" in refusal(sre, topic, moving.cp_b, dead_letters="keep")["dead_letters"][0]
    assert "from 1 to 60" in refusal(sre, topic, moving.cp_b, client_follow_s=0)["client_follow_s"][0]

    ordered = approved_topic(moving.cp_a, name=f"payments.ordered-{tag}", ordered=True)
    said = refusal(sre, ordered, moving.cp_b)["topic"][0]
    assert "drain barrier" in said and "is not built yet" in said and "Ordered topics are not moved" in said

    Topic.objects.filter(pk=topic.pk).update(status="retired")
    try:
        assert "only active topics move" in refusal(sre, Topic.objects.get(pk=topic.pk), moving.cp_b)["topic"][0]
    finally:
        Topic.objects.filter(pk=topic.pk).update(status="active")

    assert snapshot(topic)[:4] == before[:4]  # the ordered topic's approval wrote audit records of its own
    assert not moving.b.zk_client.exists(moving.b.chroot + LAYOUT.topic(moving.name))


def test_a_second_move_of_a_topic_is_refused_while_one_is_open(moving, paused_worker):
    from apps.moves import actions
    from apps.moves.models import TopicMove
    from tests.moves.helpers import wait_state

    pause, resume = paused_worker
    pause()  # the first move waits in the queue: open, not advancing yet
    first = actions.start_move(actor=moving.people.sre, topic=moving.topic, target=moving.cp_b)
    said = refusal(moving.people.sre, moving.topic, moving.cp_b)["topic"][0]
    assert f"Move #{first.pk}" in said and "roll it back" in said
    assert TopicMove.objects.count() == 1
    actions.rollback_move(actor=moving.people.sre, move=first)
    resume()
    wait_state(first, "rolled_back")


def test_developers_may_not_move_topics(moving):
    from django.core.exceptions import PermissionDenied

    from apps.moves import actions

    with pytest.raises(PermissionDenied):
        actions.start_move(actor=moving.people.dev, topic=moving.topic, target=moving.cp_b)
