"""`manage.py secure_zookeeper` on a real ZooKeeper: a chroot made without ACLs (as before docs/security.md's
ACLs existed) gets them on every node; a second run changes nothing."""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError

from apps.audit.models import AuditRecord
from broker_core.layout import LAYOUT, encode
from tests.support.stack import zk_acl_policy

pytestmark = pytest.mark.django_db(transaction=True)

OPEN_NODES = {  # relative path → document, all made by an anonymous client with ZooKeeper's open default ACL
    LAYOUT.META: {"layout_version": 2, "cluster": "dev-a"},
    LAYOUT.topic("orders"): {"name": "orders"},
    LAYOUT.app("checkout"): {"app_id": "checkout", "secrets": [{"hash": "hmac_sha256$salt$xyz", "expires_at": None}]},
    LAYOUT.grant("orders", "checkout"): {"topic": "orders", "app_id": "checkout", "produce": True},
    LAYOUT.binding("orders", "billing"): {"topic": "orders", "group": "billing", "app_id": "checkout"},
}


@pytest.fixture
def anonymous(zk_connect):
    client = KazooClient(hosts=zk_connect, timeout=10)
    client.start(timeout=15)
    yield client
    client.stop()
    client.close()


def run(*args) -> str:
    out = io.StringIO()
    call_command("secure_zookeeper", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def test_secure_an_open_chroot_then_again_changes_nothing(make_cluster, anonymous, zk, people):
    cluster = make_cluster("dev-a")
    root = cluster.zk_chroot
    for path, doc in OPEN_NODES.items():
        anonymous.create(root + path, encode(doc), makepath=True)
    anonymous.create(root + LAYOUT.BROKERS)
    assert anonymous.get(root + LAYOUT.app("checkout"))[0]  # open: anyone reads the hash, anyone writes

    out = run("dev-a")
    # chroot, /meta, /brokers, /topics, /topics/orders, /apps, /apps/checkout, /grants, /grants/orders,
    # /grants/orders/checkout, /bindings, /bindings/orders, /bindings/orders/billing
    assert "13 nodes: 13 secured now, 0 already secured, 0 failed" in out
    assert "depth 0" in out and "depth 3" in out  # progress, level by level

    policy = zk_acl_policy()
    for relative in ["", LAYOUT.BROKERS, *OPEN_NODES]:
        acl, _ = zk.get_acls(root + relative)
        assert policy.matches(relative, acl), relative
    with pytest.raises(NoAuthError):
        anonymous.get(root + LAYOUT.app("checkout"))
    with pytest.raises(NoAuthError):
        anonymous.create(root + LAYOUT.grant("orders", "intruder"), b"{}")
    with pytest.raises(NoAuthError):
        anonymous.set(root + LAYOUT.META, b"{}")
    assert b"layout_version" in anonymous.get(root + LAYOUT.META)[0]  # discovery still reads
    assert anonymous.get_children(root + LAYOUT.BROKERS) == []
    record = AuditRecord.objects.get(action="zookeeper.secure")
    assert (record.object_repr, record.after["changed"], record.source) == ("dev-a", 13, "cli")

    again = run("dev-a")
    assert "13 nodes: 0 secured now, 13 already secured, 0 failed" in again
    assert AuditRecord.objects.filter(action="zookeeper.secure").count() == 1  # nothing changed, nothing recorded


def test_a_chroot_that_does_not_exist_yet_gets_its_skeleton(make_cluster, anonymous, zk):
    cluster = make_cluster("dev-b")
    assert "2 nodes: 0 secured now, 2 already secured" in run("--all")  # the chroot and /brokers, made secured
    with pytest.raises(NoAuthError):
        anonymous.create(cluster.zk_chroot + LAYOUT.TOPICS, b"")


def test_bad_arguments_are_refused(make_cluster):
    make_cluster("dev-a")
    with pytest.raises(CommandError, match="no cluster named nope"):
        run("nope")
    with pytest.raises(CommandError, match="name one or more clusters, or give --all"):
        run()


def test_rotating_the_control_planes_credential(make_cluster, zk, zk_connect, monkeypatch):
    """With the former credential given as SWITCHYARD_ZK_CONTROL_PREVIOUS_AUTH, `secure_zookeeper` moves every
    node to the new identity; afterwards the former credential writes nothing."""
    from apps.provisioning import zk as provisioning_zk
    from broker_core.cluster.zk_acl import control_credential

    cluster = make_cluster("dev-a")
    run("dev-a")
    root = cluster.zk_chroot
    old = control_credential()
    new = f"switchyard-control-2:{'n' * 40}"
    monkeypatch.setenv("SWITCHYARD_ZK_CONTROL_AUTH", new)
    monkeypatch.setenv("SWITCHYARD_ZK_CONTROL_PREVIOUS_AUTH", f"{old.user}:{old.password}")
    provisioning_zk.close_all()  # a restarted control plane opens its sessions afresh
    try:
        assert "2 nodes: 2 secured now" in run("dev-a")
        monkeypatch.delenv("SWITCHYARD_ZK_CONTROL_PREVIOUS_AUTH")
        provisioning_zk.close_all()
        assert "2 nodes: 0 secured now, 2 already secured" in run("dev-a")
        as_new = KazooClient(hosts=zk_connect, timeout=10, auth_data=[("digest", new)])
        as_new.start(timeout=15)
        try:
            as_new.create(root + LAYOUT.TOPICS, b"")  # the chroot's ACL names the new identity
        finally:
            as_new.stop()
            as_new.close()
        with pytest.raises(NoAuthError):  # `zk` authenticates with the former credential only
            zk.create(root + LAYOUT.GRANTS, b"")
    finally:
        provisioning_zk.close_all()
