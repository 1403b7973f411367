"""ZooKeeper ACLs against a real ZooKeeper and real broker processes (docs/security.md).

The cluster is provisioned with the control plane's credential and ACLs (broker_core.cluster.zk_acl). Anyone else
— an anonymous client, or a client holding a broker's credential — can neither write a grant nor read a
secret hash, and a running broker keeps refusing an app that was never granted.
"""

from __future__ import annotations

import pytest
from kazoo.exceptions import NoAuthError

from broker_core import protocol as p
from broker_core.client import BrokerError, Producer
from broker_core.cluster.zk_acl import describe
from broker_core.layout import LAYOUT, encode
from tests.broker.conftest import wait_for
from tests.support.stack import outsider_clients

INTRUDER = "app-intruder"
INTRUDER_SECRET = "s3cret-intruder"


@pytest.fixture
def outsiders(zk_hosts):
    """An anonymous client and one authenticated with the brokers' credential."""
    with outsider_clients(zk_hosts) as clients:
        yield clients


def ungranted_publish(cluster, broker) -> BrokerError:
    with Producer(app_id=INTRUDER, secret=INTRUDER_SECRET, brokers=[broker.address], send_timeout=5) as producer:
        with pytest.raises(BrokerError) as refused:
            producer.send("orders", b"not granted")
    return refused.value


def test_neither_anonymous_clients_nor_brokers_can_grant_and_the_broker_still_refuses(cluster, outsiders):
    anonymous, as_broker = outsiders
    cluster.standard("orders")
    cluster.pv.app(INTRUDER, INTRUDER_SECRET)  # a real app, never granted on `orders`
    broker = cluster.broker()
    grant = cluster.chroot + LAYOUT.grant("orders", INTRUDER)
    doc = encode({"topic": "orders", "app_id": INTRUDER, "produce": True, "revision": 1})

    for who, client in (("anonymous", anonymous), ("broker", as_broker)):
        with pytest.raises(NoAuthError):
            client.create(grant, doc)
        with pytest.raises(NoAuthError):  # nor overwrite the granted app's grant, nor drop it
            client.set(cluster.chroot + LAYOUT.grant("orders", "app-orders"), doc)
        with pytest.raises(NoAuthError):
            client.delete(cluster.chroot + LAYOUT.grant("orders", "app-orders"))
        with pytest.raises(NoAuthError):  # nor start a new grant container, topic or app
            client.create(cluster.chroot + LAYOUT.grant("other", INTRUDER), doc, makepath=True)
        assert cluster.zk_client.exists(grant) is None, who

    error = ungranted_publish(cluster, broker)
    assert error.code == p.E_NOT_GRANTED
    assert "has no grant to publish on topic 'orders'" in error.message
    with Producer(**cluster.client_kwargs()) as producer:  # the granted app, found through anonymous discovery
        assert producer.send("orders", b"granted")


def test_anonymous_clients_read_discovery_only_never_secret_hashes(cluster, outsiders):
    anonymous, as_broker = outsiders
    cluster.standard("orders")
    broker = cluster.broker()
    root = cluster.chroot

    # what discovery needs: /meta, /brokers and each broker's document
    assert b"layout_version" in anonymous.get(root + LAYOUT.META)[0]
    assert anonymous.get_children(root + LAYOUT.BROKERS) == [broker.node_id]
    assert b'"port"' in anonymous.get(root + LAYOUT.broker(broker.node_id))[0]
    # nothing else: not the secret hashes, not what is provisioned
    for path in (LAYOUT.app("app-orders"), LAYOUT.APPS, LAYOUT.topic("orders"), LAYOUT.grant("orders", "app-orders"),
                 LAYOUT.GRANTS):
        with pytest.raises(NoAuthError):
            anonymous.get(root + path)
    with pytest.raises(NoAuthError):
        anonymous.get_children(root + LAYOUT.APPS)
    # a broker reads all of it (that is how it knows apps), but changes none of it
    assert b"hmac_sha256$" in as_broker.get(root + LAYOUT.app("app-orders"))[0]
    with pytest.raises(NoAuthError):
        as_broker.set(root + LAYOUT.app("app-orders"), b"{}")


def test_a_broker_registers_itself_readable_by_all_and_writable_by_brokers_only(cluster, outsiders):
    anonymous, _ = outsiders
    cluster.standard("orders")
    broker = cluster.broker()
    path = cluster.chroot + LAYOUT.broker(broker.node_id)
    acl, _ = cluster.zk_client.get_acls(path)
    assert describe(acl) == "digest:switchyard-broker=ALL, world:anyone=READ"
    assert cluster.pv.policy.matches(LAYOUT.broker(broker.node_id), acl)
    with pytest.raises(NoAuthError):  # nobody else fakes a broker or changes its address
        anonymous.set(path, encode({"node_id": "evil", "host": "203.0.113.9", "port": 1}))
    with pytest.raises(NoAuthError):
        anonymous.create(cluster.chroot + LAYOUT.broker("fake-node"), b"{}", ephemeral=True)
    broker.kill()
    wait_for(lambda: not broker.registered(), 10, "the killed broker's node to expire")
