"""A Celery worker killed with SIGKILL in the middle of a move: the beat task finds the move without a worker,
queues it again, and another worker carries it on to the end; nothing acknowledged is lost."""

from __future__ import annotations

import os

import pytest

from broker_core.client import Consumer, Producer
from tests.broker.helpers import Received
from tests.moves.conftest import GROUP
from tests.moves.helpers import held_by, topic_nodes, wait_state, wait_step

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_move_resumes_after_its_worker_is_killed(moving, paused_worker, trace_dirs):
    from django.db import connection

    from apps.moves import actions, tasks
    from apps.moves.models import MoveStep
    from devstack.waiting import wait_for
    from tests.conftest import kill_worker, start_worker, stop_worker, worker_environment

    name = moving.name
    with Producer(**moving.producer) as producer:  # a backlog on the source, nobody consuming it yet
        sent = [producer.send(name, b"before-%d" % i, message_type="paid") for i in range(200)]
    pause, resume = paused_worker
    pause()  # the shared worker stops taking tasks: this test's own worker takes them
    env = worker_environment(connection.settings_dict["NAME"], trace_dirs, SWITCHYARD_MOVE_LEASE_S="3",
                             SWITCHYARD_MOVE_RUN_BUDGET_S="1")
    own = start_worker(env, trace_dirs["state"] / "celery-worker-killed.log", f"moves-kill-{os.getpid()}")
    try:
        move = actions.start_move(actor=moving.people.sre, topic=moving.topic, target=moving.cp_b,
                                  client_follow_s=1)
        wait_step(move, "drain", 60)
        wait_for(lambda: "backlog 200" in MoveStep.objects.get(move=move, name="drain").summary, 20,
                 "the drain step to read the source's backlog")
        kill_worker(own)  # mid-step: the move's lease and its next run die with it
    finally:
        stop_worker(own)
    resume()
    got = Received()
    with Consumer(name, GROUP, got.handler("c"), **moving.consumer):
        requeued: list[int] = []

        def resumed():
            requeued.extend(tasks.resume_stalled(stale_after_s=1))  # what the beat entry does every 15 s
            return requeued and move.__class__.objects.get(pk=move.pk).state != "running"

        wait_for(resumed, 90, "the move to resume", interval=0.5)
        wait_state(move, "succeeded", 60)
        wait_for(lambda: set(sent) <= set(got.ids("c")), 30, "the backlog consumed")
    assert requeued and set(requeued) == {move.pk}
    assert topic_nodes(moving.a, name) == [] and held_by(moving.a, name) == []
    assert all(s.state == "done" for s in move.steps.all())
