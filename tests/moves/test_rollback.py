"""A move rolled back from each step before deprovisioning leaves the topic working on the source: served and
consumed there only, nothing left on the target, and every message acknowledged during the move (some of them
stored on the target once producers had switched) consumed. A producer keeps sending throughout."""

from __future__ import annotations

import json

import pytest

from broker_core.client import Consumer
from tests.broker.helpers import Received
from tests.moves.conftest import GROUP
from tests.moves.helpers import SteadyProducer, held_by, route_node, topic_nodes, wait_state, wait_step

pytestmark = pytest.mark.django_db(transaction=True)

STEPS = ["provision", "consume_both", "switch_producers", "drain", "cutover"]
AFTER_SWITCH = ("drain", "cutover")  # producers have stored messages on the target by then


def published_on(broker_cluster, topic: str) -> int:
    stats = json.loads(broker_cluster.brokers[0].http("/stats"))
    return stats["topics"].get(topic, {}).get("published", 0)


@pytest.mark.parametrize("step", STEPS)
def test_rollback_from_each_step_leaves_the_topic_working_on_the_source(moving, step, paused_worker):
    from apps.audit.models import AuditRecord
    from apps.moves import actions, runner
    from apps.provisioning.models import Placement
    from apps.topics.models import Topic
    from devstack.waiting import wait_for

    a, b, name, sre = moving.a, moving.b, moving.name, moving.people.sre
    got = Received()
    consumers = []

    def consume():
        consumers.append(Consumer(name, GROUP, got.handler("c"), **moving.consumer).start())

    if step != "drain":
        consume()  # without consumers the source never drains: the drain step holds there
    seen_on_target = 0
    try:
        with SteadyProducer(name, 50, **moving.producer) as producer:
            wait_for(lambda: len(producer.acked) >= 5, 10, "publishes on the source")
            if step == "provision":
                pause, resume = paused_worker
                pause()
                move = actions.start_move(actor=sre, topic=moving.topic, target=moving.cp_b, client_follow_s=1)
                # one run of the move here: it places the topic on the target and waits for its objects to land
                runner.advance(move.pk, "test", lambda delay: None)
                assert Placement.objects.filter(topic=moving.topic, cluster=moving.cp_b).exists()
                actions.rollback_move(actor=sre, move=move)
                resume()
            else:
                move = actions.start_move(actor=sre, topic=moving.topic, target=moving.cp_b, client_follow_s=1)
                wait_step(move, step)
                if step in AFTER_SWITCH:
                    seen_on_target = wait_for(lambda: published_on(b, name), 10, "publishes on the target")
                actions.rollback_move(actor=sre, move=move)
            if not consumers:
                consume()
            wait_state(move, "rolled_back", 90)
            after = len(producer.acked)
            wait_for(lambda: len(producer.acked) >= after + 10, 10, "publishes after the rollback")
        acked = set(producer.acked)
        wait_for(lambda: acked <= set(got.ids("c")), 30, "every acknowledged message consumed")
    finally:
        for consumer in consumers:
            consumer.stop()
    assert not producer.errors, producer.errors[:5]
    requested = AuditRecord.objects.get(action="move.rollback_requested", object_id=str(move.pk))
    assert requested.after["from_step"] == step and requested.actor_name == sre.username
    if step in AFTER_SWITCH:
        assert seen_on_target > 0
    topic = Topic.objects.get(pk=moving.topic.pk)
    assert topic.cluster_id == moving.cp_a.pk and not Placement.objects.filter(topic=topic).exists()
    assert route_node(a, name)["produce"] == a.name and route_node(a, name)["consume"] == [a.name]
    assert topic_nodes(b, name) == [] and held_by(b, name) == []
