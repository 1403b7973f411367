"""What a move keeps besides the backlog: the source's dead letters (moved to the target when the move says so,
and a move without a choice refused while there are some), and prepared transaction messages, which stay on the
source and keep their back-checks there until resolved, the drain waiting for them."""

from __future__ import annotations

import json

import pytest
from django.core.exceptions import ValidationError

from broker_core.client import Consumer, Producer
from tests.broker.helpers import Received
from tests.moves.conftest import GROUP
from tests.moves.helpers import drain, held_by, wait_state, wait_step

pytestmark = pytest.mark.django_db(transaction=True)


def test_dead_letters_need_a_choice_and_move_to_the_target(moving):
    from apps.moves import actions
    from apps.moves.models import TopicMove
    from devstack.waiting import wait_for

    a, b, name, sre = moving.a, moving.b, moving.name, moving.people.sre
    refused_all = Received()
    with Consumer(name, GROUP, refused_all.handler("c", fail=lambda m: True), **moving.consumer), \
            Producer(**moving.producer) as producer:
        sent = [producer.send(name, b"doomed-%d" % i, message_type="paid") for i in range(5)]
        wait_for(lambda: drain(a.brokers[0], name)["groups"].get(GROUP, {}).get("dead_letters") == 5, 30,
                 "five dead letters on the source")
    with pytest.raises(ValidationError) as refused:
        actions.start_move(actor=sre, topic=moving.topic, target=moving.cp_b, client_follow_s=1)
    assert "holds 5 dead letters" in refused.value.message_dict["dead_letters"][0]
    assert not TopicMove.objects.exists()

    move = actions.start_move(actor=sre, topic=moving.topic, target=moving.cp_b, dead_letters="move",
                              client_follow_s=1)
    wait_state(move, "succeeded", 90)
    listed = json.loads(b.brokers[0].http(f"/admin/dlq?topic={name}&group={GROUP}"))["dead_letters"]
    assert sorted(d["message_id"] for d in listed) == sorted(sent)
    drained = move.steps.get(name="drain")
    assert drained.progress["dlq"]["moved"] == 5 and "5 dead letters moved" in drained.summary
    assert held_by(a, name) == []


@pytest.mark.parametrize("moving", [{"transactional": True, "tx_check_delay_s": 1, "tx_check_interval_s": 1,
                                     "tx_check_max": 5}], indirect=True)
def test_a_prepared_message_keeps_its_back_checks_on_the_source_and_holds_the_drain(moving):
    from apps.moves import actions
    from apps.topics import actions as topics
    from apps.transactions.models import PreparedMessage
    from devstack.waiting import wait_for
    from tests.transactions.helpers import CheckServer, drive_sweeps, prepare_and_die

    name, sre = moving.name, moving.people.sre
    got = Received()
    with CheckServer(lambda payload: "commit") as server, \
            Consumer(name, GROUP, got.handler("c"), **moving.consumer):
        app = topics.set_app_check_hosts(actor=moving.people.lead, app=moving.producer_app, hosts=["127.0.0.1"])
        topics.set_app_check_url(actor=moving.people.dev, app=app, check_url=server.url)
        [prepared] = prepare_and_die(moving.a, name, 1, moving.producer_app.app_id, moving.producer_secret)
        move = actions.start_move(actor=sre, topic=moving.topic, target=moving.cp_b, client_follow_s=1)
        wait_step(move, "drain", 60)
        # nobody resolves it until the sweep runs (its producer died): the drain waits, showing it
        wait_for(lambda: "prepared transaction messages 1" in move.steps.get(name="drain").summary, 30,
                 "the drain to wait for the prepared message")
        drive_sweeps(lambda: prepared in got.ids("c"), 60, what="the back-check to commit the prepared message")
        wait_state(move, "succeeded", 60)
    row = PreparedMessage.objects.get(message_id=prepared)
    assert (row.cluster_id, row.state, row.resolution_source) == (moving.cp_a.pk, "committed", "check")
    assert server.asked and server.asked[0]["cluster"] == moving.cp_a.name
