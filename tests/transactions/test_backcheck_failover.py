"""Issue 20 with the control plane: a prepared message on a topic of replication factor 2 whose producer died,
and whose leader is then killed with its data folder deleted, is back-checked on the new leader by the real
Celery worker's sweep, answered by the producer's restarted check listener, committed there and delivered."""

import os

import pytest
from django.db import connection

from apps.transactions.models import PreparedMessage
from broker_core.client import Consumer, Producer
from broker_core.layout import LAYOUT
from devstack.waiting import wait_for
from tests.broker.conftest import APP, SECRET, cluster, zk, zk_hosts  # noqa: F401  (the broker fixtures)
from tests.broker.helpers import Received
from tests.broker.test_failover import SECRET_VAR, state
from tests.broker.test_replication import in_sync
from tests.conftest import admin_token
from tests.transactions.helpers import (
    control_plane_cluster,
    drive_sweeps,
    prepare_and_die,
    transactional_topic,
)

pytestmark = pytest.mark.django_db(transaction=True)


def test_an_open_prepare_is_back_checked_and_committed_on_the_new_leader(cluster, people, celery_worker,  # noqa: F811
                                                                          settings):
    from apps.topics import actions

    settings.SWITCHYARD_BROKER_ADMIN_TOKEN = admin_token()
    secret = cluster.state / "cluster-secret"
    secret.write_text(os.urandom(32).hex())
    secret.chmod(0o600)
    cluster.standard("orders")
    cluster.pv.meta(min_insync=1)
    cluster.pv.binding("orders", "billing", APP)
    cp = control_plane_cluster(people.admin, cluster)
    topic = transactional_topic(cp, cluster, "orders")
    topic.replication_factor = 2
    topic.save()
    cluster.pv.topic("orders", partitions=1, replication_factor=2, transactional=True,
                     tx_check={"delay_s": 1, "interval_s": 1, "max_checks": 10})
    actions.create_app(actor=people.dev, app_id=APP, team=people.dev.teams.get())
    leader, follower = (cluster.broker(admin_token=admin_token(), env={SECRET_VAR: str(secret)}) for _ in range(2))
    cluster.pv.placement("orders", 1, 2, [leader.node_id, follower.node_id])
    assert cluster.zk_client.exists(cluster.chroot + LAYOUT.placement("orders"))
    wait_for(lambda: in_sync(leader) == 2, 20, "the follower in sync")

    (message_id,) = prepare_and_die(cluster, "orders", 1, APP, SECRET)  # prepared on the leader, replicated
    leader.lose_disk()
    wait_for(lambda: state(cluster, 0)["leader"] == follower.node_id, 30, "the follower elected")

    got = Received()
    consumer = Consumer("orders", "billing", got.handler("billing"), **cluster.client_kwargs())
    consumer.start()
    try:
        with Producer(**cluster.client_kwargs(check_listener=lambda check: "commit")) as producer:
            producer.send("orders", b"hello", message_type="paid")  # connected with its listener
            drive_sweeps(lambda: PreparedMessage.objects.filter(message_id=message_id, state="committed").exists(),
                         60, what="the open prepare committed by a back-check on the new leader")
        row = PreparedMessage.objects.get(message_id=message_id)
        assert row.resolution_source == "check" and row.broker == follower.node_id
        wait_for(lambda: message_id in got.ids("billing"), 20, "the committed message delivered")
    finally:
        consumer.stop()
        connection.close()
