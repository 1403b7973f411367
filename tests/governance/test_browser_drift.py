"""Real browser: ZooKeeper drift is a visible warning on the cluster page; an SRE turns on automatic repair in
the cluster form, and after the next sweep the node is reverted and the warning gone (real ZooKeeper)."""

from __future__ import annotations

import pytest

from apps.audit.models import AuditRecord
from apps.provisioning.desired import META, Desired, meta_doc
from apps.provisioning.reconcile import reconcile
from apps.provisioning.tasks import reconcile_all
from apps.provisioning.zk import Session
from broker_core.layout import LAYOUT, encode
from tests.support.browser import login

pytestmark = pytest.mark.django_db(transaction=True)


def test_drift_warning_on_the_cluster_page_and_repair_turned_on_in_the_form(live_server, page, people, make_cluster,
                                                                            zk):
    cluster = make_cluster("dev-a")
    session = Session(cluster.zk_connect, cluster.zk_chroot)
    session.ensure_skeleton()  # as the first push makes it
    session.put(LAYOUT.META, Desired(META, cluster.pk, LAYOUT.META, meta_doc(cluster)).data)
    assert reconcile(cluster, actor=people.sre).drift_count == 0
    # by hand, with ZooKeeper's open default ACL: a grant, and on the way its two container nodes
    hand_made = cluster.zk_chroot + LAYOUT.grant("orders", "intruder")
    zk.create(hand_made, encode({"topic": "orders", "app_id": "intruder", "produce": True}), makepath=True)
    reconcile(cluster, actor=people.sre)
    assert AuditRecord.objects.filter(action="zookeeper.drift_detected").count() == 1

    login(page, live_server.url, people.sre.username)
    page.goto(f"{live_server.url}/clusters/dev-a/")
    alert = page.locator("[data-testid=drift-alert]")
    assert "found 3 nodes" in alert.inner_text()
    assert "0 missing, 1 unexpected, 0 different, 2 with a wrong ACL" in alert.inner_text()
    assert "Automatic repair is off" in alert.inner_text()
    assert page.locator("[data-testid=repair-drift]").inner_text() == "no"

    page.goto(f"{live_server.url}/clusters/dev-a/edit/")
    page.check("#id_repair_drift")
    page.click("main button[type=submit]")
    page.wait_for_url(f"{live_server.url}/clusters/dev-a/")
    assert page.locator("[data-testid=repair-drift]").inner_text() == "yes"
    assert "Automatic repair is on" in page.locator("[data-testid=drift-alert]").inner_text()
    update = AuditRecord.objects.filter(action="cluster.update").latest("id")
    assert (update.before["repair_drift"], update.after["repair_drift"]) == (False, True)

    reconcile_all.apply()  # the periodic sweep's body, here in the test process
    assert zk.exists(hand_made) is None
    page.goto(f"{live_server.url}/clusters/dev-a/")
    assert page.locator("[data-testid=drift-alert]").count() == 0
