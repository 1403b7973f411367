"""A Celery worker killed with SIGKILL while a rebalance waits in a step's catch-up (the added broker has no
cluster secret yet, so it cannot replicate): the beat task finds the rebalance without a worker, queues it again,
and another worker carries it on from the phase recorded — the replica is not added twice — to the end, once the
broker is restarted with the secret and catches up."""

from __future__ import annotations

import json
import os

import pytest

from broker_core.client import Producer
from broker_core.layout import LAYOUT
from tests.broker.conftest import APP
from tests.integration.conftest import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

SECRET_VAR = "SWITCHYARD_BROKER_CLUSTER_SECRET_FILE"


def test_a_rebalance_resumes_from_its_phase_after_its_worker_is_killed(cluster, people, paused_worker, trace_dirs):
    from django.db import connection

    from apps.rebalancing import actions, tasks
    from apps.rebalancing.models import Rebalance
    from tests.conftest import kill_worker, start_worker, stop_worker, worker_environment
    from tests.transactions.helpers import control_plane_cluster

    secret = cluster.state / "cluster-secret"
    secret.write_text(os.urandom(32).hex())
    secret.chmod(0o600)
    cluster.standard("orders")
    cluster.pv.meta(min_insync=1)
    cluster.pv.topic("orders", partitions=3, replication_factor=2)
    cluster.pv.binding("orders", "billing", APP)
    brokers = [cluster.broker(env={SECRET_VAR: str(secret)}, start=False) for _ in range(3)]
    before = cluster.pv.placement("orders", 3, 2, [b.node_id for b in brokers])  # before they start: they open
    for b in brokers:  # the three partitions at once
        b.start()
    with Producer(**cluster.client_kwargs()) as producer:
        producer.send_many("orders", [b"m%d" % i for i in range(300)])
    new = cluster.broker(env={SECRET_VAR: None})  # registered, but it cannot follow a leader without the secret
    cp = control_plane_cluster(people.admin, cluster)

    pause, resume = paused_worker
    pause()  # the shared worker stops taking tasks: this test's own worker takes them
    env = worker_environment(connection.settings_dict["NAME"], trace_dirs, SWITCHYARD_REBALANCE_LEASE_S="3",
                             SWITCHYARD_REBALANCE_RUN_BUDGET_S="1")
    own = start_worker(env, trace_dirs["state"] / "celery-worker-rebalance.log", f"rebalance-kill-{os.getpid()}")
    try:
        rebalance = actions.start_rebalance(actor=people.sre, cluster=cp)
        [step] = rebalance.steps
        assert step["target"] == new.node_id
        wait_for(lambda: Rebalance.objects.filter(pk=rebalance.pk, phase="catch_up",
                                                  summary__contains="catching up").exists(), 20,
                 "the catch-up to wait on the new broker")
        kill_worker(own)  # mid-step: the lease and the queued next run die with it
    finally:
        stop_worker(own)
    new.kill()
    new.env[SECRET_VAR] = str(secret)
    new.start()
    resume()
    requeued: list[int] = []

    def resumed():
        requeued.extend(tasks.resume_stalled(stale_after_s=1))  # what the beat entry does every 15 s
        return requeued and Rebalance.objects.get(pk=rebalance.pk).state == "succeeded"

    wait_for(resumed, 30, "the rebalance to resume and end", interval=0.5)
    assert set(requeued) == {rebalance.pk}
    doc = json.loads(cluster.zk_client.get(cluster.chroot + LAYOUT.placement("orders"))[0])
    assert doc["epoch"] == before["epoch"] + 2, "the add written once, then the drop: no phase ran twice"
    replicas = doc["partitions"][step["partition"]]["replicas"]
    assert new.node_id in replicas and step["source"] not in replicas
    # the leader is the one elected in /partition-state (a leader the drop took off was replaced by an ISR replica)
    state_path = cluster.chroot + LAYOUT.partition_state("orders", step["partition"])

    def new_replica_in_sync() -> bool:
        leader_id = json.loads(cluster.zk_client.get(state_path)[0])["leader"]
        if leader_id not in replicas:
            return False
        leader = next(b for b in brokers + [new] if b.node_id == leader_id)
        leading = leader.stats()["topics"]["orders"]["replication"]["leading"].get(str(step["partition"]))
        return leading is not None and (leader_id == new.node_id or leading["followers"].get(new.node_id, {}).get("in_sync") is True)

    wait_for(new_replica_in_sync, 15, "the new replica in sync with the elected leader")
