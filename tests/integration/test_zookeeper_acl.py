"""ZooKeeper ACLs on what the control plane provisioned (REST workflow → real Celery worker → real ZooKeeper),
enforced for a real broker process; and drift written behind the platform's back is an alert and, when the
cluster says so, is reverted (docs/security.md, "ZooKeeper ACLs and application secrets")."""

from __future__ import annotations

import re

import pytest
from django.test import Client
from kazoo.exceptions import NoAuthError
from kazoo.security import OPEN_ACL_UNSAFE

from broker_core import protocol as p
from broker_core.client import BrokerError, Producer
from broker_core.layout import LAYOUT, encode
from tests.integration.conftest import CONSUMER_APP, PRODUCER_APP, TOPIC, wait_for
from tests.support.stack import outsider_clients

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def outsiders(governed):
    """An anonymous ZooKeeper client and one holding the brokers' credential."""
    with outsider_clients(governed.cluster.zk_hosts) as clients:
        yield clients


def consumer_publishes(governed, broker) -> str | None:
    """The refusal code when the consumer app (bound, never granted to produce) publishes; None if accepted."""
    with Producer(app_id=CONSUMER_APP, secret=governed.consumer_secret, brokers=[broker.address],
                  send_timeout=5) as producer:
        try:
            producer.send(TOPIC, b"from an app without a grant", message_type="paid")
        except BrokerError as err:
            return err.code
    return None


def drift_metric(cluster_name: str) -> float:
    from tests.support.stack import monitoring_token

    body = Client().get("/metrics", HTTP_AUTHORIZATION=f"Bearer {monitoring_token()}").content.decode()
    found = re.search(rf'^switchyard_zookeeper_drift_objects{{cluster="{re.escape(cluster_name)}"}} (\S+)$', body,
                      re.M)
    assert found, f"no drift figure for {cluster_name} in /metrics:\n{body}"
    return float(found.group(1))


def test_only_the_control_plane_writes_and_the_ungranted_app_stays_refused(governed, outsiders):
    anonymous, as_broker = outsiders
    root = governed.cluster.chroot
    broker = governed.cluster.broker()
    grant = root + LAYOUT.grant(TOPIC, CONSUMER_APP)
    doc = encode({"topic": TOPIC, "app_id": CONSUMER_APP, "produce": True, "revision": 1})
    for client in (anonymous, as_broker):
        with pytest.raises(NoAuthError):
            client.create(grant, doc)
        with pytest.raises(NoAuthError):
            client.set(root + LAYOUT.grant(TOPIC, PRODUCER_APP), doc)
    with pytest.raises(NoAuthError):  # the secret hashes the control plane wrote
        anonymous.get(root + LAYOUT.app(PRODUCER_APP))
    assert b"layout_version" in anonymous.get(root + LAYOUT.META)[0]
    assert consumer_publishes(governed, broker) == p.E_NOT_GRANTED
    with Producer(**governed.producer, send_timeout=5) as producer:
        assert producer.send(TOPIC, b"granted", message_type="paid")


def test_drift_written_with_the_control_planes_credential_is_an_alert_then_repaired(governed, outsiders):
    from apps.audit.models import AuditRecord
    from apps.clusters import actions as clusters
    from apps.provisioning.tasks import reconcile_all

    anonymous, _ = outsiders
    cluster, cp, admin = governed.cluster, governed.cp, governed.people.admin
    root = cluster.chroot
    broker = cluster.broker()
    # someone holding the control plane's own credential grants an app by hand, and opens the secret hashes
    cluster.zk_client.create(root + LAYOUT.grant(TOPIC, CONSUMER_APP),
                             encode({"topic": TOPIC, "app_id": CONSUMER_APP, "produce": True, "revision": 1}))
    cluster.zk_client.set_acls(root + LAYOUT.app(PRODUCER_APP), OPEN_ACL_UNSAFE)
    assert b"hmac_sha256$" in anonymous.get(root + LAYOUT.app(PRODUCER_APP))[0]
    wait_for(lambda: consumer_publishes(governed, broker) is None, 10, "the broker to apply the hand-made grant")

    summary = reconcile_all.delay().get(timeout=60)  # the periodic sweep, in the real worker
    assert summary[cp.name]["drift"] == 2
    alert = AuditRecord.objects.get(action="zookeeper.drift_detected")
    assert alert.object_repr == cp.name and alert.after["repairing"] is False
    assert sorted(alert.after["new"]) == [f"acl {LAYOUT.app(PRODUCER_APP)}",
                                          f"unexpected {LAYOUT.grant(TOPIC, CONSUMER_APP)}"]
    assert drift_metric(cp.name) == 2
    assert consumer_publishes(governed, broker) is None, "not repaired: the cluster's setting is off"

    reconcile_all.delay().get(timeout=60)  # the same drift, still open: one alert, not one per sweep
    assert AuditRecord.objects.filter(action="zookeeper.drift_detected").count() == 1

    clusters.update_cluster(actor=admin, cluster=cp, repair_drift=True)
    summary = reconcile_all.delay().get(timeout=60)
    assert summary[cp.name]["drift"] == 2
    assert cluster.zk_client.exists(root + LAYOUT.grant(TOPIC, CONSUMER_APP)) is None
    with pytest.raises(NoAuthError):
        anonymous.get(root + LAYOUT.app(PRODUCER_APP))
    repairs = AuditRecord.objects.filter(action="zookeeper.repair").order_by("id")
    assert sorted(r.after["path"] for r in repairs) == [LAYOUT.app(PRODUCER_APP), LAYOUT.grant(TOPIC, CONSUMER_APP)]
    assert drift_metric(cp.name) == 0
    assert wait_for(lambda: consumer_publishes(governed, broker), 10,
                    "the broker to drop the reverted grant") == p.E_NOT_GRANTED
