"""Fixtures of the rebalance tests: the cast (tests.governance), and for the live test the broker test cluster and
a governed topic on it (tests.integration)."""

import json

import pytest

from broker_core.layout import LAYOUT
from tests.broker.conftest import cluster, zk, zk_hosts  # noqa: F401  (the broker fixtures)
from tests.governance.conftest import approved_topic, paused_worker, people, topic_fields  # noqa: F401  (fixtures)


@pytest.fixture
def placed(people, zk_connect, zk_chroot):  # noqa: F811
    """A control-plane cluster whose ZooKeeper registers brokers b1..b4 (b4 just added) and holds topic `orders`,
    3 partitions of 2 replicas on b1..b3."""
    from apps.clusters import actions
    from tests.support.stack import control_zk_client

    client = control_zk_client(zk_connect, timeout=5)
    client.start(timeout=5)
    for node in ("b1", "b2", "b3", "b4"):
        client.create(zk_chroot + LAYOUT.broker(node), json.dumps({"node_id": node, "host": "127.0.0.1", "port": 1,
                                                               "metrics_port": 2}).encode(), makepath=True)
    doc = {"topic": "orders", "epoch": 1, "partitions": [{"id": 0, "replicas": ["b1", "b2"]},
                                                         {"id": 1, "replicas": ["b2", "b3"]},
                                                         {"id": 2, "replicas": ["b3", "b1"]}]}
    client.create(zk_chroot + LAYOUT.placement("orders"), json.dumps(doc).encode(), makepath=True)
    client.stop()
    client.close()
    return actions.create_cluster(actor=people.admin, name="rb-api", environment="dev", region="local",
                                  zk_connect=zk_connect, zk_chroot=zk_chroot, storage_level="file")
