"""A topic moves between two clusters of real brokers while a producer and a consumer group of two keep running,
never restarted: every acknowledged message is consumed, duplicates are counted, and the source holds nothing of
the topic afterwards (no ZooKeeper node; every broker's drain says held false)."""

from __future__ import annotations

import pytest

from broker_core.client import Consumer
from tests.broker.conftest import REPORTS
from tests.broker.helpers import Received
from tests.moves.conftest import GROUP
from tests.moves.helpers import SteadyProducer, held_by, route_node, topic_nodes, wait_state

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_topic_moves_while_its_producer_and_group_of_two_keep_running(moving):
    from apps.audit.models import AuditRecord
    from apps.moves import actions
    from apps.moves.choices import FORWARD
    from apps.topics.models import Topic
    from devstack.waiting import wait_for

    a, b, name = moving.a, moving.b, moving.name
    got = Received()
    consumers = [Consumer(name, GROUP, got.handler(f"c{i}"), **moving.consumer).start() for i in range(2)]
    try:
        with SteadyProducer(name, 100, **moving.producer) as producer:
            wait_for(lambda: got.count("c0", "c1") >= 20, 20, "deliveries before the move")
            move = actions.start_move(actor=moving.people.sre, topic=moving.topic, target=moving.cp_b,
                                      client_follow_s=2)
            wait_state(move, "succeeded", 120)
            after = len(producer.acked)
            wait_for(lambda: len(producer.acked) >= after + 50, 20, "publishes after the move")
        acked = set(producer.acked)
        wait_for(lambda: acked <= set(got.ids("c0")) | set(got.ids("c1")), 30, "every acknowledged message")
    finally:
        for consumer in consumers:
            consumer.stop()
    received = got.ids("c0") + got.ids("c1")
    duplicates = len(received) - len(set(received))
    REPORTS.append(f"live move: {len(acked)} acknowledged, 0 lost, {duplicates} duplicates, longest send "
                   f"{producer.longest * 1000:.0f} ms")
    assert not producer.errors, producer.errors[:5]
    assert got.ids("c0") and got.ids("c1"), "both members of the group got messages"
    assert Topic.objects.get(pk=moving.topic.pk).cluster_id == moving.cp_b.pk
    assert topic_nodes(a, name) == [], "the source's ZooKeeper holds nothing of the topic"
    assert held_by(a, name) == [], "no broker of the source holds the topic"
    assert route_node(b, name)["produce"] == b.name and route_node(b, name)["consume"] == [b.name]
    assert [s.state for s in move.steps.all()] == ["done"] * len(FORWARD)
    done = list(AuditRecord.objects.filter(action="move.step_done", object_id=str(move.pk)).order_by("id")
                .values_list("after__step", flat=True))
    assert done == [str(s) for s in FORWARD[1:]]
    assert AuditRecord.objects.filter(action="move.succeeded", object_id=str(move.pk), actor_name="system:moves").exists()
    assert AuditRecord.objects.get(action="move.started", object_id=str(move.pk)).actor_name == moving.people.sre.username
