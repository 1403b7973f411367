"""The worker applies a rebalance step by step and records where it is: the add phase writes the new replica
last with the placement's epoch bumped; the catch-up waits — and says why — while the partition's leader does not
answer (no broker process listens behind these registrations, so the new replica is never seen in sync and the
old one is never dropped); an SRE's abandon stops it there and the placement stays as it was left."""

from __future__ import annotations

import json

import pytest

from broker_core.layout import LAYOUT
from devstack.waiting import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_catch_up_waits_for_an_in_sync_replica_and_an_abandon_stops_there(people, placed, celery_worker):
    from apps.rebalancing import actions
    from apps.rebalancing.models import Rebalance
    from tests.support.stack import control_zk_client

    rebalance = actions.start_rebalance(actor=people.sre, cluster=placed)
    [step] = rebalance.steps
    waiting = wait_for(lambda: Rebalance.objects.filter(pk=rebalance.pk, phase="catch_up",
                                                        summary__contains="did not answer").first(),
                       20, "the catch-up to wait on the leader")
    assert (waiting.state, waiting.position) == ("running", 0)
    assert waiting.summary.startswith("step 1 of 1: ")
    assert waiting.progress["leader"] == "b3" and waiting.progress["in_sync"] is False

    client = control_zk_client(placed.zk_connect, timeout=5)
    client.start(timeout=5)
    try:
        doc = json.loads(client.get(placed.zk_chroot + LAYOUT.placement("orders"))[0])
        assert doc["epoch"] == 2, "one write: the add"
        assert doc["partitions"][step["partition"]]["replicas"] == ["b3", "b1", "b4"], "b4 follows; b1 stays"

        actions.abandon_rebalance(actor=people.sre, rebalance=rebalance)
        stopped = Rebalance.objects.get(pk=rebalance.pk)
        assert stopped.state == "abandoned" and stopped.finished_at is not None
        version = client.exists(placed.zk_chroot + LAYOUT.placement("orders")).version
        wait_for(lambda: Rebalance.objects.filter(pk=rebalance.pk, lease_owner="").exists(), 10,
                 "the worker to let the abandoned rebalance go")
        assert client.exists(placed.zk_chroot + LAYOUT.placement("orders")).version == version
    finally:
        client.stop()
        client.close()
    assert Rebalance.objects.get(pk=rebalance.pk).summary.startswith("abandoned at step 1 of 1 (catch_up)")
